"""The snapshots the simulator hands the planner are valid snapshots.

``snapshot_for`` skips the snapshot's cross-reference check for speed; this
runs whole simulated days and validates every snapshot it builds from its
wire form, as ``gpuyield plan`` would read it.
"""

from __future__ import annotations

import random

import pytest

from gpuyield.agents.simulator import gpuyield_policy, run_policy
from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.engine import Simulation
from gpuyield.agents.simulator.state import SimJob
from gpuyield.agents.simulator.workload import generate
from gpuyield.schemas import Snapshot


def test_every_snapshot_of_a_busy_day_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Snapshot] = []
    real = gpuyield_policy.snapshot_for

    def checked(sim: Simulation, job: SimJob) -> Snapshot:
        snapshot = real(sim, job)
        built.append(Snapshot.model_validate_json(snapshot.model_dump_json()))
        return snapshot

    monkeypatch.setattr(gpuyield_policy, "snapshot_for", checked)
    scenario = default_scenario().model_copy(update={"days": 1.0})
    run_policy(scenario, generate(scenario, random.Random(scenario.seed)), "gpuyield")
    assert len(built) > 10, "the day should hold preemption rounds"
