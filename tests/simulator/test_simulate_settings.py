"""``gpuyield simulate`` reads the deployment's settings: knobs set explicitly apply,
a scenario file's ``policy`` wins over them, and the simulator's own defaults stay."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuyield.agents.simulator import POLICIES
from gpuyield.agents.simulator.defaults import DEFAULT_CONTROLLER, default_scenario
from gpuyield.agents.simulator.gpuyield_policy import GpuyieldPolicy
from gpuyield.cli import app
from gpuyield.schemas.config import with_knobs

TRACE = "job_id,submit_s,duration_s,num_gpus,queue\nft,0,1800,8,prod\n"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("GPUYIELD_")]:
        monkeypatch.delenv(name)


def simulate(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    """A one-job trace on two nodes for an hour: seconds, not minutes."""
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    result = CliRunner().invoke(
        app,
        [
            *("simulate", "--nodes", "2", "--days", "0.04", "--policies", "gpuyield"),
            *("--trace", str(trace), "--queue-map", "*=production-core", "--json", *args),
        ],
        catch_exceptions=False,
    )
    out = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, out, result.stderr


def test_with_no_settings_the_simulator_keeps_its_own_defaults(tmp_path: Path) -> None:
    code, out, err = simulate(tmp_path)
    assert code == 0, err
    assert out is not None
    assert out["scenario"]["policy"] == default_scenario().policy.model_dump(mode="json")


def test_a_knob_set_in_the_environment_reaches_the_scenario(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUYIELD_COOLDOWN_S", "900")
    monkeypatch.setenv("GPUYIELD_ALPHA", "75")
    code, out, err = simulate(tmp_path)
    assert code == 0, err
    assert out is not None
    assert out["scenario"]["policy"]["cooldown_s"] == 900.0
    assert out["scenario"]["policy"]["alpha"] == 75.0
    assert out["scenario"]["policy"]["max_evictions"] == default_scenario().policy.max_evictions


def test_the_scenario_files_policy_wins_over_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = tmp_path / "gpuyield.env"
    settings.write_text("GPUYIELD_COOLDOWN_S=900\nGPUYIELD_MAX_EVICTIONS=5\n")
    scenario = tmp_path / "experiment.yaml"
    scenario.write_text("policy:\n  cooldown_s: 60\n")
    code, out, err = simulate(tmp_path, "--config", str(settings), "--scenario", str(scenario))
    assert code == 0, err
    assert out is not None
    assert out["scenario"]["policy"]["cooldown_s"] == 60.0  # the experiment's
    assert out["scenario"]["policy"]["max_evictions"] == 5  # the deployment's


def test_a_knob_valid_alone_but_not_with_the_simulators_defaults_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # 200 s is a valid backoff cap over the controller's 30 s retry, not over the simulator's 300.
    monkeypatch.setenv("GPUYIELD_DEMAND_BACKOFF_MAX_S", "200")
    code, _, err = simulate(tmp_path)
    assert code == 2
    assert err == (
        "gpuyield: GPUYIELD_DEMAND_BACKOFF_MAX_S: 200 is below demand_retry_s (300), where the "
        "backoff starts (with the simulator's defaults)\n"
    )


def test_gpuyield_takes_its_planner_and_retry_knobs_from_the_config() -> None:
    config = with_knobs(
        DEFAULT_CONTROLLER,
        {"planner_budget": 800, "demand_retry_s": 120.0, "demand_backoff_max_s": 960.0},
    )
    policy = POLICIES["gpuyield"](default_scenario(), config)
    assert isinstance(policy, GpuyieldPolicy)
    assert policy.budget == 800
    assert policy.ledger.cooldown_s == 120.0
    assert policy.ledger.backoff_max_s == 960.0
    stock = POLICIES["gpuyield"](default_scenario())
    assert isinstance(stock, GpuyieldPolicy)
    assert (stock.budget, stock.ledger.cooldown_s, stock.ledger.backoff_max_s) == (
        5_000,
        300.0,
        1800.0,
    )
