"""The cluster as the planner sees it, assembled from the decider's records.

The same format-v1 snapshot the simulator builds from its state and a user
feeds ``gpuyield plan``: a decision record's snapshot replays the decision.
Choices made here (see docs/design/0003-controller.md):

- a job is a PodGroup (its Volcano Job's name) with its GPU pods; jobs that
  ask for no GPUs are left out, they neither free nor need any;
- a pending job whose pods do not exist yet (Volcano creates them when the
  PodGroup is admitted) gets the pods its Volcano Job's tasks describe;
- pods on their way out (terminating, or of a job yielding now) hold their
  GPUs until they are gone, so they appear as a separate job that may not be
  preempted, ``<job>~leaving``;
- GPUs nominated for another preemptor are taken off their node's capacity;
- a queue a job names but the watch has not delivered is an unlimited,
  reclaimable queue of weight 1 (Volcano's ``default`` queue, as installed).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuyield.agents.controller import queue_capability, yields
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.records import (
    EVICTIONS,
    GROUP,
    NODE,
    POD,
    PROGRESS,
    QUEUE,
    RESERVATION,
    SUSPENDED,
    VJOB,
    YIELD,
    EvictionsRecord,
    GroupRecord,
    NodeRecord,
    Overlay,
    PodRecord,
    ProgressRecord,
    QueueRecord,
    ReservationRecord,
    SuspendedRecord,
    VJobRecord,
    YieldRecord,
)
from gpuyield.agents.controller.snapshot_parts import LEAVING, Entry, SnapshotParts
from gpuyield.schemas import Job, JobState, Node, Pod, PodPhase, Queue, Snapshot, Topology
from gpuyield.schemas.snapshot import REFERENCE_TOTALS, GpuAmount, GpuLimit, JobReferences

PLACED_GROUP_PHASES = frozenset({"Running"})
TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the decider reasons about it."""

    name: str  # namespace/name
    queue: str
    priority: float
    state: JobState
    pods: tuple[Pod, ...]
    leaving: tuple[Pod, ...]
    min_available: int | None
    preemptable: bool
    submitted_at: float | None
    started_at: float | None
    unschedulable: bool
    group_phase: str
    sla_deadline: float | None = None
    """Creation plus ``gpuyield.io/sla-seconds`` (the PodGroup's, else the Volcano Job's)."""

    @property
    def placed(self) -> int:
        return sum(1 for p in self.pods if p.node is not None)

    @property
    def waiting(self) -> bool:
        """Pending with pods to place: a demand, once Volcano says it cannot place them.

        Not while its own pods are leaving: a job yielding now (a gang that
        broke a deadlock, say) must not evict others for the pods it gives up.
        """
        return (
            self.state is JobState.PENDING
            and self.group_phase not in PLACED_GROUP_PHASES
            and any(p.node is None for p in self.pods)
            and not self.leaving
        )


def _priority(values: list[float], classes: list[str | None], config: ControllerConfig) -> float:
    if values:
        return max(values)
    for name in classes:
        if name is not None and name in config.priority_classes:
            return float(config.priority_classes[name])
    return 0.0


def _pods_by_job(
    records: Overlay,
) -> tuple[dict[str, GroupRecord], dict[str, list[tuple[str, PodRecord]]]]:
    groups: dict[str, GroupRecord] = {}
    group_job: dict[str, str] = {}
    for tail, group in records.typed_prefix(GROUP, GroupRecord):
        job = f"{group.namespace}/{group.job}"
        groups[job] = group
        group_job[tail] = job
    pods_of: dict[str, list[tuple[str, PodRecord]]] = {}
    for tail, pod in records.typed_prefix(POD, PodRecord):
        if pod.job:
            job = f"{pod.namespace}/{pod.job}"
        elif pod.group:
            job = group_job.get(f"{pod.namespace}/{pod.group}", "")
        else:
            continue  # not a gang member: Volcano never preempts for or from it here
        if job:
            pods_of.setdefault(job, []).append((tail, pod))
    return groups, pods_of


def known_jobs(records: Overlay) -> frozenset[str]:
    """Every job (``namespace/name``) that a watched PodGroup, Volcano Job or pod names."""
    groups, pods_of = _pods_by_job(records)
    return frozenset({*groups, *pods_of, *(t for t, _ in records.typed_prefix(VJOB, VJobRecord))})


