"""A plan counted impossible before the search is one no search could find.

``impossible.cannot_fit`` proves by counting that no set of eligible victims
can place the preemptor's pods, and the planner then skips the search. A
wrong proof would turn a feasible preemption into "cannot fit", so every
claim is checked against the brute-force reference, which tries every
gang-respecting eviction set.
"""

from __future__ import annotations

from builders import NOW, a_job, a_node, a_queue, a_snapshot
from hypothesis import given, settings

from gpuyield.agents.planner import plan
from gpuyield.agents.planner.impossible import cannot_fit
from gpuyield.agents.planner.session import PlanningSession
from gpuyield.schemas import Snapshot
from planner.reference import reference_plan
from planner.searches import eligible_of
from planner.strategies import Case, any_cases, cases, examples, random_case, seeded_case


def counted(snapshot: Snapshot, preemptor: str | None) -> str | None:
    """What ``cannot_fit`` says over the eligible candidates, as the planner judges them."""
    session = PlanningSession.open(snapshot, preemptor)
    if not session.to_place:
        return None
    eligible, _ = eligible_of(session)
    return cannot_fit(session, eligible)


def assert_only_impossible_plans_are_counted_impossible(case: Case) -> bool:
    why = counted(case.snapshot, case.preemptor)
    if why is not None:
        want = reference_plan(case.snapshot, case.preemptor)
        assert not want.feasible, f"counted impossible ({why}) but the reference found a plan"
    return why is not None


@settings(max_examples=examples(200), deadline=None)
@given(any_cases())
def test_a_plan_counted_impossible_has_no_plan_at_all(case: Case) -> None:
    assert_only_impossible_plans_are_counted_impossible(case)


@settings(max_examples=examples(150), deadline=None)
@given(cases(reclaim=True))
def test_a_plan_counted_impossible_has_no_plan_at_all_when_queues_reclaim(case: Case) -> None:
    assert_only_impossible_plans_are_counted_impossible(case)


def test_the_counts_prove_some_of_a_sweep_and_never_wrongly() -> None:
    proved = sum(
        assert_only_impossible_plans_are_counted_impossible(make(seed))
        for make in (seeded_case, random_case)
        for seed in range(200)
    )
    assert proved > 0  # the sweep holds impossible preemptions the counts see


def over_guarantee() -> Snapshot:
    """'shared' holds 16 GPUs against a guarantee of 8: it may reclaim nothing, and its own
    job frees one node where its preemptor needs two."""
    return a_snapshot(
        nodes=[a_node(f"n{i}") for i in range(1, 5)],
        queues=[a_queue("shared", guarantee=8), a_queue("research", guarantee=0)],
        jobs=[
            a_job("own").in_queue("shared").priority(0).running(pods=[("n1", 8)]),
            a_job("own-2")
            .in_queue("shared")
            .priority(0)
            .running(pods=[("n2", 4), ("n3", 4)])
            .not_preemptable(),
            a_job("borrowed-a").in_queue("research").priority(0).running(pods=[("n3", 4)]),
            a_job("borrowed-b").in_queue("research").priority(0).running(pods=[("n4", 8)]),
            a_job("pre").in_queue("shared").priority(1000).pending(pods=2, gpus=8),
        ],
        now=NOW,
    )


def test_a_queue_above_its_guarantee_is_counted_out_of_reclaiming_before_any_search() -> None:
    result = plan(over_guarantee(), "pre")
    assert not result.feasible
    assert result.search is not None
    assert result.search.steps == 0
    reason = result.explanation[1]
    assert "the nodes hold 1 of the 2 pod(s) of 8 GPUs" in reason
    assert "no job of queue 'research' may be taken" in reason
    assert "queue 'shared' would use at least 24 GPUs" in reason  # 16 + 16 - 8
    assert "above its guarantee of 8" in reason
    assert result.explanation[2].startswith("not searched")
    assert not reference_plan(over_guarantee(), "pre").feasible


def test_a_capability_no_eviction_can_bring_back_is_counted_before_any_search() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        queues=[a_queue("prod", capability=8), a_queue("research")],
        jobs=[
            a_job("held").in_queue("prod").priority(0).running(pods=[("n1", 8)]).not_preemptable(),
            a_job("pre").in_queue("prod").priority(1000).pending(pods=1, gpus=8),
        ],
        now=NOW,
    )
    result = plan(snapshot, "pre")
    assert not result.feasible
    assert result.search is not None
    assert result.search.steps == 0
    assert "above its capability of 8" in result.explanation[1]


def test_a_preemption_some_eviction_can_serve_is_not_counted_impossible() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        queues=[a_queue("prod", guarantee=16), a_queue("research")],
        jobs=[
            a_job("borrowed").in_queue("research").priority(0).running(pods=[("n1", 8)]),
            a_job("pre").in_queue("prod").priority(1000).pending(pods=2, gpus=8),
            a_job("idle-node-filler").in_queue("research").priority(0).running(pods=[("n2", 8)]),
        ],
        now=NOW,
    )
    assert counted(snapshot, "pre") is None
    assert plan(snapshot, "pre").feasible
