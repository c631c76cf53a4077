"""What ``gpuyield simulate`` reports: per-policy metrics and the series behind the plots."""

from __future__ import annotations

from pydantic import Field

from gpuyield.schemas.base import WireModel


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
