"""What the simulator knows of a job before it runs: its shape, its work, its promises."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobKind(StrEnum):
    """How a job is judged: production jobs carry an SLA."""

    PRODUCTION = "production"
    RESEARCH = "research"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of the workload, generated or read from a trace.

    ``duration_s`` is the work at full width: seconds of running with every
    pod placed (fewer pods of an elastic job progress proportionally slower).
    """

    name: str
    queue: str
    kind: JobKind
    submit_s: float
    pods: int
    gpus_per_pod: int
    min_available: int
    duration_s: float
    checkpoint_interval_s: float
    priority: int
    sla_s: float | None = None  # production: finish within this long after submission
    preemptable: bool = True
    restart_job: bool = True  # volcano-native: PodEvicted -> RestartJob, else no policy

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod
