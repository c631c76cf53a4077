"""The generator: seeded, and its jobs follow the documented distributions."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter

import pytest

from gpuyield.agents.simulator.defaults import DEFAULT_WORKLOAD, default_scenario
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.agents.simulator.workload import (
    BURST_SPREAD_S,
    assign_missing,
    expected_gpu_hours_per_day,
    generate,
    mean_duration_h,
    rules_for_queue,
)
from gpuyield.schemas.scenario import Scenario, WorkloadMix

DAY = 86_400.0


def _jobs(seed: int = 0, scenario: Scenario | None = None) -> list[JobSpec]:
    return generate(scenario or default_scenario(), random.Random(seed))


def _long(days: float = 200.0, **changes: object) -> Scenario:
    return default_scenario().model_copy(update={"days": days, **changes})


def test_the_same_seed_gives_the_same_jobs() -> None:
    assert _jobs(7) == _jobs(7)


def test_a_different_seed_gives_different_jobs() -> None:
    assert _jobs(7) != _jobs(8)


def test_jobs_are_sorted_named_per_queue_and_inside_the_horizon() -> None:
    jobs = _jobs()
    assert jobs == sorted(jobs, key=lambda j: (j.submit_s, j.name))
    assert all(-DAY <= j.submit_s < 14 * DAY for j in jobs)
    assert all(j.submit_s == int(j.submit_s) for j in jobs)
    for queue in {j.queue for j in jobs}:
        names = [j.name for j in jobs if j.queue == queue]
        assert names == [f"{queue}-{i:05d}" for i in range(len(names))]


def test_sizes_come_from_the_mix_and_fit_a_node() -> None:
    by_queue = {mix.queue: mix for mix in DEFAULT_WORKLOAD}
    for job in _jobs():
        mix = by_queue[job.queue]
        assert job.gpus_per_pod in mix.gpus_per_pod
        assert job.pods in mix.pods
        assert job.priority == mix.priority
        assert job.kind == JobKind(mix.kind)


def test_every_size_of_a_mix_is_drawn_about_uniformly() -> None:
    research = [j for j in _jobs(3, _long()) if j.queue == "research-elastic"]
    pods = Counter(j.pods for j in research)
    sizes = Counter(j.gpus_per_pod for j in research)
    for counts in (pods, sizes):
        assert set(counts) == {1, 2, 4, 8}
        for count in counts.values():
            assert count / len(research) == pytest.approx(0.25, abs=0.05)


def test_every_production_job_has_an_sla_of_1_5_to_3_times_its_duration() -> None:
    jobs = _jobs()
    production = [j for j in jobs if j.kind is JobKind.PRODUCTION]
    assert production
    for job in production:
        assert job.sla_s is not None
        assert 1.5 * job.duration_s <= job.sla_s <= 3.0 * job.duration_s
        assert job.min_available == job.pods
    assert all(j.sla_s is None for j in jobs if j.kind is not JobKind.PRODUCTION)


def test_about_40_percent_of_research_jobs_are_elastic_with_half_the_gang() -> None:
    research = [j for j in _jobs(1, _long()) if j.queue == "research-elastic" and j.pods > 1]
    elastic = [j for j in research if j.min_available < j.pods]
    assert len(elastic) / len(research) == pytest.approx(0.4, abs=0.04)
    assert all(j.min_available == math.ceil(j.pods / 2) for j in elastic)


def test_checkpoint_intervals_fall_in_the_mix_range() -> None:
    by_queue = {mix.queue: mix for mix in DEFAULT_WORKLOAD}
    for job in _jobs():
        low, high = by_queue[job.queue].checkpoint_interval_min
        assert low * 60 <= job.checkpoint_interval_s <= high * 60


def test_durations_are_lognormal_around_the_median_and_clipped() -> None:
    jobs = _jobs(2, _long())
    for mix in (DEFAULT_WORKLOAD[2], DEFAULT_WORKLOAD[3]):
        hours = [j.duration_s / 3600 for j in jobs if j.queue == mix.queue]
        assert statistics.median(hours) == pytest.approx(mix.duration_h_median, rel=0.1)
        assert statistics.fmean(hours) == pytest.approx(mean_duration_h(mix), rel=0.1)
        assert max(hours) <= mix.duration_h_max
        assert min(hours) >= 1 / 60


def test_restart_job_follows_the_scenarios_share() -> None:
    for share in (0.0, 0.3, 1.0):
        jobs = _jobs(4, _long(days=60, restart_job_share=share))
        assert sum(j.restart_job for j in jobs) / len(jobs) == pytest.approx(share, abs=0.03)


def test_the_warm_up_submits_before_the_window() -> None:
    """Arrivals start ``warmup_h`` before time 0, the measured window's start."""
    jobs = _jobs()
    assert default_scenario().warmup_h == 24
    assert min(j.submit_s for j in jobs) < -20 * 3600
    assert sum(1 for j in jobs if j.submit_s < 0) > 50
    cold = _jobs(0, default_scenario().model_copy(update={"warmup_h": 0.0}))
    assert all(0 <= j.submit_s < 14 * DAY for j in cold)


def test_poisson_arrivals_match_jobs_per_day() -> None:
    jobs = _jobs(5, _long())
    shared = sum(1 for j in jobs if j.queue == "shared")
    assert shared / 201 == pytest.approx(DEFAULT_WORKLOAD[3].jobs_per_day, rel=0.05)