def jobs(records: Overlay, config: ControllerConfig) -> dict[str, JobView]:
    """Every GPU job the records know, by ``namespace/name``, rebuilt from the whole table.

    The decider keeps the same views incrementally (``index.RecordIndex``);
    this full rebuild serves the readers that run once (``gpuyield status``,
    ``doctor``) and is the reference the index is tested against.
    """
    groups: dict[str, list[GroupRecord]] = {}
    for _, group in records.typed_prefix(GROUP, GroupRecord):
        groups.setdefault(f"{group.namespace}/{group.job}", []).append(group)
    _, pods_of = _pods_by_job(records)
    vjobs = dict(records.typed_prefix(VJOB, VJobRecord))
    yields_of: dict[str, list[YieldRecord]] = {}
    for _, record in records.typed_prefix(YIELD, YieldRecord):
        yields_of.setdefault(record.job, []).append(record)
    suspended = dict(records.typed_prefix(SUSPENDED, SuspendedRecord))
    out: dict[str, JobView] = {}
    for name in sorted(set(groups) | set(vjobs) | set(pods_of)):
        view = job_view(
            name,
            groups.get(name, [None])[-1],
            vjobs.get(name),
            pods_of.get(name, []),
            leaving_of(yields_of.get(name, ())),
            suspended.get(name),
            records.typed(PROGRESS + name, ProgressRecord),
            config,
        )
        if view is not None:
            out[name] = view
    return out


def leaving_of(records: Iterable[YieldRecord]) -> frozenset[str]:
    """The pods of one job that its yields make leave."""
    out: frozenset[str] = frozenset()
    for record in records:
        out = out | yields.leaving_pods(record)
    return out


def job_view(
    name: str,
    group: GroupRecord | None,
    vjob: VJobRecord | None,
    members: list[tuple[str, PodRecord]],
    leaving_pods: frozenset[str],
    suspension: SuspendedRecord | None,
    progress: ProgressRecord | None,
    config: ControllerConfig,
) -> JobView | None:
    """Job ``name`` as the decider reasons about it, from its own records alone (None: it
    holds and needs no GPUs). ``members``: its pods by key tail, in key order; ``group``:
    its PodGroup (the last in key order when two name the same job)."""
    live = [(k, p) for k, p in members if p.phase not in TERMINAL_POD_PHASES and p.gpus > 0]
    staying: list[Pod] = []
    leaving: list[Pod] = []
    for tail, pod in live:
        placed = pod.node is not None
        model = Pod(
            name=tail.split("/", 1)[1],
            gpus=pod.gpus,
            node=pod.node,
            phase=PodPhase.RUNNING if placed else PodPhase.PENDING,
        )
        if placed and (pod.terminating or model.name in leaving_pods):
            leaving.append(model)
        elif not pod.terminating:
            staying.append(model)
    if not any(p.node is not None for p in staying) and vjob is not None:
        staying = _planned_pods(name, vjob, staying)
    if not staying and not leaving:
        return None
    any_placed = any(p.node is not None for p in staying)
    group_phase = group.phase if group else ("Running" if any_placed else "Pending")
    # A job whose resume was issued waits like any pending job from then on.
    suspended = suspension is not None and suspension.resume_issued is None
    if any_placed and (group_phase in PLACED_GROUP_PHASES or group is None):
        state = JobState.RUNNING
    elif suspended and not any_placed:
        state = JobState.SUSPENDED
    elif any_placed:
        state = JobState.RUNNING  # partly placed: the planner treats it as a running gang
    else:
        state = JobState.PENDING
    pod_records = [p for _, p in members]
    priority = _priority(
        [float(p.priority) for p in pod_records if p.priority is not None],
        [
            *(p.priority_class for p in pod_records),
            group.priority_class if group else None,
            vjob.priority_class if vjob else None,
        ],
        config,
    )
    started = [p.started_at for p in pod_records if p.started_at is not None]
    if progress is not None and state is JobState.RUNNING:
        started.append(progress.first_seen_at)
    min_available = group.min_member if group else None
    if min_available is None and vjob is not None:
        min_available = vjob.min_available
    owner = group or vjob
    return JobView(
        name=name,
        queue=owner.queue if owner else "default",
        priority=priority,
        state=state,
        pods=tuple(staying),
        leaving=tuple(leaving),
        min_available=min_available,
        preemptable=all(r.preemptable for r in (group, vjob) if r)
        and all(p.preemptable for p in pod_records),
        submitted_at=owner.created_at if owner else None,
        started_at=min(started) if started and state is JobState.RUNNING else None,
        unschedulable=bool(group and group.unschedulable)
        or any(p.unschedulable for p in pod_records if p.node is None),
        group_phase=group_phase,
        sla_deadline=_sla_deadline(group, vjob),
    )


