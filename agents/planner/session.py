"""PlanningSession: read-only indexes over one snapshot, like a Volcano session.

Built once per plan; every rule and the search read it and never change it.
Jobs, pods and nodes are referred to by small integers so that the search's
inner loops stay cheap, and every list is in a fixed order (names sorted), so
that the plan is a function of the snapshot alone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gpuyield.agents.planner.hierarchy import QueueTree
from gpuyield.agents.planner.urgency import SlaRisk, has_claim, sla_risk
from gpuyield.agents.planner.weights import (
    effective_weight,
    lost_seconds_per_gpu,
    preemptor_weight,
)
from gpuyield.schemas import Job, Pod, PodPhase, Snapshot
from gpuyield.schemas.snapshot import kept_sums


class UnknownPreemptor(ValueError):
    """``--preemptor`` names a job that is not in the snapshot."""


class ActivePod(NamedTuple):
    """A pod that holds GPUs: the unit of eviction."""

    name: str
    node: str
    gpus: int


@dataclass(slots=True)
class CandidateFacts:
    """What the planner knows of one job that holds GPUs and is not the preemptor."""

    index: int
    job: Job
    pods: tuple[ActivePod, ...]  # sorted by name
    min_running: int  # min_available: fewer running pods than this breaks the gang
    w_eff: float
    lost_per_gpu_s: float
    same_queue: bool
    # Plain copies of the job's name and queue, and the pods' GPUs: the search reads
    # these millions of times on big clusters.
    name: str
    queue: str
    gpus: int


class PodToPlace(NamedTuple):
    name: str
    gpus: int


@dataclass(frozen=True)
class PlanningSession:
    """Everything the rules and the search read, computed once."""

    snapshot: Snapshot
    preemptor: Job | None
    preemptor_w: float
    to_place: tuple[PodToPlace, ...]  # largest first, then by name
    tree: QueueTree
    usage: Mapping[str, int]  # GPUs held in each queue's subtree, before the plan
    node_names: tuple[str, ...]  # sorted
    node_gpus: Mapping[str, int]
    node_free: Mapping[str, int]
    node_schedulable: Mapping[str, bool]
    node_group: Mapping[str, str]  # rack, else NVLink domain, else the node itself
    free_counts: Mapping[int, int]  # schedulable nodes by free GPUs
    free_buckets: Mapping[int, tuple[str, ...]]  # schedulable nodes by free GPUs, by name
    holders: int  # the jobs holding GPUs but the preemptor (those ``holding`` lists)
    memo: dict[str, object] = field(default_factory=dict, compare=False)
    """Answers rules may share within this session (e.g. per-queue verdicts)."""
    sla_claim: bool = False
    """The preemptor waits with an SLA (``urgency``): cooldowns and eviction limits give
    way to it, as protected victims."""
    sla_risk: SlaRisk | None = None
    """It waited past its share of its SLA budget (``urgency``): W_eff protection gives way."""

    @functools.cached_property
    def holding(self) -> tuple[_Holding, ...]:
        """The jobs behind ``candidates``, in their order: every job but the preemptor with
        a pod not finished on a node, by name; walked when first read, unless ``open``
        walked them already."""
        return _walk(self.snapshot, self.tree, self.preemptor)[2]

    @functools.cached_property
    def candidates(self) -> tuple[CandidateFacts, ...]:
        """Every job that holds GPUs but the preemptor, sorted by name; built when first read.

        A plan whose preemptor fits as the cluster stands reads none of them
        (``planner._fits_as_is``), and their weights and lost work were a
        third of opening the session at 10,000 nodes.
        """
        now, policy = self.snapshot.now, self.snapshot.policy
        mine = self.preemptor.queue if self.preemptor is not None else None
        facts = []
        for index, (name, j, pods, total) in enumerate(self.holding):
            # Positional, in the fields' order: keywords cost a sixth of this loop, which
            # runs for 30,000 jobs at 10,000 nodes.
            facts.append(
                CandidateFacts(
                    index,
                    j,
                    pods,
                    j.gang_min,  # min_running
                    effective_weight(j, now, policy),  # w_eff
                    lost_seconds_per_gpu(j, now),  # lost_per_gpu_s
                    j.queue == mine,  # same_queue
                    name,
                    j.queue,
                    total,  # gpus
                )
            )
        return tuple(facts)

    @property
    def now(self) -> float:
        return self.snapshot.now

    @property
    def queue(self) -> str:
        """The preemptor's queue (the session is only searched with a preemptor)."""
        return self.preemptor.queue if self.preemptor is not None else ""

    @classmethod
    def open(cls, snapshot: Snapshot, preemptor: str | None = None) -> PlanningSession:
        job = choose_preemptor(snapshot, preemptor)
        policy = snapshot.policy
        now = snapshot.now
        tree = QueueTree.build(snapshot.queues)
        sums = kept_sums(snapshot)
        holding: tuple[_Holding, ...] | None = None
        held: Mapping[str, int]
        if sums is None:
            held, usage, holding = _walk(snapshot, tree, job)
            holders = len(holding)
        else:
            # The snapshot's builder kept these over its jobs (the decider): the jobs
            # are walked only if a plan reads them (``holding``), and a preemptor that
            # fits as the cluster stands reads none of them.
            held = sums.held
            usage = {q.name: 0 for q in snapshot.queues}
            for queue, gpus in sums.queue_gpus.items():
                for above in tree.ancestors[queue]:
                    usage[above] += gpus
            holders = sums.holders - int(job is not None and any(p.holds_gpus for p in job.pods))
        nodes = sorted(snapshot.nodes, key=lambda n: n.name)
        free = {n.name: n.gpus - held.get(n.name, 0) for n in nodes}
        buckets: dict[int, list[str]] = {}
        for n in nodes:
            if n.schedulable:
                buckets.setdefault(free[n.name], []).append(n.name)
        to_place: tuple[PodToPlace, ...] = ()
        if job is not None:
            waiting = [p for p in job.pods if waits_for_node(p)]
            to_place = tuple(
                PodToPlace(p.name, p.gpus) for p in sorted(waiting, key=lambda p: (-p.gpus, p.name))
            )
        session = cls(
            snapshot=snapshot,
            preemptor=job,
            preemptor_w=preemptor_weight(job, now, policy) if job is not None else 0.0,
            to_place=to_place,
            tree=tree,
            usage=usage,
            node_names=tuple(n.name for n in nodes),
            node_gpus={n.name: n.gpus for n in nodes},
            node_free=free,
            node_schedulable={n.name: n.schedulable for n in nodes},
            node_group={
                n.name: n.topology.rack or n.topology.nvlink_domain or n.name for n in nodes
            },
            holders=holders,
            free_counts={f: len(ns) for f, ns in buckets.items()},
            free_buckets={f: tuple(ns) for f, ns in buckets.items()},
            sla_claim=job is not None and has_claim(job),
            sla_risk=sla_risk(job, now, policy) if job is not None else None,
        )
        if holding is not None:
            session.__dict__["holding"] = holding  # ``cached_property``'s own slot
        return session