def test_bursts_arrive_every_12_to_24_hours_as_batches() -> None:
    only_bursts = Scenario(queues=default_scenario().queues, workload=(DEFAULT_WORKLOAD[1],))
    jobs = _jobs(6, only_bursts.model_copy(update={"days": 60.0}))
    starts: list[float] = []
    for job in jobs:
        if not starts or job.submit_s - starts[-1] > BURST_SPREAD_S:
            starts.append(job.submit_s)
    gaps = [(b - a) / 3600 for a, b in itertools.pairwise(starts)]
    assert all(12 - 0.25 <= gap <= 24 + 0.25 for gap in gaps), gaps
    assert len(jobs) / len(starts) == pytest.approx(DEFAULT_WORKLOAD[1].burst_size, abs=0.5)


def test_the_realised_load_matches_the_documented_expectation() -> None:
    """Over 200 days (and the day of warm-up) the drawn GPU-hours are within 5 % of the mean."""
    jobs = _jobs(9, _long())
    drawn = sum(j.gpus * j.duration_s for j in jobs) / 3600 / 201
    expected = sum(expected_gpu_hours_per_day(m) for m in DEFAULT_WORKLOAD)
    assert drawn == pytest.approx(expected, rel=0.05)


def test_editing_one_mix_leaves_the_others_jobs_unchanged() -> None:
    base = _jobs(11)
    busier = default_scenario().workload[3].model_copy(update={"jobs_per_day": 90.0})
    workload = (*DEFAULT_WORKLOAD[:3], busier)
    other = _jobs(11, default_scenario().model_copy(update={"workload": workload}))
    assert [j for j in base if j.queue != "shared"] == [j for j in other if j.queue != "shared"]


def test_an_empty_workload_gives_no_jobs() -> None:
    assert _jobs(0, default_scenario().model_copy(update={"workload": ()})) == []


def test_a_mix_with_an_unknown_kind_is_refused() -> None:
    bad = DEFAULT_WORKLOAD[3].model_copy(update={"kind": "batch"})
    with pytest.raises(ValueError, match="batch"):
        _jobs(0, default_scenario().model_copy(update={"workload": (bad,)}))


def test_a_one_pod_job_stays_rigid_whatever_the_elastic_draw() -> None:
    always = WorkloadMix(queue="q", kind="research", jobs_per_day=1, elastic_share=1.0)
    job = assign_missing(
        name="j",
        queue="q",
        kind=JobKind.RESEARCH,
        submit_s=0.0,
        pods=1,
        gpus_per_pod=4,
        duration_s=100.0,
        rules=always,
        restart_job_share=0.5,
        rng=random.Random(0),
    )
    assert job.min_available == 1


def test_a_production_mix_without_sla_factor_still_gets_the_default_sla() -> None:
    mix = WorkloadMix(queue="q", kind="production", jobs_per_day=1)
    job = assign_missing(
        name="j",
        queue="q",
        kind=JobKind.PRODUCTION,
        submit_s=0.0,
        pods=2,
        gpus_per_pod=8,
        duration_s=1000.0,
        rules=mix,
        restart_job_share=0.5,
        rng=random.Random(0),
    )
    assert job.sla_s is not None
    assert 1500 <= job.sla_s <= 3000


@pytest.mark.parametrize(
    ("queue", "kind", "priority"),
    [
        ("production-core", JobKind.PRODUCTION, 1000),
        ("research-elastic", JobKind.RESEARCH, 100),
        ("shared", JobKind.SHARED, 500),
        ("anything-else", JobKind.SHARED, 500),
    ],
)
def test_a_queue_without_a_mix_gets_the_rules_of_its_kind(
    queue: str, kind: JobKind, priority: int
) -> None:
    got_kind, rules = rules_for_queue(queue, ())
    assert (got_kind, rules.priority) == (kind, priority)


def test_a_queue_with_a_mix_gets_that_mixs_kind_and_rules() -> None:
    mix = WorkloadMix(queue="shared", kind="production", jobs_per_day=1, priority=7)
    assert rules_for_queue("shared", (mix,)) == (JobKind.PRODUCTION, mix)


def test_a_seconds_long_production_job_still_gets_minutes_of_slack() -> None:
    """A budget never leaves less than ``sla_min_slack_min`` beyond the duration."""
    job = assign_missing(
        name="j",
        queue="production-core",
        kind=JobKind.PRODUCTION,
        submit_s=0.0,
        pods=1,
        gpus_per_pod=4,
        duration_s=42.0,
        rules=DEFAULT_WORKLOAD[0],
        restart_job_share=0.5,
        rng=random.Random(0),
    )
    assert DEFAULT_WORKLOAD[0].sla_min_slack_min == 15
    assert job.sla_s == 42.0 + 15 * 60
    no_floor = DEFAULT_WORKLOAD[0].model_copy(update={"sla_min_slack_min": 0.0})
    bare = assign_missing(
        name="j",
        queue="production-core",
        kind=JobKind.PRODUCTION,
        submit_s=0.0,
        pods=1,
        gpus_per_pod=4,
        duration_s=42.0,
        rules=no_floor,
        restart_job_share=0.5,
        rng=random.Random(0),
    )
    assert bare.sla_s is not None
    assert 1.5 * 42 <= bare.sla_s <= 3 * 42
