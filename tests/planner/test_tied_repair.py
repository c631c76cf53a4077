"""Repairs that tie on lost work: the fewest and lightest jobs that lose nothing bound them.

When the preemptor's own queue must give GPUs back (its capability, or its
guarantee while it reclaims) and the best plan so far already loses no more
work than the branch has, only jobs whose GPUs cost at most the work left to
lose can still help, typically the jobs that just checkpointed. The fewest of
them that cover the excess, and the lightest that many, bound the victims and
their weight (``Search._tied_repair``). The bound only cuts branches that hold
no better plan: the search with it returns the plan the search without it
returns, in no more steps, and the brute-force reference agrees with it.
"""

from __future__ import annotations

import pytest
from builders import HOUR, NOW, a_job, a_node, a_queue, a_snapshot

from gpuyield.agents.planner import search as search_module
from gpuyield.agents.planner.search import Search
from planner.searches import search_of, with_and_without
from planner.strategies import tied_repair_case
from planner.test_optimality import assert_same_plan


def test_a_queue_over_its_capability_gives_back_the_fewest_jobs_that_lose_nothing() -> None:
    """Production may hold 13 GPUs (its guarantee too, so that it may reclaim). Placing
    the preemptor's 8 on the research node takes it to 16, so it must give back 3 of
    its own (node b as a whole would lose the stale job's 10 hours). Both ways lose
    nothing, the jobs having just checkpointed: one 4-GPU job is one victim, the 1-
    and 2-GPU ones are two, however much lighter they weigh."""
    snapshot = a_snapshot(
        nodes=[a_node("a"), a_node("b")],
        queues=[a_queue("prod", guarantee=13, capability=13), a_queue("research")],
        jobs=[
            a_job("room").in_queue("research").running(pods=[("a", 8)], started_at=NOW - HOUR),
            a_job("fresh-big")
            .in_queue("prod")
            .priority(1000)
            .running(pods=[("b", 4)], started_at=NOW - HOUR, checkpointed_at=NOW),
            a_job("fresh-small-1")
            .in_queue("prod")
            .running(pods=[("b", 1)], started_at=NOW - HOUR, checkpointed_at=NOW),
            a_job("fresh-small-2")
            .in_queue("prod")
            .running(pods=[("b", 2)], started_at=NOW - HOUR, checkpointed_at=NOW),
            a_job("stale").in_queue("prod").running(pods=[("b", 1)], started_at=NOW - 10 * HOUR),
            a_job("pre").in_queue("prod").priority(5000).pending(pods=1, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert sorted(v.job for v in result.victims) == ["fresh-big", "room"]


@pytest.mark.parametrize("seed", range(400))
def test_the_plan_is_the_brute_force_optimum_when_repairs_tie(seed: int) -> None:
    """2-3 full nodes, the preemptor's queue over its bound, half its jobs losing nothing."""
    case = tied_repair_case(seed, small=True)
    assert_same_plan(case.snapshot, case.preemptor)


def compare_with_and_without(monkeypatch: pytest.MonkeyPatch, seeds: int) -> tuple[int, int]:
    """Plan each case with the tie bound (never given up: a plan stops computing it after
    32 tries that cut nothing) and without it: the same plan, in no more steps."""

    def switch_off(off: pytest.MonkeyPatch) -> None:
        off.setattr(Search, "_tie_budget", lambda self, state, lost: None)

    return with_and_without(monkeypatch, tied_repair_case, seeds, switch_off)


def test_the_search_with_the_tie_bound_returns_the_plan_it_returns_without_in_no_more_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 full clusters of 6-14 nodes, too big for the brute-force reference."""
    compared, shorter = compare_with_and_without(monkeypatch, 300)
    assert compared > 250
    assert shorter > compared // 20, "the bound should cut on some of these clusters"


def test_the_tie_bound_keeps_the_plan_when_a_pool_is_too_big_to_sort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past its pool limit (256 candidates in a plan; 2 here) a queue keeps the looser
    bound, and the victims and weight counted so far still hold."""
    monkeypatch.setattr(search_module, "_TIE_POOL_AT_MOST", 2)
    compared, shorter = compare_with_and_without(monkeypatch, 150)
    assert compared > 120
    assert shorter > 0


def test_a_search_stops_computing_a_tied_bound_that_has_cut_nothing_after_32_tries() -> None:
    """The bound costs a few microseconds a try; where the victims never decide (the
    best plan has many more), a repair-heavy search would pay it thousands of times."""
    gave_up = 0
    for seed in range(120):
        search = search_of(tied_repair_case(seed), 20_000)
        search.run()
        if search.tie_cuts == 0:
            assert search.tie_tries <= search_module._TIE_TRIES, f"tied_repair_case({seed})"
            gave_up += search.tie_tries == search_module._TIE_TRIES
    assert gave_up > 0, "some of these searches should reach the limit"
