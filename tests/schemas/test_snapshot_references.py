"""A snapshot's references are checked when it is built, and again whenever it may have changed."""

from __future__ import annotations

import re

import pytest
from builders import NOW, a_job, a_node, a_pod, a_queue, a_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpuyield.schemas.messages import Decision, RoundOutcome
from gpuyield.schemas.plan import Action, Plan
from gpuyield.schemas.snapshot import (
    REFERENCE_TOTALS,
    JobReferences,
    PodPhase,
    Policy,
    ReferenceTotals,
    Snapshot,
    _first_reference_problem,
)

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


pod_spec = st.tuples(
    st.sampled_from(["w-0", "w-1", "w-2"]),
    st.sampled_from([None, "n0", "n0", "n1", "n9"]),  # n9 is no node of the snapshot
    st.sampled_from([1, 4, 8]),
    st.sampled_from([PodPhase.RUNNING, PodPhase.SUCCEEDED]),
)
job_spec = st.tuples(
    st.sampled_from(["default", "default", "other", "missing"]),
    st.lists(pod_spec, max_size=3),
    st.one_of(st.none(), st.none(), st.integers(1, 4)),
)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(st.tuples(st.sampled_from(["n0", "n1", "n2"]), st.integers(0, 16)), max_size=3),
    jobs=st.lists(
        st.tuples(st.sampled_from(["a/j0", "a/j1", "b/j0", "b/j2"]), job_spec), max_size=4
    ),
    other_parent=st.sampled_from([None, None, "default", "nowhere"]),
)
def test_the_sums_kept_job_by_job_pass_exactly_the_snapshots_the_whole_check_passes(
    nodes: list[tuple[str, int]],
    jobs: list[tuple[str, tuple[str, list[tuple[str, str | None, int, PodPhase]], int | None]]],
    other_parent: str | None,
) -> None:
    """``ReferenceTotals`` (what the decider keeps over its snapshots' jobs) against the
    whole check, on snapshots with unknown nodes and queues, shared pod names, minimums
    above the pods, full nodes and queue cycles; built unchecked, as a copy would be."""
    built = [
        a_job(name)
        .in_queue(queue)
        .with_pods(*(a_pod(f"{name[-2:]}-{p}", g, node, phase) for p, node, g, phase in pods))
        .build()
        for name, (queue, pods, _) in jobs
    ]
    built = [
        job.model_copy(update={"min_available": minimum})
        for job, (_, (_, _, minimum)) in zip(built, jobs, strict=True)
    ]
    snap = Snapshot.model_construct(
        version=1,
        now=NOW,
        policy=Policy(),
        nodes=tuple(a_node(name, gpus) for name, gpus in nodes),
        queues=(a_queue("default"), a_queue("other", parent=other_parent)),
        jobs=tuple(built),
    )
    totals = ReferenceTotals()
    for job in snap.jobs:
        totals.add(JobReferences.of(job))
    whole = _first_reference_problem(snap)
    assert totals.consistent(snap) == (whole is None)
    fields = dict(snap)
    if whole is None:
        assert Snapshot.model_validate(fields, context={REFERENCE_TOTALS: totals}) == snap
    else:
        with pytest.raises(ValidationError, match=re.escape(whole)):
            Snapshot.model_validate(fields, context={REFERENCE_TOTALS: totals})


def test_a_job_counted_out_leaves_the_sums_as_if_it_had_never_been_counted() -> None:
    first = a_job("a/j0").with_pods(a_pod("w-0", 8, "n0"), a_pod("w-1", 8, "n1")).build()
    second = a_job("b/j0").with_pods(a_pod("w-0", 4, "n0")).build()  # shares a pod name
    snap = a_snapshot(nodes=[a_node("n0", 16), a_node("n1")], jobs=[first])
    totals = ReferenceTotals()
    totals.add(JobReferences.of(first))
    totals.add(JobReferences.of(second))
    assert not totals.consistent(snap)  # a duplicate name, and a job more than the snapshot's
    totals.add(JobReferences.of(second), -1)
    assert totals.consistent(snap)
