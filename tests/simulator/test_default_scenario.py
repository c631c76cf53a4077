"""The default scenario: the issue's pool and queues, 85-92 % offered load, shipped verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuyield.agents.simulator.defaults import (
    DEFAULT_WORKLOAD,
    default_scenario,
    render_default_scenario,
)
from gpuyield.agents.simulator.scenario_file import load_scenario, scenario_problem
from gpuyield.agents.simulator.workload import expected_gpu_hours_per_day, jobs_per_day
from gpuyield.schemas.scenario import Scenario, WorkloadMix

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scenario-default.json"
POOL_GPU_HOURS_PER_DAY = 512 * 24


def _per_queue() -> dict[str, float]:
    load: dict[str, float] = {}
    for mix in DEFAULT_WORKLOAD:
        load[mix.queue] = load.get(mix.queue, 0.0) + expected_gpu_hours_per_day(mix)
    return load


def test_the_example_file_is_the_default_scenario_dumped() -> None:
    assert EXAMPLE.read_text() == render_default_scenario(), (
        "regenerate examples/scenario-default.json (see agents/simulator/defaults.py)"
    )


def test_the_example_file_loads_back_to_the_default() -> None:
    assert load_scenario(EXAMPLE.read_text(), EXAMPLE.name) == default_scenario()
    assert Scenario.model_validate(json.loads(EXAMPLE.read_text())) == default_scenario()


def test_the_default_is_the_issues_pool_and_queues() -> None:
    scenario = default_scenario()
    assert (scenario.nodes, scenario.gpus_per_node, scenario.days) == (64, 8, 14.0)
    queues = {q.name: q for q in scenario.queues}
    assert set(queues) == {"production-core", "research-elastic", "shared"}
    production, research, shared = (
        queues["production-core"],
        queues["research-elastic"],
        queues["shared"],
    )
    assert (production.weight, production.capability.gpu, production.reclaimable) == (
        80,
        256,
        False,
    )
    assert (research.weight, research.capability.gpu, research.reclaimable) == (20, 128, True)
    assert shared.reclaimable
    assert scenario_problem(scenario) is None


def test_the_offered_load_keeps_the_pool_85_to_92_percent_busy() -> None:
    share = sum(_per_queue().values()) / POOL_GPU_HOURS_PER_DAY
    assert 0.85 <= share <= 0.92, share


def test_each_queue_stays_within_its_capability_on_average() -> None:
    caps = {q.name: q.capability.gpu for q in default_scenario().queues}
    for queue, gpu_hours in _per_queue().items():
        cap = caps[queue]
        assert cap is not None
        assert gpu_hours / 24 < cap, queue


def test_a_production_burst_pushes_production_past_its_capability() -> None:
    """Baseline production plus one average burst wants more than the 256-GPU capability."""
    steady, burst = (m for m in DEFAULT_WORKLOAD if m.queue == "production-core")
    baseline_gpus = expected_gpu_hours_per_day(steady) / 24
    burst_gpus = burst.burst_size * (sum(burst.pods) / len(burst.pods)) * burst.gpus_per_pod[0]
    assert burst.burst_every_h is not None
    assert burst.burst_every_h * 2 / 3 >= 12
    assert burst.burst_every_h * 4 / 3 <= 24
    assert baseline_gpus + burst_gpus > 256


@pytest.mark.parametrize("mix", DEFAULT_WORKLOAD, ids=lambda m: f"{m.queue}-{m.jobs_per_day}")
def test_jobs_per_day_records_the_rate_the_generator_follows(mix: WorkloadMix) -> None:
    assert jobs_per_day(mix) == pytest.approx(mix.jobs_per_day)
