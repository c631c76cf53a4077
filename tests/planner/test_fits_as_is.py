"""A preemptor that fits as the cluster stands is planned without judging any candidate.

The planner first tries the search's own first dive over no candidates
(``_fits_as_is``). When that dive places every pod, the plan is the one the
whole search returns, victims, placement, objective and steps alike; only its
wording differs: the header counts no eligible victims and an explained plan
lists no candidates. When it does not, the plan is made the whole way.
"""

from __future__ import annotations

from builders import HOUR, NOW, a_job, a_node, a_queue, a_snapshot
from hypothesis import given, settings

from gpuyield.agents.planner import DEFAULT_BUDGET, _fits_as_is, _search, plan
from gpuyield.agents.planner.search import Found
from gpuyield.agents.planner.session import PlanningSession
from gpuyield.schemas import Action, Snapshot
from planner.searches import eligible_of
from planner.strategies import Case, any_cases, examples, random_case

SOME = settings(max_examples=examples(300), deadline=None)
SWEEP = 1500


def whole_search(session: PlanningSession) -> tuple[Found | None, int]:
    """The search over every eligible candidate, as a plan makes it when it must."""
    eligible, protected = eligible_of(session)
    found, counter = _search(session, eligible, protected, DEFAULT_BUDGET)
    return found, counter.steps


@SOME
@given(any_cases())
def test_a_plan_found_without_candidates_is_the_whole_searchs_plan(case: Case) -> None:
    check_the_same_plan(case)


def test_a_plan_found_without_candidates_is_the_whole_searchs_plan_on_a_sweep() -> None:
    # About one case in a hundred has a dive that must back up: a fixed sweep holds some.
    for seed in range(SWEEP):
        check_the_same_plan(random_case(seed))


def check_the_same_plan(case: Case) -> None:
    session = PlanningSession.open(case.snapshot, case.preemptor)
    if not session.to_place:
        return
    as_is = _fits_as_is(session, DEFAULT_BUDGET)
    if as_is is None:
        return
    found, steps = whole_search(session)
    assert found is not None
    assert not found.evicted
    assert as_is.victims == ()
    assert as_is.placement == found.placement
    assert as_is.search.steps == steps
    assert as_is.lost_gpu_seconds == found.cost.lost_gpu_seconds == 0.0


@SOME
@given(any_cases())
def test_a_plan_made_the_whole_way_is_unchanged_where_nothing_fits_as_is(case: Case) -> None:
    session = PlanningSession.open(case.snapshot, case.preemptor)
    if not session.to_place or _fits_as_is(session, DEFAULT_BUDGET) is not None:
        return
    result = plan(case.snapshot, case.preemptor)
    found, steps = whole_search(session)
    assert "eligible victims" in result.explanation[0]
    if result.explanation[-1].startswith("not searched"):  # counted impossible first
        assert found is None
        assert not result.feasible
        return
    assert result.search.steps == steps
    assert result.placement == (found.placement if found is not None else {})


def cluster_with_a_free_node() -> Snapshot:
    return a_snapshot(
        nodes=[a_node("n1"), a_node("n2"), a_node("n3")],
        jobs=[
            a_job("research-a")
            .priority(10)
            .running(pods=[("n1", 8)], started_at=NOW - 5 * HOUR, checkpointed_at=NOW - HOUR),
            a_job("research-b")
            .priority(10)
            .running(pods=[("n2", 4)], started_at=NOW - 2 * HOUR, checkpointed_at=NOW - 600),
            a_job("ft-llama").priority(1000).pending(pods=1, gpus=8),
        ],
    )


def test_a_preemptor_that_fits_on_a_free_node_is_placed_there_without_victims() -> None:
    result = plan(cluster_with_a_free_node(), "ft-llama", explain=True)

    assert result.feasible
    assert result.action is Action.NONE
    assert result.victims == ()
    assert result.placement == {"ft-llama-0": "n3"}
    assert result.explanation == (
        "preemptor 'ft-llama' (queue 'default', weight 1000.0) needs 8 GPUs for 1 pod(s); "
        "they fit as the cluster stands: none of the 2 jobs holding GPUs was judged as a "
        "victim",
        "fits without evicting anyone",
        "search complete in 2 steps: the plan is optimal",
    )


def test_an_explained_plan_without_victims_lists_no_candidates() -> None:
    result = plan(cluster_with_a_free_node(), "ft-llama", explain=True)

    assert result.candidates == ()


def test_a_preemptor_that_would_break_its_queues_capability_is_planned_the_whole_way() -> None:
    # n3 is free, but placing the pod there takes 'prod' past its capability of 8:
    # only evicting its own research job (lighter) makes the plan valid.
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2"), a_node("n3")],
        queues=[a_queue("prod", capability=8), a_queue("other")],
        jobs=[
            a_job("prod-research")
            .in_queue("prod")
            .priority(10)
            .running(pods=[("n1", 8)], started_at=NOW - 5 * HOUR, checkpointed_at=NOW - HOUR),
            a_job("other-job")
            .in_queue("other")
            .priority(10)
            .running(pods=[("n2", 8)], started_at=NOW - 2 * HOUR, checkpointed_at=NOW - 600),
            a_job("ft-llama").in_queue("prod").priority(1000).pending(pods=1, gpus=8),
        ],
    )

    result = plan(snapshot, "ft-llama", explain=True)

    assert [v.job for v in result.victims] == ["prod-research"]
    assert "2 of 2 jobs holding GPUs are eligible victims" in result.explanation[0]
    assert {c.job for c in result.candidates} == {"prod-research", "other-job"}


def test_a_gang_that_needs_room_freed_is_planned_the_whole_way() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        jobs=[
            a_job("research-a")
            .priority(10)
            .running(pods=[("n1", 8)], started_at=NOW - 5 * HOUR, checkpointed_at=NOW - HOUR),
            a_job("ft-llama").priority(1000).pending(pods=2, gpus=8),
        ],
    )

    result = plan(snapshot, "ft-llama")

    assert [v.job for v in result.victims] == ["research-a"]
    assert "1 of 1 jobs holding GPUs are eligible victims" in result.explanation[0]
