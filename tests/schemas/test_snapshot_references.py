"""A snapshot's references are checked when it is built, and again whenever it may have changed."""

from __future__ import annotations

import re

import pytest
from builders import a_job, a_node, a_pod, a_snapshot
from pydantic import ValidationError

from gpuyield.schemas.messages import Decision, RoundOutcome
from gpuyield.schemas.plan import Action, Plan

PLAN = Plan(preemptor="default/ft", action=Action.NONE, feasible=True, explanation=("fits",))


def a_decision(snapshot: object) -> Decision:
    return Decision.model_validate(
        {
            "decision_id": "d-1",
            "demand": "default/ft",
            "decided_at": 1_764_461_000.0,
            "snapshot": snapshot,
            "plan": PLAN,
            "outcome": RoundOutcome.NO_VICTIMS,
        }
    )


def test_a_decision_carries_the_snapshot_it_was_given() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")], jobs=[a_job("default/ft").with_pods(a_pod("ft-0", 8, "n1"))]
    )
    assert a_decision(snapshot).snapshot is snapshot


def test_a_snapshot_copied_with_a_pod_on_an_unknown_node_is_refused_by_the_decision() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")], jobs=[a_job("default/ft").with_pods(a_pod("ft-0", 8, "n1"))]
    )
    # model_copy does not validate: the copy is another snapshot, checked when carried
    moved = snapshot.model_copy(
        update={"jobs": (snapshot.jobs[0].model_copy(update={"pods": (a_pod("ft-0", 8, "n9"),)}),)}
    )
    with pytest.raises(ValidationError, match=re.escape("jobs[0].pods[0].node: unknown node 'n9'")):
        a_decision(moved)
