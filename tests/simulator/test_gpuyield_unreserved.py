"""``gpuyield-unreserved``: gpuyield without being the one preemptor, without reserved GPUs.

Each test plays one small cluster under ``gpuyield`` and under
``gpuyield-unreserved`` and shows the mechanism that differs, not just a
different number.
"""

from __future__ import annotations

from gpuyield.agents.simulator import POLICIES, Simulation, run_policy
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.schemas import Policy, Queue
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit

HOUR = 3600.0


def three_queues() -> Scenario:
    """Two 8-GPU nodes; production may reclaim, shared (guarantee 0) may not."""
    return Scenario(
        nodes=2,
        gpus_per_node=8,
        days=0.25,
        warmup_h=0.0,
        queues=(
            Queue(
                name="prod",
                guarantee=GpuAmount(gpu=16),
                capability=GpuLimit(gpu=16),
                reclaimable=False,
            ),
            Queue(name="research", guarantee=GpuAmount(gpu=0), reclaimable=True),
            Queue(name="shared", guarantee=GpuAmount(gpu=0), reclaimable=True),
        ),
        policy=Policy(cooldown_s=0),
        kill_grace_s=30,
        checkpoint_save_s=60,
        cycle_s=60,
    )


def job(
    name: str, queue: str, *, submit_s: float, priority: int, pods: int = 1, restart: bool = True
) -> JobSpec:
    return JobSpec(
        name=name,
        queue=queue,
        kind=JobKind.PRODUCTION if queue == "prod" else JobKind.RESEARCH,
        submit_s=submit_s,
        pods=pods,
        gpus_per_pod=8,
        min_available=pods,
        duration_s=10 * HOUR,
        checkpoint_interval_s=HOUR,
        priority=priority,
        sla_s=40 * HOUR if queue == "prod" else None,
        restart_job=restart,
    )


def contested() -> list[JobSpec]:
    """Research fills both nodes; a shared job that nobody may evict for waits first
    (it allocates before production: same priority, submitted earlier); then production
    arrives and is owed one node."""
    return [
        job("research-a", "research", submit_s=0.0, priority=100),
        job("research-b", "research", submit_s=0.0, priority=100),
        job("shared-sweep", "shared", submit_s=0.5 * HOUR, priority=1000),
        job("prod-ft", "prod", submit_s=1.0 * HOUR, priority=1000),
    ]


def play(policy: str, jobs: list[JobSpec]) -> Simulation:
    scenario = three_queues()
    sim = Simulation(scenario, jobs, POLICIES[policy](scenario))
    sim.run()
    return sim


def test_reserved_gpus_go_to_the_preemptor_even_when_another_job_allocates_first() -> None:
    sim = play("gpuyield", contested())
    prod, shared = sim.jobs["prod-ft"], sim.jobs["shared-sweep"]
    assert prod.first_started_at == 1.0 * HOUR + 60  # the yield's checkpoint, then its GPUs
    assert shared.first_started_at is None  # nobody was evicted for it
    assert sum(len(j.evictions) for j in sim.order) == 1


def test_unreserved_freed_gpus_go_to_the_job_allocate_picks_first_and_evict_again() -> None:
    sim = play("gpuyield-unreserved", contested())
    prod, shared = sim.jobs["prod-ft"], sim.jobs["shared-sweep"]
    assert shared.first_started_at is not None
    assert prod.first_started_at is not None
    # The shared job took the GPUs freed for production; production waited for another
    # round, which evicted again (the shared job itself, and the other research job).
    assert shared.first_started_at < prod.first_started_at
    assert sim.jobs["research-a"].evictions == [1.0 * HOUR]
    assert shared.first_started_at == 1.0 * HOUR + 30  # research-a's kill grace, then its node
    assert sum(len(j.evictions) for j in sim.order) >= 2
    assert sim.jobs["research-b"].evictions


def test_unreserved_lets_volcano_reclaim_task_by_task_beside_gpuyield() -> None:
    # A 2-pod research gang without a RestartJob policy; production needs one node.
    jobs = [
        job("gang", "research", submit_s=0.0, priority=100, pods=2, restart=False),
        job("prod-ft", "prod", submit_s=1.5 * HOUR, priority=1000),
    ]
    reserved = run_policy(three_queues(), jobs, "gpuyield").metrics
    unreserved = run_policy(three_queues(), jobs, "gpuyield-unreserved").metrics
    # gpuyield yields the whole gang with a checkpoint; Volcano's reclaim, acting first,
    # kills one pod and leaves the other running below its minimum, its work rolled back.
    assert (reserved.dangling_gangs_per_week, reserved.lost_gpu_hours_per_day) == (0.0, 0.0)
    assert unreserved.dangling_gangs_per_week > 0
    assert unreserved.lost_gpu_hours_per_day > 0
