"""Simulation scenario: the cluster, its queues and policy, and the workload generator.

Every field is optional over the default scenario (``examples/scenario-default.json``
ships it verbatim): the seed articles' 64 x 8-GPU pool over 14 days. Queues and
policy use the same fields as in the snapshot contract.
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from gpuyield.schemas.base import WireModel
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit, Policy, Queue


class WorkloadMix(WireModel):
    """One class of jobs the generator submits (documented distributions, seeded)."""

    queue: str
    kind: str = Field(description="production | research | shared: how jobs behave and are judged")
    jobs_per_day: float = Field(ge=0)
    priority: int = 100
    gpus_per_pod: tuple[int, ...] = Field((8,), min_length=1)
    pods: tuple[int, ...] = Field((1,), min_length=1, description="gang sizes, drawn uniformly")
    elastic_share: float = Field(0.0, ge=0, le=1, description="share with min_available < pods")
    duration_h_median: float = Field(6.0, gt=0, description="lognormal median, hours of work")
    duration_sigma: float = Field(0.8, ge=0)
    duration_h_max: float = Field(72.0, gt=0)
    checkpoint_interval_min: tuple[float, float] = (20.0, 60.0)
    sla_factor: tuple[float, float] | None = Field(
        None, description="production only: SLA budget = duration x U(a, b) after submission"
    )
    sla_min_slack_min: float = Field(
        15.0,
        ge=0,
        description="production only: the SLA budget leaves at least this many minutes beyond "
        "the duration (a delivery promise is not made to the minute)",
    )
    burst_every_h: float | None = Field(
        None, gt=0, description="jobs arrive in bursts this often instead of a Poisson stream"
    )
    burst_size: int = Field(1, ge=1)
    preemptable: bool = True


class Scenario(WireModel):
    """What ``gpuyield simulate`` runs; flags override the file."""

    nodes: int = Field(64, ge=1)
    gpus_per_node: int = Field(8, ge=1)
    days: float = Field(14.0, gt=0, description="the measured window, in days")
    warmup_h: float = Field(
        24.0,
        ge=0,
        description="hours of workload played before the measured window and left out of every "
        "metric, so the window starts from a busy cluster rather than an empty one",
    )
    seed: int = 0
    queues: tuple[Queue, ...] = ()
    policy: Policy = Policy()
    workload: tuple[WorkloadMix, ...] = ()
    checkpoint_save_s: float = Field(
        60.0, ge=0, description="time a graceful yield takes to write its emergency checkpoint"
    )
    kill_grace_s: float = Field(30.0, ge=0, description="Kubernetes' default pod grace period")
    max_retry: int = Field(3, ge=0, description="Volcano's RestartJob retry budget")
    restart_job_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="volcano-native: share of jobs with PodEvicted -> RestartJob; the rest have "
        "no policy and are left with a partial gang",
    )
    cycle_s: float = Field(60.0, gt=0, description="scheduling period of the simulated scheduler")

    @model_validator(mode="after")
    def _workload_queues_exist(self) -> Scenario:
        names = {q.name for q in self.queues}
        for i, mix in enumerate(self.workload):
            if names and mix.queue not in names:
                raise PydanticCustomError(
                    "reference", f"workload[{i}].queue: unknown queue '{mix.queue}'"
                )
        return self


DEFAULT_QUEUES = (
    Queue(
        name="production-core",
        weight=80,
        guarantee=GpuAmount(gpu=256),
        capability=GpuLimit(gpu=256),
        reclaimable=False,
    ),
    Queue(
        name="research-elastic",
        weight=20,
        guarantee=GpuAmount(gpu=32),
        capability=GpuLimit(gpu=128),
        reclaimable=True,
    ),
    Queue(
        name="shared",
        weight=40,
        guarantee=GpuAmount(gpu=128),
        capability=GpuLimit(gpu=384),
        reclaimable=True,
    ),
)
