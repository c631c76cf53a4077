"""Cluster snapshot, format v1: the planner's input (../shared/spec/plan-contract.md).

One instant of the cluster: nodes, queues, jobs with their pods, and the
policy knobs. Besides field types, the snapshot checks what pydantic cannot
see field by field (a pod on a node that does not exist, a job in an unknown
queue, a node holding more GPUs than it has), so that every consumer can rely
on a snapshot being internally consistent. Each such error names the path of
the offending field, e.g. ``jobs[3].pods[0].node: unknown node 'n9'``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from gpuyield.schemas.base import FormatVersion, WireModel
from gpuyield.schemas.counts import count, count_rows, count_twice, rows

Name = Field(min_length=1, max_length=253)


class PodPhase(StrEnum):
    """The Kubernetes pod phase."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class JobState(StrEnum):
    """What the job is doing now, as the planner needs to know it."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUSPENDED = "Suspended"


class Policy(WireModel):
    """Planner knobs; every key is optional (contract, precise reading 1)."""

    alpha: float = Field(150.0, description="Weight of ln(1 + run hours) in W_eff.")
    beta: float = Field(800.0, description="Weight of progress squared in W_eff.")
    cooldown_s: float = Field(
        600.0, ge=0, description="A job that started or resumed less than this long ago is spared."
    )
    max_evictions: int = Field(
        3, ge=0, description="Evictions inside the window at which a job is no longer a victim."
    )
    eviction_window_s: float = Field(86400.0, ge=0, description="Window for max_evictions.")
    grace_s: float = Field(120.0, ge=0, description="Graceful-yield deadline written into plans.")
    sla_risk_share: float = Field(
        0.1,
        ge=0,
        le=1,
        description="A waiting preemptor with an SLA is at risk once it has waited this share "
        "of its budget (sla_deadline - submitted_at): W_eff protection then gives way to it "
        "too (cooldowns and eviction limits already do; README: SLA at risk).",
    )


class Topology(WireModel):
    """Where a node sits; used to keep a gang's pods close when costs tie."""

    nvlink_domain: str | None = None
    rack: str | None = None


class Node(WireModel):
    """A GPU node."""

    name: str = Name
    gpus: int = Field(ge=0)
    topology: Topology = Topology()
    schedulable: bool = True


class GpuAmount(WireModel):
    """A quantity of GPUs for a guarantee (absent means 0)."""

    gpu: int = Field(0, ge=0)


class GpuLimit(WireModel):
    """A GPU limit for a capability (absent means unlimited)."""

    gpu: int | None = Field(None, ge=0)


class Queue(WireModel):
    """A Volcano queue; ``parent`` builds hierarchical queues."""

    name: str = Name
    weight: float = Field(1.0, ge=0)
    guarantee: GpuAmount = GpuAmount()
    capability: GpuLimit = GpuLimit()
    reclaimable: bool = True
    parent: str | None = None


class Pod(WireModel):
    """One pod of a job; it never spans nodes."""

    name: str = Name
    gpus: int = Field(ge=0)
    node: str | None = None
    phase: PodPhase = PodPhase.RUNNING

    @property
    def holds_gpus(self) -> bool:
        """Contract, precise reading 8: placed and not finished."""
        return self.node is not None and self.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED)


class Job(WireModel):
    """A Volcano job (one PodGroup) and what gpuyield knows of its progress."""

    name: str = Name
    queue: str = Name
    priority: float
    state: JobState
    pods: tuple[Pod, ...]
    min_available: int | None = Field(None, ge=0)
    preemptable: bool = True
    submitted_at: float | None = None
    started_at: float | None = None
    progress: float = Field(0.0, ge=0, le=1)
    last_checkpoint_at: float | None = None
    evictions: tuple[float, ...] = ()
    sla_deadline: float | None = Field(
        None,
        description="When the job must have finished (its SLA); null for a job without one.",
    )

    @property
    def gang_min(self) -> int:
        """``min_available``, defaulting to the number of pods."""
        return len(self.pods) if self.min_available is None else self.min_available


class Snapshot(WireModel):
    """The cluster at one instant; the same snapshot always gives the same plan."""

    version: FormatVersion
    now: float
    policy: Policy = Policy()
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    jobs: tuple[Job, ...]

    @model_validator(mode="after")
    def _references_are_consistent(self, info: ValidationInfo) -> Snapshot:
        # Pydantic runs this again on a snapshot passed, already built, into another
        # model (a ``Decision``): at 10,000 nodes a fifth of a second for nothing new.
        if _consistent(self):
            return self
        context = info.context
        totals = context.get(REFERENCE_TOTALS) if isinstance(context, dict) else None
        if isinstance(totals, ReferenceTotals) and totals.consistent(self):
            _remember(self, totals.sums())
            return self
        problem = _first_reference_problem(self)
        if problem is not None:
            raise PydanticCustomError("reference", problem)
        _remember(self)
        return self

    def job(self, name: str) -> Job | None:
        """The job called ``name``, if any (from the kept sums' index when there are some:
        a scan of 30,000 jobs at 10,000 nodes was 19 ms of every plan's 70)."""
        sums = kept_sums(self)
        if sums is not None:
            return sums.jobs.get(name)
        for job in self.jobs:
            if job.name == name:
                return job
        return None


_CONSISTENT: dict[int, tuple[weakref.ref[Snapshot], JobSums | None]] = {}
"""The snapshots alive whose references were found consistent, by identity, with
the sums they were checked from when there were some (``kept_sums``).

A frozen snapshot that passed stays consistent (its nodes, queues and jobs
are frozen too). Identity, not equality: an equal snapshot would be as
valid, but hashing one walks every job; and a ``model_copy(update=...)``,
which pydantic does not validate, is another object, checked when it is
passed into a model as before."""


def _checked(snap: Snapshot) -> tuple[weakref.ref[Snapshot], JobSums | None] | None:
    entry = _CONSISTENT.get(id(snap))
    return entry if entry is not None and entry[0]() is snap else None


def _consistent(snap: Snapshot) -> bool:
    return _checked(snap) is not None


def _remember(snap: Snapshot, sums: JobSums | None = None) -> None:
    key = id(snap)
    # The entry leaves with the snapshot, before its id can be another object's.
    _CONSISTENT[key] = (weakref.ref(snap, lambda _: _CONSISTENT.pop(key, None)), sums)


def kept_sums(snap: Snapshot) -> JobSums | None:
    """The ``JobSums`` of ``snap``'s jobs, when its builder kept them (the decider does);
    None otherwise, and the reader walks the jobs itself."""
    entry = _checked(snap)
    return entry[1] if entry is not None else None


REFERENCE_TOTALS = "gpuyield.reference_totals"
"""The validation context's key for the ``ReferenceTotals`` of the snapshot's jobs."""


@dataclass(frozen=True, slots=True)
class JobReferences:
    """What the reference check reads of one job; a function of the job alone."""

    job: str  # its name
    model: Job  # the job itself, for the sums' index by name
    names: tuple[str, ...]  # its pods' names
    on: tuple[tuple[str, int, int], ...]  # (node, pods on it, GPUs they hold)
    queue: str
    overfull: bool  # ``min_available`` above its pods
    holds: bool  # a pod of it, not finished, is on a node (it holds GPUs, maybe 0)
    gpus: int  # the GPUs those pods hold

    @classmethod
    def of(cls, job: Job) -> JobReferences:
        placed = [(p.node, p.gpus if p.holds_gpus else 0) for p in job.pods if p.node is not None]
        holding = [p.gpus for p in job.pods if p.holds_gpus]
        return cls(
            job.name,
            job,
            tuple(p.name for p in job.pods),
            rows(placed),
            job.queue,
            job.min_available is not None and job.min_available > len(job.pods),
            bool(holding),
            sum(holding),
        )


