"""What an overloaded pool costs whom: per-queue figures, the targets, and production's claim."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from test_engine import HOUR, production, research_gang, two_queue_cluster

from gpuyield.agents.simulator import POLICIES, Simulation, gpuyield_policy, run_policy
from gpuyield.agents.simulator.defaults import (
    default_scenario,
    overload_scenario,
    render_overload_scenario,
)
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.agents.simulator.targets import check_targets
from gpuyield.agents.simulator.workload import generate
from gpuyield.schemas import Policy
from gpuyield.schemas.simulation import PolicyMetrics


def metrics(**changes: float) -> PolicyMetrics:
    base = PolicyMetrics(
        sla_attainment=1.0,
        lost_gpu_hours_per_day=100.0,
        dangling_gangs_per_week=10.0,
        gpu_utilization=0.9,
        evictions=100,
        livelock_incidents=0,
        production_wait_p50_s=30.0,
        production_wait_p99_s=600.0,
        production_jobs=50,
        jobs_completed=1000,
        jobs_failed=5,
    )
    return base.model_copy(update=changes)


# -- per-queue figures ----------------------------------------------------------------------


def test_each_queue_reports_its_jobs_waits_and_completion_times() -> None:
    # One node: the 2-hour research gang runs first, the 1-hour fine-tune waits for it
    # (the gang is not preemptable by then: production's queue is at its guarantee).
    scenario = two_queue_cluster(nodes=1, days=4 / 24)
    jobs = [
        research_gang(restart_job=False, pods=1, submit_s=0.0, duration_h=2.0),
        production("ft", submit_s=0.0, duration_h=1.0),
    ]
    result = run_policy(scenario, jobs, "volcano-native").metrics
    prod, research = result.queues["prod"], result.queues["research"]
    assert (prod.jobs_submitted, prod.jobs_completed) == (1, 1)
    assert (research.jobs_submitted, research.jobs_completed) == (1, 1)
    assert sum(q.jobs_completed for q in result.queues.values()) == result.jobs_completed
    # Production (priority 1000) goes first; the gang waits the hour it runs.
    assert prod.wait_p50_s == 0.0
    assert research.wait_p99_s == HOUR
    assert research.completion_p50_s == 3 * HOUR


def test_a_queue_whose_jobs_never_finished_has_no_completion_time() -> None:
    scenario = two_queue_cluster(nodes=1, days=1 / 24)
    jobs = [research_gang(restart_job=False, pods=1, duration_h=5.0)]
    research = run_policy(scenario, jobs, "gpuyield").metrics.queues["research"]
    assert research.jobs_completed == 0
    assert research.completion_p50_s is None


# -- the targets against stock Volcano ------------------------------------------------------


def verdicts(mine: PolicyMetrics, native: PolicyMetrics) -> dict[str, bool]:
    checks = check_targets({"volcano-native": native, "gpuyield": mine})
    return {c.target: c.met for c in checks}


def test_a_policy_as_good_as_native_with_no_lost_work_meets_every_target() -> None:
    mine = metrics(lost_gpu_hours_per_day=0.0, dangling_gangs_per_week=0.0)
    assert all(verdicts(mine, metrics()).values())


def test_fewer_than_ninety_percent_of_natives_jobs_completed_is_a_miss() -> None:
    mine = metrics(jobs_completed=899, lost_gpu_hours_per_day=0.0, dangling_gangs_per_week=0.0)
    assert verdicts(mine, metrics())["jobs_completed"] is False
    assert verdicts(mine.model_copy(update={"jobs_completed": 900}), metrics())["jobs_completed"]


def test_a_longer_production_wait_p99_is_a_miss_even_with_no_lost_work() -> None:
    mine = metrics(production_wait_p99_s=601.0, lost_gpu_hours_per_day=0.0)
    assert verdicts(mine, metrics())["production_wait_p99_s"] is False


def test_lost_work_must_be_ten_times_below_natives() -> None:
    assert verdicts(metrics(lost_gpu_hours_per_day=10.0), metrics())["lost_gpu_hours_per_day"]
    assert not verdicts(metrics(lost_gpu_hours_per_day=10.1), metrics())["lost_gpu_hours_per_day"]


def test_a_lower_sla_attainment_or_a_dangling_gang_is_a_miss() -> None:
    result = verdicts(metrics(sla_attainment=0.99, dangling_gangs_per_week=0.5), metrics())
    assert result["sla_attainment"] is False
    assert result["dangling_gangs_per_week"] is False


def test_without_the_baseline_nothing_is_judged() -> None:
    assert check_targets({"gpuyield": metrics()}) == []


# -- production's claim when its SLA is at risk ---------------------------------------------


def first_start_of_the_fine_tune(*, sla: bool) -> float:
    """A research gang started at 0 holds the only node with a 4-hour cooldown; a 1-hour
    fine-tune with (or without) a 4-hour SLA budget arrives at 60 s."""
    scenario = two_queue_cluster(nodes=1, days=6 / 24).model_copy(
        update={"policy": Policy(cooldown_s=4 * HOUR)}
    )
    fine_tune = production("ft", submit_s=60.0, duration_h=1.0)
    if not sla:
        fine_tune = replace(fine_tune, sla_s=None)
    jobs = [research_gang(restart_job=False, pods=1, submit_s=0.0), fine_tune]
    sim = Simulation(scenario, jobs, POLICIES["gpuyield"](scenario))
    sim.run()
    started = sim.jobs["ft"].first_started_at
    assert started is not None
    return started


def test_a_fine_tune_with_an_sla_overrides_the_victims_cooldown() -> None:
    # Its first round decides; the victim checkpoints for 60 s; it starts at the next cycle.
    assert first_start_of_the_fine_tune(sla=True) <= 60.0 + 3 * 60.0


def test_without_an_sla_the_cooldown_holds() -> None:
    assert first_start_of_the_fine_tune(sla=False) >= 4 * HOUR


# -- the shipped overloaded scenario and what makes a backlog cheap -------------------------

OVERLOAD_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scenario-overload.json"


def test_the_overload_example_file_is_the_overload_scenario_dumped() -> None:
    assert OVERLOAD_EXAMPLE.read_text() == render_overload_scenario(), (
        "regenerate examples/scenario-overload.json (see agents/simulator/defaults.py)"
    )


def test_the_overload_scenarios_guarantees_fit_its_pool() -> None:
    scenario = overload_scenario()
    pool = scenario.nodes * scenario.gpus_per_node
    assert sum(q.guarantee.gpu for q in scenario.queues) <= pool
    assert all((q.capability.gpu or 0) <= pool for q in scenario.queues)


def test_skipping_the_planner_where_no_victim_is_possible_changes_no_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = default_scenario().model_copy(update={"days": 0.5, "nodes": 8})
    jobs = generate(scenario, random.Random(scenario.seed))
    fast = run_policy(scenario, jobs, "gpuyield").model_dump_json()
    monkeypatch.setattr(gpuyield_policy, "no_victim_possible", lambda sim, job: False)
    assert run_policy(scenario, jobs, "gpuyield").model_dump_json() == fast


def test_a_demand_held_back_spends_none_of_the_cycles_attempts() -> None:
    """Twenty gangs larger than the cluster outrank a production fine-tune in Volcano's
    order; no plan can place them, so after their first rounds they back off. Held back,
    they must not use up the cycle's twelve attempts: the fine-tune behind them still gets
    its round, and reclaims the research gang's GPUs within minutes."""
    scenario = two_queue_cluster(nodes=2, days=0.5)
    holder = research_gang("holder", restart_job=False, pods=2, submit_s=0.0)
    backlog = [
        JobSpec(
            name=f"big-{i:02d}",
            queue="research",
            kind=JobKind.RESEARCH,
            submit_s=60.0,
            pods=3,
            gpus_per_pod=8,
            min_available=3,
            duration_s=HOUR,
            checkpoint_interval_s=HOUR,
            priority=2000,
            restart_job=False,
        )
        for i in range(20)
    ]
    fine_tune = production("ft", submit_s=3 * HOUR)
    sim = Simulation(scenario, [holder, *backlog, fine_tune], POLICIES["gpuyield"](scenario))
    sim.run()
    started = sim.jobs["ft"].first_started_at
    assert started is not None
    assert started - 3 * HOUR <= 5 * 60