def _sla_deadline(group: GroupRecord | None, vjob: VJobRecord | None) -> float | None:
    for record in (group, vjob):
        if record is not None and record.sla_s is not None and record.created_at is not None:
            return record.created_at + record.sla_s
    return None


def _planned_pods(job: str, vjob: VJobRecord, existing: list[Pod]) -> list[Pod]:
    """The pods a not-yet-admitted Volcano Job will create, with those that exist."""
    have = {p.name for p in existing}
    pods = list(existing)
    short = job.split("/", 1)[1]
    for task in vjob.tasks:
        for index in range(task.replicas):
            name = f"{short}-{task.name}-{index}"  # Volcano's pod naming
            if name not in have and task.gpus_per_pod > 0:
                pods.append(Pod(name=name, gpus=task.gpus_per_pod, phase=PodPhase.PENDING))
    return pods


def snapshot(
    records: Overlay,
    views: Mapping[str, JobView],
    preemptor: str,
    now: float,
    config: ControllerConfig,
    *,
    held: Mapping[str, int] | None = None,
    parts: SnapshotParts | None = None,
) -> Snapshot:
    """The planner's input for making room for ``preemptor``.

    ``held``: free GPUs per node set aside for someone else in this step
    only (heavier suspended jobs that do not fit yet), taken off capacity.
    ``parts``: the last snapshot's parts, reused where nothing they are built
    from changed (the decider's, kept in its index, which tells them what
    changed: ``SnapshotParts.feed``; without it every job is looked at).
    """
    parts = SnapshotParts() if parts is None else parts
    parts.start()
    feed = parts.feed
    # The step's own progress and eviction records are not the table's yet: their jobs
    # are made again now, and at the next snapshot (the step's outcome may be dropped).
    written = {
        key[len(prefix) :]
        for key in records.writes
        for prefix in (PROGRESS, EVICTIONS)
        if key.startswith(prefix)
    }
    if feed is not None:
        parts.feed = set(written)
        feed |= written
    totals = parts.totals
    totals.update(views, feed)
    reservations = records.typed_prefix(RESERVATION, ReservationRecord)
    reserved = reserved_gpus(reservations, preemptor, now, totals.leaving, held or {})
    taken = totals.held
    nodes = []
    cluster_gpus = 0
    for name, node in records.typed_prefix(NODE, NodeRecord):
        cluster_gpus += node.gpus
        if node.gpus <= 0 and not taken.get(name):
            continue
        capacity = max(0, node.gpus - reserved.get(name, 0))
        # Events can arrive out of step (a node's allocatable shrank, a pod
        # was bound before the old one's deletion arrived): a node whose pods
        # hold more than it has is taken as full and closed to new pods until
        # the watch catches up, rather than making the snapshot invalid.
        overcommitted = taken.get(name, 0) > capacity
        gpus = max(capacity, taken.get(name, 0))
        schedulable = node.schedulable and not overcommitted
        nodes.append(
            parts.node(name, (node, gpus, schedulable), _node, name, node, gpus, schedulable)
        )
    known_nodes = {n.name for n in nodes}
    queues = queues_of(records, config, cluster_gpus)
    for queue in totals.queues.keys() - queues.keys():
        queues[queue] = Queue(name=queue)
    fields = {
        "version": 1,
        "now": now,
        "policy": config.policy,
        "nodes": tuple(nodes),
        "queues": tuple(queues[name] for name in sorted(queues)),
        "jobs": _JobParts(records, preemptor, now, parts, known_nodes).jobs(views, feed),
    }
    if not parts.fed:
        return Snapshot.model_validate(fields)
    # The reference check reads the sums kept over the jobs, not every pod again.
    return Snapshot.model_validate(fields, context={REFERENCE_TOTALS: parts.references})