_DONE = (PodPhase.SUCCEEDED, PodPhase.FAILED)


def _walk(
    snapshot: Snapshot, tree: QueueTree, preemptor: Job | None
) -> tuple[dict[str, int], dict[str, int], tuple[_Holding, ...]]:
    """GPUs held per node and per queue's subtree, and the jobs holding them but the
    preemptor, by name: one pass over the jobs (at 10,000 nodes, 30,000 of them)."""
    usage: dict[str, int] = {q.name: 0 for q in snapshot.queues}
    held: dict[str, int] = {}
    holding: list[_Holding] = []
    ancestors = tree.ancestors
    skip = preemptor.name if preemptor is not None else None
    for j in snapshot.jobs:
        # The candidates' pods as the search reads them, made here where the pods are read.
        pods = [
            ActivePod(p.name, p.node, p.gpus)
            for p in j.pods
            if p.node is not None and p.phase not in _DONE
        ]
        if not pods:
            continue
        total = 0
        for pod in pods:
            held[pod.node] = held.get(pod.node, 0) + pod.gpus
            total += pod.gpus
        for queue in ancestors[j.queue]:
            usage[queue] += total
        if j.name != skip:
            if len(pods) > 1:
                pods.sort()
            holding.append((j.name, j, tuple(pods), total))
    holding.sort(key=_by_name)
    return held, usage, tuple(holding)


