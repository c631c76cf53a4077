"""The gang-deadlock detector and its resolution, on the planner's own snapshots."""

from __future__ import annotations

from pathlib import Path

from gpuyield.agents.policy.gang_deadlock import (
    DeadlockedGangs,
    find,
    fits,
    partial_gangs,
    resolve,
    rules_for,
)
from gpuyield.schemas import Job, JobState, Pod, PodPhase, Snapshot, load_snapshot

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "half-placed-gang.json"


def half_placed() -> Snapshot:
    """Two 4 x 8-GPU gangs on 4 nodes, two pods placed each (examples/half-placed-gang.json)."""
    return load_snapshot(EXAMPLE.read_text())


def test_two_half_placed_gangs_on_a_full_cluster_are_a_deadlock() -> None:
    found = find(half_placed())
    assert found is not None
    assert found.gangs == ("gang-a", "gang-b")
    assert (found.held["gang-a"], found.wanted["gang-a"], found.free_gpus) == (16, 32, 0)


def test_the_gang_that_loses_least_yields_and_the_other_completes() -> None:
    snapshot = half_placed()
    found = find(snapshot)
    assert found is not None
    resolution = resolve(found, lambda _member: snapshot)
    assert resolution.preemptor == "gang-a"  # priority 500 keeps; 400 yields at no loss
    assert resolution.plan is not None
    assert [v.job for v in resolution.plan.victims] == ["gang-b"]
    assert resolution.plan.lost_gpu_seconds == 0.0


def test_equal_priorities_still_break_the_deadlock() -> None:
    snapshot = half_placed()
    equal = snapshot.model_copy(
        update={"jobs": tuple(j.model_copy(update={"priority": 400.0}) for j in snapshot.jobs)}
    )
    found = find(equal)
    assert found is not None
    resolution = resolve(found, lambda _member: equal)
    assert resolution.preemptor == "gang-a"  # all else equal: the name
    assert resolution.plan is not None
    assert resolution.plan.feasible


def test_a_partial_gang_blocked_by_a_running_job_is_a_shortage_not_a_deadlock() -> None:
    snapshot = half_placed()
    gang_b = snapshot.jobs[1]
    running = gang_b.model_copy(
        update={
            "state": JobState.RUNNING,
            "min_available": 2,
            "pods": tuple(p for p in gang_b.pods if p.node is not None),
            "started_at": snapshot.now - 3600,
        }
    )
    alone = snapshot.model_copy(update={"jobs": (snapshot.jobs[0], running)})
    assert [j.name for j in partial_gangs(alone)] == ["gang-a"]
    assert find(alone) is None


def test_gangs_that_can_complete_on_free_gpus_are_no_deadlock() -> None:
    snapshot = half_placed()
    bigger = snapshot.model_copy(
        update={
            "nodes": (
                *snapshot.nodes,
                *(snapshot.nodes[0].model_copy(update={"name": f"gpu-1{i}"}) for i in range(2)),
            )
        }
    )
    assert find(bigger) is None


def test_a_suspended_job_is_never_a_partial_gang() -> None:
    job = Job(
        name="ft",
        queue="training",
        priority=1.0,
        state=JobState.SUSPENDED,
        min_available=2,
        pods=(
            Pod(name="ft-0", gpus=8, node="gpu-00"),
            Pod(name="ft-1", gpus=8, phase=PodPhase.PENDING),
        ),
    )
    snapshot = half_placed()
    assert partial_gangs(snapshot.model_copy(update={"jobs": (job,)})) == []


def test_first_fit_places_pods_one_node_each() -> None:
    assert fits([8, 8], {"a": 8, "b": 8})
    assert not fits([8, 8], {"a": 16 - 9, "b": 8})
    assert fits([], {})


def test_the_deadlock_rules_differ_from_the_default_only_in_rule_2() -> None:
    rules = rules_for(["gang-a", "gang-b"])
    assert [r.name for r in rules].count("gang-deadlock") == 1
    assert "preempt-weight" not in [r.name for r in rules]
    assert isinstance(next(r for r in rules if r.name == "gang-deadlock"), DeadlockedGangs)