class _JobParts:
    """Each job's part of a snapshot (``snapshot_parts.Entry``): its job, its leaving pods.

    A part depends on the job's view, its progress and eviction records,
    whether it is the preemptor, the time (evictions still to come are left
    out), whether its pods' names are shared with other pods (those pods are
    renamed), and the ``context``: when some pod is on a node the snapshot
    leaves out, the nodes it holds (every part is then made again). Parts are
    made again for the jobs the index says changed (``SnapshotParts.feed``)
    and those whose pods' names became shared or stopped being; the others
    are the last snapshot's.
    """

    def __init__(
        self,
        records: Overlay,
        preemptor: str,
        now: float,
        parts: SnapshotParts,
        known_nodes: set[str],
    ) -> None:
        self.records, self.preemptor, self.now, self.parts = records, preemptor, now, parts
        totals = parts.totals
        self.shared = frozenset(totals.shared)
        self.known_nodes = known_nodes
        # Nearly always every pod is on a node the snapshot holds and its name is
        # unique in the cluster: a job's pods are then its view's, as they are.
        self.nodes_known = totals.held.keys() <= known_nodes
        self.context = None if self.nodes_known else frozenset(known_nodes)

    def jobs(self, views: Mapping[str, JobView], feed: set[str] | None) -> tuple[Job, ...]:
        """Every job's part, in name order: made again where something it reads changed."""
        parts = self.parts
        entries = parts.entries
        names = list(views)
        if feed is None or self.context != parts.context or not self._follow(views, feed):
            parts.clear()
            parts.context = self.context
            for view in views.values():
                parts.put(view.name, self._entry(view))
        parts.preemptor = self.preemptor
        parts.shared = self.shared
        return tuple(itertools.chain.from_iterable([entries[name].jobs for name in names]))

    def _follow(self, views: Mapping[str, JobView], feed: set[str]) -> bool:
        """Make again the parts of ``feed``'s jobs, of this snapshot's preemptor and the
        last one's, and of those whose next eviction has come; False when the entries
        then do not count every job (one came or went that no one said changed)."""
        parts, entries = self.parts, self.parts.entries
        again = set(feed)
        again.update(n for n in (self.preemptor, parts.preemptor) if n is not None and n in entries)
        renamed = self.shared ^ parts.shared
        if renamed:  # names that became shared, or stopped being: their jobs' pods are renamed
            again.update(parts.totals.jobs_naming(renamed))
        again.update(name for name in parts.timed if entries[name].until <= self.now)
        for name in again:
            view = views.get(name)
            if view is None:
                parts.drop(name)
            else:
                parts.put(name, self._entry(view))
        return len(entries) == len(views)

    def _entry(self, view: JobView) -> Entry:
        records, parts, now = self.records, self.parts, self.now
        if self.nodes_known and self._names_own(view):
            staying = view.pods
            leaving = tuple((p, p.name) for p in view.leaving) if view.leaving else ()
        else:
            # Pods on nodes the watch has not delivered (or without GPUs) are left
            # out: the planner can neither free nor use those GPUs.
            known = self.known_nodes
            staying = tuple(
                _renamed(p, self._unique(view, p))
                for p in view.pods
                if p.node is None or p.node in known
            )
            leaving = tuple((p, self._unique(view, p)) for p in view.leaving if p.node in known)
        jobs: list[Job] = []
        if leaving:
            name = view.name + LEAVING
            jobs.append(parts.job(name, (view, leaving), _leaving, view, name, leaving))
        holds = (
            view.name in parts.totals.placed
            if staying is view.pods
            else any(p.node is not None for p in staying)
        )
        until = math.inf
        # Waiting jobs other than the preemptor hold nothing.
        if staying and (view.name == self.preemptor or holds):
            progress = records.get(PROGRESS + view.name)
            evictions: tuple[float, ...] = ()
            if records.get(EVICTIONS + view.name) is not None:
                record = records.typed(EVICTIONS + view.name, EvictionsRecord)
                if record is not None:
                    evictions = tuple(e for e in record.at if e <= now)
                    until = min((e for e in record.at if e > now), default=math.inf)
            jobs.append(
                parts.job(
                    view.name,
                    (view, staying, progress, evictions),
                    _job,
                    view,
                    staying,
                    records,
                    evictions,
                )
            )
        refs = tuple(JobReferences.of(job) for job in jobs) if parts.fed else ()
        return Entry(tuple(jobs), until, refs)

    def _unique(self, view: JobView, pod: Pod) -> str:
        """``pod``'s name in the snapshot: ``namespace/name`` when two pods share it (the
        node agent reads that form too)."""
        if pod.name not in self.shared:
            return pod.name
        return f"{view.name.split('/', 1)[0]}/{pod.name}"

    def _names_own(self, view: JobView) -> bool:
        """No pod of ``view`` shares its name: each keeps its own name, as it is.

        A job restarted while its old pods leave (same names, twice), or a pod
        name two namespaces use, renames only the pods of the jobs concerned;
        every other job keeps its view's pods as they are.
        """
        shared = self.shared
        return not shared or not any(
            p.name in shared for pods in (view.pods, view.leaving) for p in pods
        )


