"""What ``gpuyield simulate`` reports: per-policy metrics and the series behind the plots."""

from __future__ import annotations

from pydantic import Field

from gpuyield.schemas.base import WireModel


class QueueMetrics(WireModel):
    """One queue's service under a policy: what a tenant sees of an overloaded pool.

    A pool can win on utilization by running big jobs while a queue of small
    ones waits; these figures show who paid. ``jobs_completed`` and
    ``jobs_failed`` count the jobs that ended inside the window, as the
    policy's totals do (the queues add up to them). Waits (submission to first
    start; a job never started counts with its wait until the end of the run)
    and completion times (submission to Done) are over the jobs submitted
    inside the window, like the production waits.
    """

    jobs_submitted: int
    jobs_completed: int
    jobs_failed: int
    wait_p50_s: float
    wait_p99_s: float
    completion_p50_s: float | None = Field(
        description="submission to Done; None when none of the queue's jobs finished"
    )
    completion_p99_s: float | None


class PolicyMetrics(WireModel):
    """The figures a platform team compares policies by (definitions in the README)."""

    sla_attainment: float = Field(description="production jobs that met their SLA, 0..1")
    lost_gpu_hours_per_day: float = Field(description="work redone because of preemption")
    dangling_gangs_per_week: float = Field(
        description="times a gang was left running some but fewer than min_available pods"
    )
    gpu_utilization: float = Field(description="mean share of GPUs doing useful work, 0..1")
    evictions: int = Field(description="jobs or pod groups evicted (one per victim per round)")
    livelock_incidents: int = Field(
        description="jobs evicted max_evictions times inside the eviction window"
    )
    production_wait_p50_s: float
    production_wait_p99_s: float
    production_jobs: int = Field(description="production jobs judged for the SLA")
    jobs_completed: int
    jobs_failed: int = Field(description="jobs Volcano marked Failed (retry budget spent)")
    queues: dict[str, QueueMetrics] = Field(
        default_factory=dict, description="per queue: jobs completed, waits, completion times"
    )


class Series(WireModel):
    """Hourly samples for the report's plots."""

    t_h: tuple[float, ...] = ()
    used_gpus: tuple[float, ...] = ()
    useful_gpus: tuple[float, ...] = ()
    queue_gpus: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    evictions: tuple[int, ...] = Field((), description="evictions in each hour")
    lost_gpu_hours: tuple[float, ...] = Field((), description="cumulative lost GPU-hours")


class PolicyResult(WireModel):
    policy: str
    metrics: PolicyMetrics
    series: Series = Series()


class SimulationReport(WireModel):
    scenario: dict[str, object]
    policies: dict[str, PolicyResult]