class ReferenceTotals:
    """The reference check's facts summed over a snapshot's jobs, kept job by job.

    A caller that builds snapshot after snapshot from mostly the same jobs
    (the decider's ``SnapshotParts``) adds and takes off the jobs that change
    and hands these in (``Snapshot.model_validate(..., context={REFERENCE_TOTALS:
    totals})``): the check then reads the sums, not every pod. Any doubt (a
    duplicate, an unknown name, too many GPUs) is settled by the whole check,
    which words the error; so a snapshot passes exactly when the whole check
    passes, as long as the totals are those of its jobs.
    """

    def __init__(self) -> None:
        self.jobs = 0
        self._jobs: dict[object, int] = {}
        self._names: dict[object, int] = {}
        self._duplicates: set[object] = set()  # pod names, ("job", name)s counted twice
        self._node_pods: dict[str, int] = {}
        self._held: dict[str, int] = {}
        self._queues: dict[str, int] = {}
        self._queue_gpus: dict[str, int] = {}
        self._holders = 0
        self._overfull = 0
        self._by_name: dict[str, Job] = {}

    def add(self, refs: JobReferences, sign: int = 1) -> None:
        """Count one job in (``sign`` 1) or out (-1)."""
        self.jobs += sign
        count_twice(self._jobs, self._duplicates, ("job", refs.job), sign)
        for name in refs.names:
            count_twice(self._names, self._duplicates, name, sign)
        count_rows(self._node_pods, self._held, refs.on, sign)
        count(self._queues, refs.queue, sign)
        self._queue_gpus[refs.queue] = self._queue_gpus.get(refs.queue, 0) + sign * refs.gpus
        self._holders += sign * refs.holds
        self._overfull += sign * refs.overfull
        if sign > 0:
            self._by_name[refs.job] = refs.model
        elif self._by_name.get(refs.job) is refs.model:
            del self._by_name[refs.job]

    def sums(self) -> JobSums:
        """What a planner reads of every job, as these totals count it now (a copy)."""
        return JobSums(dict(self._held), dict(self._queue_gpus), self._holders, dict(self._by_name))

    def consistent(self, snap: Snapshot) -> bool:
        """Whether ``snap``, whose jobs these totals count, passes the reference check."""
        if self.jobs != len(snap.jobs) or self._duplicates or self._overfull:
            return False
        nodes = {n.name for n in snap.nodes}
        queues = {q.name for q in snap.queues}
        if len(nodes) < len(snap.nodes) or len(queues) < len(snap.queues):
            return False
        if not self._node_pods.keys() <= nodes or not self._queues.keys() <= queues:
            return False
        held = self._held
        if any(held.get(node.name, 0) > node.gpus for node in snap.nodes):
            return False
        return _queue_problem(snap) is None


@dataclass(frozen=True, slots=True)
class JobSums:
    """Sums over a snapshot's jobs that a planner reads, kept by whoever built it.

    ``held``: GPUs held per node by pods not finished (a node may be there
    with 0); ``queue_gpus``: the same per job's queue (its own, not its
    ancestors'); ``holders``: the jobs with such a pod on a node; ``jobs``:
    every job by name.
    """

    held: Mapping[str, int]
    queue_gpus: Mapping[str, int]
    holders: int
    jobs: Mapping[str, Job]  # every job by name


def _duplicate(kind: str, names: Sequence[str], path: Callable[[int], str]) -> str | None:
    """The first repeated name, at ``path(i)`` of its second use; paths built only then.

    A snapshot of a large cluster holds tens of thousands of pods and is
    validated for every plan: formatting a path for each was most of it.
    """
    if len(set(names)) == len(names):
        return None
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            return f"{path(i)}: duplicate {kind} name '{name}'"
        seen.add(name)
    return None  # pragma: no cover -- the set above says there is a duplicate


