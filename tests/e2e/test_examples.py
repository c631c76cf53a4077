"""Every shipped example runs, is up to date, and gets the decision it was written to show."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyield.agents.planner import plan
from gpuyield.schemas import Plan, load_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_examples", EXAMPLES / "build_examples.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plan(name: str) -> Plan:
    return plan(load_snapshot((EXAMPLES / name).read_text(), name))


@pytest.mark.parametrize("name", sorted(_builder().EXAMPLES))
def test_the_example_file_matches_its_description(name: str) -> None:
    builder = _builder()
    assert (EXAMPLES / name).read_text() == builder.render(builder.EXAMPLES[name]()), (
        "run `python examples/build_examples.py`"
    )


def test_the_deployed_snapshot_matches_its_example() -> None:
    builder = _builder()
    expected = builder.render(builder.EXAMPLES[builder.DEPLOYED_EXAMPLE]())
    assert builder.DEPLOY_SNAPSHOT.read_text() == expected


def test_a_near_finished_research_gang_is_protected_and_newer_sweeps_yield() -> None:
    result = _plan("protected-research.json")
    assert result.feasible
    assert result.action == "reclaim"
    assert {v.job for v in result.victims} == {"sweep-0", "sweep-1"}
    assert result.objective.protected_victims == 0


def test_the_protected_gang_would_have_been_the_cheapest_victim() -> None:
    snap = load_snapshot((EXAMPLES / "protected-research.json").read_text())
    gang = snap.job("llm-ablation-final")
    assert gang is not None
    assert gang.last_checkpoint_at is not None
    gang_loss = 32 * (snap.now - gang.last_checkpoint_at)
    assert gang_loss < _plan("protected-research.json").lost_gpu_seconds


@pytest.mark.parametrize(
    ("name", "nodes"), [("inference-burst-32.json", 4), ("inference-burst-64.json", 8)]
)
def test_inference_gets_whole_nodes_back_from_borrowed_capacity(name: str, nodes: int) -> None:
    result = _plan(name)
    assert result.feasible
    assert result.action == "reclaim"
    assert len(set(result.placement.values())) == nodes
    assert all(v.queue == "research-elastic" for v in result.victims)
    assert all(v.whole_job for v in result.victims)


def test_a_gang_is_never_placed_across_fragments() -> None:
    result = _plan("fragmented.json")
    assert result.feasible
    assert len(set(result.placement.values())) == 2
    assert result.victims, "the 16 free GPUs are fragments: room must be made"


def test_a_half_placed_gang_deadlock_is_broken_at_no_loss() -> None:
    result = _plan("half-placed-gang.json")
    assert result.preemptor == "gang-a"
    assert [v.job for v in result.victims] == ["gang-b"]
    assert result.lost_gpu_seconds == 0.0
    assert sorted(result.placement.values()) == ["gpu-02", "gpu-03"]


@pytest.mark.parametrize("name", sorted(_builder().EXAMPLES))
def test_the_cli_prints_the_same_bytes_twice(name: str) -> None:
    command = [sys.executable, "-m", "gpuyield", "plan", str(EXAMPLES / name)]
    first = subprocess.run(command, capture_output=True, check=True).stdout
    second = subprocess.run(command, capture_output=True, check=True).stdout
    assert first == second
    assert json.loads(first)["version"] == 1
