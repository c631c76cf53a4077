"""The simulator's engine and its three policies, on clusters small enough to reason about."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpuyield.agents.simulator import POLICIES, Simulation, run_policy
from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.engine import Decision
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.agents.simulator.metrics import measure
from gpuyield.agents.simulator.state import SimJob
from gpuyield.agents.simulator.workload import generate
from gpuyield.schemas import Policy, Queue
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit

HOUR = 3600.0


def two_queue_cluster(nodes: int = 2, days: float = 0.5) -> Scenario:
    return Scenario(
        nodes=nodes,
        gpus_per_node=8,
        days=days,
        queues=(
            Queue(
                name="prod",
                guarantee=GpuAmount(gpu=8 * nodes),
                capability=GpuLimit(gpu=8 * nodes),
                reclaimable=False,
            ),
            Queue(name="research", guarantee=GpuAmount(gpu=0), reclaimable=True),
        ),
        policy=Policy(cooldown_s=0),
        kill_grace_s=30,
        checkpoint_save_s=60,
        cycle_s=60,
    )


def research_gang(
    name: str = "gang",
    *,
    restart_job: bool,
    pods: int = 2,
    submit_s: float = 0.0,
    duration_h: float = 10.0,
) -> JobSpec:
    return JobSpec(
        name=name,
        queue="research",
        kind=JobKind.RESEARCH,
        submit_s=submit_s,
        pods=pods,
        gpus_per_pod=8,
        min_available=pods,
        duration_s=duration_h * HOUR,
        checkpoint_interval_s=HOUR,
        priority=100,
        restart_job=restart_job,
    )


def production(name: str, submit_s: float, *, duration_h: float = 1.0) -> JobSpec:
    return JobSpec(
        name=name,
        queue="prod",
        kind=JobKind.PRODUCTION,
        submit_s=submit_s,
        pods=1,
        gpus_per_pod=8,
        min_available=1,
        duration_s=duration_h * HOUR,
        checkpoint_interval_s=HOUR,
        priority=1000,
        sla_s=4 * duration_h * HOUR,
    )


def test_the_same_seed_gives_the_same_numbers_byte_for_byte() -> None:
    scenario = default_scenario().model_copy(update={"days": 1.0, "nodes": 16})
    jobs = generate(scenario, random.Random(scenario.seed))
    first = run_policy(scenario, jobs, "volcano-native").model_dump_json()
    second = run_policy(scenario, jobs, "volcano-native").model_dump_json()
    assert first == second


def test_a_task_by_task_victim_leaves_a_dangling_gang_under_stock_volcano() -> None:
    jobs = [research_gang(restart_job=False), production("ft", submit_s=1.5 * HOUR)]
    result = run_policy(two_queue_cluster(), jobs, "volcano-native")
    assert result.metrics.dangling_gangs_per_week > 0
    assert result.metrics.lost_gpu_hours_per_day > 0


def test_restart_job_retries_end_in_failed_under_stock_volcano() -> None:
    bursts = [production(f"ft-{k}", submit_s=(0.6 + k) * HOUR, duration_h=0.25) for k in range(4)]
    jobs = [research_gang(restart_job=True), *bursts]
    scenario = two_queue_cluster(days=0.25 * 24 / 4)
    result = run_policy(scenario, jobs, "volcano-native")
    assert result.metrics.jobs_failed == 1


def test_gpuyield_never_leaves_a_dangling_gang() -> None:
    jobs = [research_gang(restart_job=False), production("ft", submit_s=1.5 * HOUR)]
    result = run_policy(two_queue_cluster(), jobs, "gpuyield")
    assert result.metrics.dangling_gangs_per_week == 0
    assert result.metrics.evictions == 1


def test_a_graceful_yield_loses_no_work() -> None:
    jobs = [research_gang(restart_job=True), production("ft", submit_s=1.5 * HOUR)]
    result = run_policy(two_queue_cluster(), jobs, "gpuyield")
    assert result.metrics.lost_gpu_hours_per_day == 0.0
    assert result.metrics.jobs_failed == 0


def test_utilization_counts_the_work_done_over_all_gpu_time() -> None:
    # One 8-GPU job of 2 h alone on one 8-GPU node for 4 h: half of the GPU time is useful.
    scenario = two_queue_cluster(nodes=1, days=4 / 24)
    jobs = [production("ft", submit_s=0.0, duration_h=2.0)]
    result = run_policy(scenario, jobs, "volcano-native")
    assert abs(result.metrics.gpu_utilization - 0.5) < 1e-9
    assert result.metrics.sla_attainment == 1.0


# -- the warm-up before the measured window ----------------------------------------------


def _simulate(scenario: Scenario, jobs: list[JobSpec], policy: str) -> Simulation:
    sim = Simulation(scenario, jobs, POLICIES[policy](scenario))
    sim.run()
    return sim


def test_only_the_windows_work_and_production_jobs_count() -> None:
    # One 8-GPU node, a 4-hour window after a 2-hour warm-up. "early" runs from -2 h to
    # 1 h (1 h of it inside the window), "late" from 1 h to 3 h: 3 of 4 hours are useful.
    scenario = two_queue_cluster(nodes=1, days=4 / 24).model_copy(update={"warmup_h": 2.0})
    jobs = [
        production("early", submit_s=-2 * HOUR, duration_h=3.0),
        production("late", submit_s=1 * HOUR, duration_h=2.0),
    ]
    result = run_policy(scenario, jobs, "gpuyield")
    assert abs(result.metrics.gpu_utilization - 0.75) < 1e-9
    assert result.metrics.production_jobs == 1  # "early" was submitted before the window
    assert result.metrics.jobs_completed == 2  # both finished inside it
    assert result.metrics.production_wait_p99_s == 0.0
    assert result.series.t_h[0] == 0.0


def test_a_warm_up_rollback_is_not_lost_work_of_the_window() -> None:
    # The gang is killed at -0.5 h, before the window: its lost work is the warm-up's.
    scenario = two_queue_cluster(days=0.25).model_copy(update={"warmup_h": 3.0})
    jobs = [
        research_gang(restart_job=True, submit_s=-3 * HOUR),
        production("ft", submit_s=-0.5 * HOUR),
    ]
    sim = _simulate(scenario, jobs, "volcano-native")
    assert sim.jobs["gang"].evictions == [-0.5 * HOUR]
    result = measure(sim)
    assert result.metrics.lost_gpu_hours_per_day == 0.0
    assert result.metrics.evictions == 0


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_job_submitted_during_the_warm_up_may_preempt(policy: str) -> None:
    """Regression: "no preemption round in flight" was a -1 s sentinel, which every
    negative (warm-up) time is below, so no job could preempt before time 0."""
    scenario = two_queue_cluster(days=0.25).model_copy(update={"warmup_h": 4.0})
    jobs = [
        research_gang(restart_job=True, submit_s=-4 * HOUR),
        production("ft", submit_s=-2 * HOUR),
    ]
    sim = _simulate(scenario, jobs, policy)
    started = sim.jobs["ft"].first_started_at
    assert started is not None
    assert started - (-2 * HOUR) <= 5 * 60


# -- resuming a suspended job -------------------------------------------------------------


def test_a_job_waiting_for_its_queues_capability_does_not_hold_a_resume_back() -> None:
    """Regression: a production job held back only by its own queue's capability kept every
    suspended job from resuming, and the GPUs it could not use stayed idle.

    Two nodes, production capped at 16 GPUs. "gang" (research) runs on one node; "a" takes
    the other; "b" reclaims the gang's node (the gang yields and is suspended); "c" wants 16
    GPUs, more than production's capability leaves, so it waits for the capability. When
    "a" finishes at 1.5 h its node is free but "c" may not take it: the gang resumes there.
    """
    scenario = two_queue_cluster(days=3 / 24)
    jobs = [
        research_gang(restart_job=True, pods=1, submit_s=0.0),
        production("a", submit_s=0.5 * HOUR, duration_h=1.0),
        production("b", submit_s=1.0 * HOUR, duration_h=2.0),
        JobSpec(
            name="c",
            queue="prod",
            kind=JobKind.PRODUCTION,
            submit_s=1.2 * HOUR,
            pods=2,
            gpus_per_pod=8,
            min_available=2,
            duration_s=HOUR,
            checkpoint_interval_s=HOUR,
            priority=1000,
            sla_s=8 * HOUR,
        ),
    ]
    sim = _simulate(scenario, jobs, "gpuyield")
    gang = sim.jobs["gang"]
    assert gang.evictions, "the gang yielded to production"
    assert gang.started_at is not None
    assert 1.5 * HOUR <= gang.started_at <= 1.5 * HOUR + 2 * 60


def test_a_backlog_that_may_not_reclaim_does_not_hold_a_resume_back() -> None:
    """Regression: a heavier job waiting in a queue above its guarantee (it may not reclaim,
    so it would never evict the resumed job) kept suspended jobs from resuming on idle GPUs.

    Node 0 holds "lab" (research, 4 GPUs) and "mate" (shared, 4); node 1 holds "pinned"
    (shared, not preemptable). "ft" takes node 0 for an hour: "lab" and "mate" yield. "big"
    (shared, two whole nodes) then waits behind "pinned", and shared is above its guarantee
    of 0, so it may not reclaim. When "ft" finishes node 0 is free: both yielded jobs
    resume, the research job too, although "big" outranks it.
    """
    scenario = Scenario(
        nodes=2,
        gpus_per_node=8,
        days=3 / 24,
        queues=(
            Queue(
                name="prod",
                guarantee=GpuAmount(gpu=8),
                capability=GpuLimit(gpu=16),
                reclaimable=False,
            ),
            Queue(name="shared", guarantee=GpuAmount(gpu=0), reclaimable=True),
            Queue(name="research", guarantee=GpuAmount(gpu=0), reclaimable=True),
        ),
        policy=Policy(cooldown_s=0),
    )

    def job(name: str, queue: str, gpus: int, *, pods: int = 1, **changes: object) -> JobSpec:
        kind = JobKind.SHARED if queue == "shared" else JobKind.RESEARCH
        spec = JobSpec(
            name=name,
            queue=queue,
            kind=kind,
            submit_s=0.0,
            pods=pods,
            gpus_per_pod=gpus,
            min_available=pods,
            duration_s=10 * HOUR,
            checkpoint_interval_s=HOUR,
            priority=500 if queue == "shared" else 100,
        )
        return replace(spec, **changes)  # type: ignore[arg-type]

    jobs = [
        job("lab", "research", 4),
        job("mate", "shared", 4),
        job("pinned", "shared", 8, preemptable=False),
        production("ft", submit_s=0.5 * HOUR, duration_h=1.0),
        job("big", "shared", 8, pods=2, submit_s=1.0 * HOUR),
    ]
    sim = _simulate(scenario, jobs, "gpuyield")
    lab = sim.jobs["lab"]
    assert lab.evictions, "the research job yielded to production"
    assert sim.jobs["big"].first_started_at is None
    assert lab.started_at is not None
    assert 1.5 * HOUR <= lab.started_at <= 1.5 * HOUR + 2 * 60


class HoldsForAnHour:
    """A policy that never decides and holds every starving job back for an hour."""

    name = "holds-for-an-hour"
    graceful = False

    def __init__(self) -> None:
        self.asked: dict[str, list[float]] = {}

    def may_decide(self, sim: Simulation, job: SimJob) -> bool:
        self.asked.setdefault(job.name, []).append(sim.now)
        return False

    def held_until(self, sim: Simulation, job: SimJob) -> float:
        return self.asked[job.name][-1] + HOUR

    def decide(self, sim: Simulation, job: SimJob) -> Decision | None:
        raise AssertionError("never asked: may_decide said no")

    def executed(self, sim: Simulation, decision: Decision) -> None:
        raise AssertionError("nothing decided")


def test_a_held_back_job_is_looked_at_again_only_when_its_hold_ends() -> None:
    """A full cluster, a production job starving through dozens of cycles (a retry a minute)."""
    scenario = two_queue_cluster(nodes=1, days=0.2)
    policy = HoldsForAnHour()
    jobs = [research_gang(restart_job=False, pods=1), production("prod", 60.0)]
    Simulation(scenario, jobs, policy).run()
    assert policy.asked["prod"] == [60.0 + k * HOUR for k in range(5)]


class CountsAgreeWithPods:
    """An observer checking, at every instant of a run, what the engine keeps on the side."""

    def __init__(self) -> None:
        self.instants = 0

    def advance(self, sim: Simulation, t: float) -> None:
        self.instants += 1
        active = sim.active()
        for job in active:
            assert job.placed_count() == len(job.placed()), job.name
        for job in active[:3]:  # a snapshot's members: what holds GPUs, and its preemptor
            assert sim.holding_or(job) == [j for j in active if j is job or j.holding()]
        running = sim.running()
        for queue in sim.queue_used:
            priorities = [j.spec.priority for j in running if j.spec.queue == queue]
            assert sim.lowest_running_priority(queue) == min(priorities, default=None)
        sim.touched.clear()

    def finish(self, sim: Simulation) -> None:
        """Nothing to add once the run is over."""


@pytest.mark.parametrize("policy", ["volcano-native", "volcano-gang", "gpuyield"])
def test_the_engines_counters_agree_with_the_pods_throughout_a_busy_run(policy: str) -> None:
    scenario = default_scenario().model_copy(update={"days": 0.5, "nodes": 8})
    jobs = generate(scenario, random.Random(scenario.seed))
    observer = CountsAgreeWithPods()
    run_policy(scenario, jobs, policy, observer=observer)
    assert observer.instants > 100