def _first_reference_problem(snap: Snapshot) -> str | None:
    """The first cross-reference error, as ``path: what is wrong``, or None.

    The pods are walked once for all three of their checks (names, nodes,
    GPUs held): at 10,000 nodes that is 80,000 pods for every plan.
    """
    pods = _PodFacts(snap)

    def pod_path(i: int) -> str:
        paths = [(j, p) for j, job in enumerate(snap.jobs) for p in range(len(job.pods))]
        return "jobs[{}].pods[{}].name".format(*paths[i])

    for problem in (
        _duplicate("node", [n.name for n in snap.nodes], lambda i: f"nodes[{i}].name"),
        _duplicate("queue", [q.name for q in snap.queues], lambda i: f"queues[{i}].name"),
        _duplicate("job", [j.name for j in snap.jobs], lambda i: f"jobs[{i}].name"),
        _duplicate("pod", pods.names, pod_path),
        _queue_problem(snap),
        _job_problem(snap, pods),
        _node_problem(snap, pods),
    ):
        if problem is not None:
            return problem
    return None


_FINISHED = (PodPhase.SUCCEEDED, PodPhase.FAILED)


class _PodFacts:
    """Every pod's name in order, the nodes pods are on, and the GPUs each node's hold."""

    def __init__(self, snap: Snapshot) -> None:
        self.names: list[str] = []
        self.nodes: set[str] = set()
        self.held: dict[str, int] = {}
        names, nodes, held = self.names, self.nodes, self.held
        for job in snap.jobs:
            for pod in job.pods:
                names.append(pod.name)
                node = pod.node
                if node is not None:
                    nodes.add(node)
                    if pod.phase not in _FINISHED:  # ``Pod.holds_gpus``
                        held[node] = held.get(node, 0) + pod.gpus


def _queue_problem(snap: Snapshot) -> str | None:
    parents = {q.name: q.parent for q in snap.queues}
    for i, queue in enumerate(snap.queues):
        cap = queue.capability.gpu
        if cap is not None and cap < queue.guarantee.gpu:
            return (
                f"queues[{i}].capability.gpu: {cap} is below the queue's guarantee "
                f"of {queue.guarantee.gpu} GPUs"
            )
        if queue.parent is None:
            continue
        if queue.parent not in parents:
            return f"queues[{i}].parent: unknown queue '{queue.parent}'"
        chain = [queue.name]
        cursor: str | None = queue.parent
        while cursor is not None:
            chain.append(cursor)
            if cursor == queue.name:
                return f"queues[{i}].parent: queues form a cycle: {' -> '.join(chain)}"
            cursor = parents.get(cursor)
    return None


def _job_problem(snap: Snapshot, pods: _PodFacts) -> str | None:
    queues = {q.name for q in snap.queues}
    nodes = {n.name for n in snap.nodes}
    every_node_known = pods.nodes <= nodes  # then only a queue or a minimum can be wrong
    for j, job in enumerate(snap.jobs):
        if job.queue not in queues:
            return f"jobs[{j}].queue: unknown queue '{job.queue}'"
        if job.min_available is not None and job.min_available > len(job.pods):
            return (
                f"jobs[{j}].min_available: {job.min_available} is more than the job's "
                f"{len(job.pods)} pods"
            )
        if every_node_known:
            continue
        for p, pod in enumerate(job.pods):
            if pod.node is not None and pod.node not in nodes:
                return f"jobs[{j}].pods[{p}].node: unknown node '{pod.node}'"
    return None


def _node_problem(snap: Snapshot, pods: _PodFacts) -> str | None:
    held = pods.held
    for i, node in enumerate(snap.nodes):
        if held.get(node.name, 0) > node.gpus:
            return (
                f"nodes[{i}].gpus: pods on node '{node.name}' hold {held[node.name]} GPUs, "
                f"more than its {node.gpus}"
            )
    return None