def waits_for_node(pod: Pod) -> bool:
    """A pod of the preemptor the plan must place: no node yet, not finished."""
    return pod.node is None and pod.phase not in _DONE


def could_place_on_free_gpus(snapshot: Snapshot, job_name: str) -> bool:
    """False when no plan for ``job_name`` can place its pods without evicting anyone.

    A necessary condition only, cheap to test (one pass over the pods): the
    free GPUs of the schedulable nodes must add up to what its waiting pods
    need, and for every pod size ``g`` the pods of ``g`` GPUs or more must
    find as many slots: each takes at least ``g`` of its node's free GPUs, so
    a node with ``f`` free hosts at most ``f // g`` of them. (Some node with
    room for the largest pod is the case of the largest size.) A gang of
    whole-node pods on a full cluster with GPUs free here and there passes
    the sum but not the slots, and the planner then searched in vain. A
    caller that only acts on a plan with no victim (the decider's resumes)
    may skip the planner when this is False; the planner decides every
    other case.
    """
    job = snapshot.job(job_name)
    if job is None:
        return True  # the planner says what is wrong with the name
    waiting = [p.gpus for p in job.pods if waits_for_node(p)]
    if not waiting:
        return True
    held: dict[str, int] = {}
    for other in snapshot.jobs:
        for pod in other.pods:
            if pod.node is not None and pod.phase not in _DONE:  # it holds GPUs
                held[pod.node] = held.get(pod.node, 0) + pod.gpus
    free = [max(0, n.gpus - held.get(n.name, 0)) for n in snapshot.nodes if n.schedulable]
    if sum(free) < sum(waiting):
        return False
    return short_slots(free, waiting) is None


def short_slots(room: Sequence[int], waiting: Sequence[int]) -> tuple[int, int, int] | None:
    """The largest pod size whose pods find too few slots: ``(size, slots, pods)``, or None.

    ``room``: the GPUs each node can give the pods (none negative); ``waiting``:
    the pods' GPUs. Each pod of ``g`` GPUs or more takes at least ``g`` of its
    node's room, so a node with ``r`` hosts at most ``r // g`` of them. A
    necessary condition of any placement, shared by the decider's resume
    check (free GPUs) and the planner's proof that no plan exists
    (``impossible``: free GPUs and what eligible victims hold).
    """
    for size in sorted({g for g in waiting if g > 0}, reverse=True):
        pods = sum(1 for g in waiting if g >= size)
        slots = sum(r // size for r in room)
        if slots < pods:
            return size, slots, pods
    return None


_Holding = tuple[str, Job, tuple[ActivePod, ...], int]
"""A job that holds GPUs: its name, the job, its pods placed and not finished (by name), their
GPUs."""


def _by_name(entry: _Holding) -> str:
    return entry[0]


def choose_preemptor(snapshot: Snapshot, name: str | None) -> Job | None:
    """The named job, or the pending job with the highest priority.

    Ties: earliest ``submitted_at`` (unknown counts as latest), then name.
    """
    if name is not None:
        job = snapshot.job(name)
        if job is None:
            raise UnknownPreemptor(f"preemptor: unknown job '{name}'")
        return job
    pending = [j for j in snapshot.jobs if j.state == "Pending"]
    if not pending:
        return None
    return min(
        pending,
        key=lambda j: (
            -j.priority,
            j.submitted_at is None,
            j.submitted_at if j.submitted_at is not None else 0.0,
            j.name,
        ),
    )