def reserved_gpus(
    reservations: Iterable[tuple[str, ReservationRecord]],
    preemptor: str,
    now: float,
    leaving: Mapping[str, int],
    held: Mapping[str, int],
) -> dict[str, int]:
    """GPUs per node set aside for others when planning for ``preemptor``.

    The GPUs reservations in force nominate for other preemptors come first out
    of what leaving pods will free on that node (those pods still hold them),
    then out of the free ones; ``held`` (this step's holds for heavier
    suspended jobs) comes on top. ``snapshot`` takes them off each node's
    capacity, and ``FreeCapacity`` does the same without a snapshot.
    """
    nominated: dict[str, int] = {}
    for job, reservation in reservations:
        if job == preemptor or reservation.until <= now:
            continue
        for on, gpus in reservation.nodes.items():
            nominated[on] = nominated.get(on, 0) + gpus
    reserved = {on: max(0, gpus - leaving.get(on, 0)) for on, gpus in nominated.items()}
    for on, gpus in held.items():
        reserved[on] = reserved.get(on, 0) + gpus
    return reserved


def _node(name: str, node: NodeRecord, gpus: int, schedulable: bool) -> Node:
    return Node(
        name=name,
        gpus=gpus,
        schedulable=schedulable,
        topology=Topology(rack=node.rack, nvlink_domain=node.nvlink),
    )


def _job(
    view: JobView, staying: tuple[Pod, ...], records: Overlay, evictions: tuple[float, ...]
) -> Job:
    """``view``'s job as the planner sees it (``snapshot``'s ``parts`` keys it by all it reads)."""
    progress = records.typed(PROGRESS + view.name, ProgressRecord)
    min_available = view.min_available
    if min_available is not None:
        min_available = min(min_available, len(staying))  # a partly deleted gang
    return Job(
        name=view.name,
        queue=view.queue,
        priority=view.priority,
        state=view.state,
        pods=staying,
        min_available=min_available,
        preemptable=view.preemptable,
        submitted_at=view.submitted_at,
        started_at=view.started_at,
        progress=progress.progress if progress else 0.0,
        last_checkpoint_at=progress.last_checkpoint_at if progress else None,
        evictions=evictions,
        sla_deadline=view.sla_deadline,
    )


def _leaving(view: JobView, name: str, leaving: tuple[tuple[Pod, str], ...]) -> Job:
    """The pods of ``view`` on their way out, as a job no plan may preempt."""
    return Job(
        name=name,
        queue=view.queue,
        priority=view.priority,
        state=JobState.RUNNING,
        preemptable=False,
        pods=tuple(p.model_copy(update={"name": f"{unique}~leaving"}) for p, unique in leaving),
    )


def _renamed(pod: Pod, name: str) -> Pod:
    """``pod`` under ``name``: the same (frozen) pod when the name is its own, as it
    nearly always is; a copy costs more than the rest of the snapshot's pod."""
    return pod if pod.name == name else pod.model_copy(update={"name": name})


