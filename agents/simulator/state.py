"""The simulated cluster: nodes, jobs, pods and their bookkeeping.

Time is virtual (seconds since the start of the run). A job's progress is
*work* in seconds at full width: it grows at ``running pods / pods`` per
second while the job runs at least ``min_available`` pods, and not at all
while its gang is broken. Checkpoints are taken every
``checkpoint_interval_s`` of running time; a kill rolls the work back to the
last one, and the difference is the work lost to preemption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from gpuyield.agents.simulator.jobs import JobSpec


class Phase(StrEnum):
    PENDING = "Pending"  # waiting for the scheduler (new, restarting or requeued)
    RUNNING = "Running"  # holds pods (possibly fewer than min_available)
    SUSPENDED = "Suspended"  # gpuyield: yielded with a checkpoint, waits to resume
    DONE = "Done"
    FAILED = "Failed"  # Volcano: retry budget spent


@dataclass(slots=True)
class SimPod:
    index: int
    node: int | None = None  # where it holds GPUs
    releasing_until: float | None = None  # terminating: still holds GPUs until then


@dataclass(slots=True)
class SimJob:
    spec: JobSpec
    pods: list[SimPod]
    phase: Phase = Phase.PENDING
    work: float = 0.0
    checkpoint_work: float = 0.0
    last_update: float = 0.0
    run_clock: float = 0.0  # running time since the last (re)start, for checkpoints
    started_at: float | None = None  # last (re)start, for cooldowns and W_eff
    first_started_at: float | None = None
    last_checkpoint_at: float | None = None
    finished_at: float | None = None  # Done, or Failed
    floor_work: float = 0.0  # lowest work since the window opened: the window's work is above it
    evictions: list[float] = field(default_factory=list)
    retries: int = 0
    broken: bool = False  # some pods run, fewer than min_available: a dangling gang
    finish_version: int = 0
    resume_not_before: float = -math.inf  # times may be negative (the warm-up)
    yielding: bool = False  # gpuyield: an emergency checkpoint is being written
    unplaced: int = -1  # pods without a node (the engine keeps it; -1: all of them)
    releasing: int = 0  # pods terminating (the engine keeps it)
    order_key: tuple[int, float, str] = (0, 0.0, "")  # Volcano's job order (set from the spec)
    submitted: int = 0  # position in the order of submission (the engine sets it)

    def __post_init__(self) -> None:
        self.order_key = (-self.spec.priority, self.spec.submit_s, self.spec.name)
        if self.unplaced < 0:
            self.unplaced = sum(1 for p in self.pods if p.node is None)
        self.releasing = sum(1 for p in self.pods if p.releasing_until is not None)

    @property
    def name(self) -> str:
        return self.spec.name

    def placed(self) -> list[SimPod]:
        """Pods that hold GPUs and are not terminating."""
        return [p for p in self.pods if p.node is not None and p.releasing_until is None]

    def placed_count(self) -> int:
        """``len(placed())`` from the engine's counters: a terminating pod still holds its node."""
        return len(self.pods) - self.unplaced - self.releasing

    def holding(self) -> list[SimPod]:
        """Pods that hold GPUs, terminating ones included."""
        return [p for p in self.pods if p.node is not None]

    def waiting(self) -> list[SimPod]:
        return [p for p in self.pods if p.node is None]

    def rate(self) -> float:
        """Work per second now: proportional to the pods running, zero below the gang."""
        if self.phase is not Phase.RUNNING or self.yielding:
            return 0.0
        running = len(self.placed())
        if running < self.spec.min_available or running == 0:
            return 0.0
        return running / self.spec.pods

    def progress(self) -> float:
        return min(1.0, self.work / self.spec.duration_s) if self.spec.duration_s else 1.0


@dataclass(slots=True)
class Cluster:
    """Free GPUs per node, and GPUs set aside for a preemptor (gpuyield's nomination)."""

    gpus_per_node: int
    free: list[int]
    reserved: dict[int, dict[str, int]] = field(default_factory=dict)  # node -> job -> GPUs

    @classmethod
    def of(cls, nodes: int, gpus_per_node: int) -> Cluster:
        return cls(gpus_per_node=gpus_per_node, free=[gpus_per_node] * nodes)

    def release_reservations(self, job: str) -> None:
        for node in list(self.reserved):
            self.reserved[node].pop(job, None)
            if not self.reserved[node]:
                del self.reserved[node]

    @property
    def total(self) -> int:
        return self.gpus_per_node * len(self.free)
