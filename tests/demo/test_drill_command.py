"""``gpuyield demo --drill`` as a platform team runs it before a peak.

The whole-run test plays the drill through the real processes (broker,
Redis, worker, 24 node agents, torch trainers and stand-ins) and checks what
the drill is for: the timeline is complete and causal, the evicted jobs were
Suspended and resumed from the step their yield saved, the exit status says
whether every budget was met, and nothing is left running. Whether the
budgets are met is a figure of the machine (``bench/bench_drill.py``), not
asserted here.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest

from demo.test_demo_command import GPUYIELD, commands, demo_env, started_by
from gpuyield.agents.demo.drill import BURST_PODS, OFFLINE


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_drill_reports_a_complete_timeline_and_the_resumes_from_checkpoints(
    tmp_path: Path,
) -> None:
    mark = secrets.token_hex(8)
    result = subprocess.run(
        [GPUYIELD, "demo", "--drill", "--json"],
        capture_output=True,
        text=True,
        env=demo_env(tmp_path, mark),
        timeout=560,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert document["error"] is None, document["error"]
    steps = {s["what"].split(" (")[0]: s for s in document["timeline"]}
    assert all(s["count"] > 0 for s in steps.values()), steps
    assert steps["burst seen"]["first_s"] == 0.0
    assert steps["decision"]["first_s"] <= steps["yield commands"]["first_s"]
    assert steps["yield commands"]["last_s"] < steps["acks"]["first_s"]
    assert steps["GPUs free"]["last_s"] <= steps["burst pods placed"]["first_s"]
    assert steps["burst pods placed"]["last_s"] < steps["burst pods ready"]["first_s"]
    assert steps["burst pods ready"]["count"] == BURST_PODS
    victims = document["victims"]
    assert len(victims) == BURST_PODS  # one single-node job per 8-GPU pod of the burst
    assert {v.split("/")[0] for v in victims} == {OFFLINE}
    assert document["yields"]["commands"] == len(victims)
    resumed = document["budgets"][2]
    assert resumed["met"], resumed["detail"]
    assert [(r["job"], r["resumed_at_step"]) for r in document["resumptions"]] == [
        (r["job"], r["checkpoint_step"]) for r in document["resumptions"]
    ]
    assert sorted(r["job"] for r in document["resumptions"]) == sorted(victims)
    assert (result.returncode == 0) == all(b["met"] for b in document["budgets"])
    assert (result.returncode == 0) == document["passed"]
    left = started_by(mark, tmp_path)
    assert left == [], commands(left)


def test_a_cluster_too_small_for_the_drill_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [GPUYIELD, "demo", "--drill", "--nodes", "16"],
        capture_output=True,
        text=True,
        env=demo_env(tmp_path, secrets.token_hex(8)),
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--nodes" in result.stderr
    assert "at least 24" in result.stderr or "greater than or equal to 24" in result.stderr