def queues_of(records: Overlay, config: ControllerConfig, cluster_gpus: int) -> dict[str, Queue]:
    """The watched queues, made consistent enough to plan with.

    Volcano's webhook rejects most inconsistencies, but a controller must not
    stop deciding because of one: a capability below the guarantee lowers the
    guarantee to it, and a parent that is unknown or closes a cycle is dropped
    (the queue is then a root). A capability that names resources but not
    GPUs is read the way Volcano reads it (``queue_capability``).
    """
    raw = dict(records.typed_prefix(QUEUE, QueueRecord))
    as_json = {name: q.dump() for name, q in raw.items()}
    parents: dict[str, str | None] = {name: q.parent for name, q in raw.items()}
    for name in sorted(parents):
        seen = {name}
        cursor = parents[name]
        while cursor is not None:
            if cursor not in parents or cursor in seen:
                parents[name] = None
                break
            seen.add(cursor)
            cursor = parents[cursor]
    queues = {}
    for name, q in raw.items():
        capability = queue_capability.gpu_capability(
            name, as_json, cluster_gpus, config.capability_without_gpu
        )
        guarantee = q.guarantee if capability is None else min(q.guarantee, capability)
        queues[name] = Queue(
            name=name,
            weight=q.weight,
            guarantee=GpuAmount(gpu=guarantee),
            capability=GpuLimit(gpu=capability),
            reclaimable=q.reclaimable,
            parent=parents[name],
        )
    return queues


# -- resumes: what a suspended job needs, and what is free for it -------------------


def gang_gpus(view: JobView) -> int:
    """GPUs ``view``'s job needs to run at all: its ``min_available`` smallest pods.

    All its pods when it has no ``min_available``.
    """
    sizes = sorted(p.gpus for p in view.pods)
    if view.min_available is not None:
        sizes = sizes[: max(0, view.min_available)]
    return sum(sizes)


def _free_slots(snapshot: Snapshot) -> dict[str, int]:
    """Free GPUs per schedulable node of ``snapshot`` (its capacity already less the holds)."""
    used: dict[str, int] = {}
    for job in snapshot.jobs:
        for pod in job.pods:
            if pod.node is not None:
                used[pod.node] = used.get(pod.node, 0) + pod.gpus
    return {n.name: n.gpus - used.get(n.name, 0) for n in snapshot.nodes if n.schedulable}


def free_gpus(snapshot: Snapshot) -> int:
    return sum(max(0, free) for free in _free_slots(snapshot).values())


def hold_for(snapshot: Snapshot, view: JobView) -> dict[str, int]:
    """The free GPUs a suspended job that does not fit yet holds against lighter resumes.

    Volcano's ``reserve`` idea, for resumes only: the heaviest suspended job
    that cannot run keeps the slots its pods would take as they free up
    (largest pods first, each on the node it fills most tightly), so smaller
    jobs resuming one by one cannot take the nodes a gang needs whole. It holds
    nothing when it could not run even on every free GPU of the cluster (its
    queue has no room, or it needs more than all nodes have): holding then
    would only idle GPUs. The hold is recomputed each step and never
    published: Volcano does not see a suspended job, new jobs are not held back.
    """
    job = next((j for j in snapshot.jobs if j.name == view.name), None)
    if job is None:
        return {}
    need = gang_gpus(view)
    queue = next((q for q in snapshot.queues if q.name == view.queue), None)
    if queue is not None and queue.capability.gpu is not None:
        used = sum(
            p.gpus
            for j in snapshot.jobs
            if j.queue == view.queue
            for p in j.pods
            if p.node is not None
        )
        if used + need > queue.capability.gpu:
            return {}  # it waits for its queue, not for GPUs
    capacity = sorted((n.gpus for n in snapshot.nodes if n.schedulable), reverse=True)
    if sum(capacity) < need or (
        job.pods and max(p.gpus for p in job.pods) > max(capacity, default=0)
    ):
        return {}
    free = _free_slots(snapshot)
    hold: dict[str, int] = {}
    for pod in sorted((p for p in job.pods if p.node is None), key=lambda p: -p.gpus):
        fits = [(left - pod.gpus, name) for name, left in free.items() if left >= pod.gpus]
        if not fits:
            continue
        _, node = min(fits)
        free[node] -= pod.gpus
        hold[node] = hold.get(node, 0) + pod.gpus
    return hold
