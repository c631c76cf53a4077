"""Fluent builders for snapshots, so that a test reads like its specification.

Every builder returns a frozen wire model from ``gpuyield.schemas``::

    a_snapshot(
        nodes=[a_node("n1", gpus=8, rack="r1")],
        queues=[a_queue("prod", guarantee=8)],
        jobs=[
            a_job("ft-llama").in_queue("prod").priority(1000)
            .running(pods=[("n1", 8)], started_at=NOW - 3600, checkpointed_at=NOW - 60)
            .build(),
            a_job("infer").in_queue("prod").priority(2000).pending(pods=1, gpus=8).build(),
        ],
    )

Pods are named ``f"{job}-{i}"``. Times default to whole seconds around ``NOW``
so that lost work (GPUs times seconds) is computed exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Self

from gpuyield.schemas import Job, JobState, Node, Pod, PodPhase, Policy, Queue, Snapshot, Topology

NOW = 1_764_000_000.0
"""The default ``now`` of every snapshot built here."""

HOUR = 3600.0


def a_node(
    name: str,
    gpus: int = 8,
    *,
    rack: str | None = None,
    nvlink_domain: str | None = None,
    schedulable: bool = True,
) -> Node:
    """A GPU node; its NVLink domain defaults to the node itself."""
    return Node(
        name=name,
        gpus=gpus,
        topology=Topology(nvlink_domain=nvlink_domain or name, rack=rack),
        schedulable=schedulable,
    )


def a_queue(
    name: str,
    *,
    guarantee: int = 0,
    capability: int | None = None,
    reclaimable: bool = True,
    parent: str | None = None,
    weight: float = 1.0,
) -> Queue:
    """A queue; no capability means unlimited, as in the contract."""
    return Queue.model_validate(
        {
            "name": name,
            "weight": weight,
            "guarantee": {"gpu": guarantee},
            "capability": {"gpu": capability},
            "reclaimable": reclaimable,
            "parent": parent,
        }
    )


def a_policy(**overrides: float) -> Policy:
    """The default policy (contract, reading 1) with some knobs overridden."""
    return Policy.model_validate(overrides)


@dataclass(frozen=True)
class JobBuilder:
    """An immutable builder: every method returns a new builder."""

    name: str
    queue: str = "default"
    prio: float = 0.0
    state: JobState = JobState.PENDING
    pods: tuple[Pod, ...] = ()
    min_avail: int | None = None
    preemptable: bool = True
    submitted_at: float | None = NOW - 10 * HOUR
    started_at: float | None = None
    progress_: float = 0.0
    checkpoint_at: float | None = None
    evictions: tuple[float, ...] = ()
    sla_deadline: float | None = None

    def in_queue(self, queue: str) -> Self:
        return replace(self, queue=queue)

    def priority(self, priority: float) -> Self:
        return replace(self, prio=priority)

    def running(
        self,
        pods: Sequence[tuple[str, int]],
        *,
        started_at: float | None = NOW - HOUR,
        checkpointed_at: float | None = None,
    ) -> Self:
        """Running, one pod per ``(node, gpus)`` pair."""
        return replace(
            self,
            state=JobState.RUNNING,
            pods=tuple(
                Pod(name=f"{self.name}-{i}", gpus=gpus, node=node, phase=PodPhase.RUNNING)
                for i, (node, gpus) in enumerate(pods)
            ),
            started_at=started_at,
            checkpoint_at=checkpointed_at,
        )

    def pending(self, pods: int = 1, gpus: int = 8, *, submitted_at: float | None = None) -> Self:
        """Pending, ``pods`` unplaced pods of ``gpus`` GPUs each."""
        return replace(
            self,
            state=JobState.PENDING,
            pods=tuple(
                Pod(name=f"{self.name}-{i}", gpus=gpus, node=None, phase=PodPhase.PENDING)
                for i in range(pods)
            ),
            submitted_at=self.submitted_at if submitted_at is None else submitted_at,
            started_at=None,
        )

    def pending_gang(self, *gpus: int) -> Self:
        """Pending, one unplaced pod per entry of ``gpus`` (pods of different sizes)."""
        sized = self.pending(pods=len(gpus))
        return replace(
            sized,
            pods=tuple(
                p.model_copy(update={"gpus": g}) for p, g in zip(sized.pods, gpus, strict=True)
            ),
        )

    def with_pods(self, *pods: Pod) -> Self:
        """Explicit pods, for the odd cases (half-placed gangs, finished pods)."""
        return replace(self, pods=tuple(pods))

    def in_state(self, state: JobState) -> Self:
        return replace(self, state=state)

    def submitted(self, at: float) -> Self:
        return replace(self, submitted_at=at)

    def started(self, at: float | None) -> Self:
        return replace(self, started_at=at)

    def checkpointed(self, at: float | None) -> Self:
        return replace(self, checkpoint_at=at)

    def progress(self, fraction: float) -> Self:
        return replace(self, progress_=fraction)

    def min_available(self, count: int | None) -> Self:
        return replace(self, min_avail=count)

    def not_preemptable(self) -> Self:
        return replace(self, preemptable=False)

    def evicted_at(self, *times: float) -> Self:
        return replace(self, evictions=tuple(times))

    def due_by(self, deadline: float | None) -> Self:
        """An SLA: the job must have finished by ``deadline``."""
        return replace(self, sla_deadline=deadline)

    def build(self) -> Job:
        return Job(
            name=self.name,
            queue=self.queue,
            priority=self.prio,
            state=self.state,
            pods=self.pods,
            min_available=self.min_avail,
            preemptable=self.preemptable,
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            progress=self.progress_,
            last_checkpoint_at=self.checkpoint_at,
            evictions=self.evictions,
            sla_deadline=self.sla_deadline,
        )


def a_job(name: str) -> JobBuilder:
    """A job builder; pending with no pods until told otherwise."""
    return JobBuilder(name=name)


def a_pod(name: str, gpus: int, node: str | None = None, phase: PodPhase | None = None) -> Pod:
    """One pod; running when placed, pending otherwise, unless ``phase`` says."""
    if phase is None:
        phase = PodPhase.RUNNING if node is not None else PodPhase.PENDING
    return Pod(name=name, gpus=gpus, node=node, phase=phase)


def a_snapshot(
    *,
    now: float = NOW,
    nodes: Iterable[Node] = (),
    queues: Iterable[Queue] | None = None,
    jobs: Iterable[Job | JobBuilder] = (),
    policy: Policy | None = None,
) -> Snapshot:
    """A validated snapshot; without ``queues``, one unlimited queue ``default``."""
    return Snapshot(
        version=1,
        now=now,
        policy=policy or Policy(),
        nodes=tuple(nodes),
        queues=tuple(queues) if queues is not None else (a_queue("default"),),
        jobs=tuple(j.build() if isinstance(j, JobBuilder) else j for j in jobs),
    )
