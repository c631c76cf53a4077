"""Searches and eligible sets as a plan makes them, for the tests that read the planner's
internals."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuyield.agents.planner import DEFAULT_RULES, plan
from gpuyield.agents.planner.eligibility import judge_candidates
from gpuyield.agents.planner.search import Budget, Search
from gpuyield.agents.planner.session import PlanningSession
from gpuyield.schemas import Plan
from planner.strategies import Case


def every_search(case: Case) -> Search:
    """Every candidate eligible, none protected: the bounds must hold over all of them."""
    session = PlanningSession.open(case.snapshot, case.preemptor)
    return Search(session, range(len(session.candidates)), frozenset(), Budget(10_000))


def search_of(case: Case, budget: int) -> Search:
    """The search a plan runs for ``case`` over its eligible candidates, not yet run."""
    session = PlanningSession.open(case.snapshot, case.preemptor)
    eligible, protected = eligible_of(session)
    return Search(session, eligible, protected, Budget(budget))


def eligible_of(session: PlanningSession) -> tuple[list[int], frozenset[int]]:
    """The eligible candidates and the protected ones among them, judged as a plan judges."""
    judged = judge_candidates(session, DEFAULT_RULES, every=False)
    return judged.eligible, judged.protected


def the_plan(plan_: Plan) -> tuple[object, ...]:
    """What two plans must share to be the same plan: all but the search's statistics."""
    return (plan_.feasible, plan_.objective, plan_.victims, plan_.placement)


def with_and_without(
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[int], Case],
    seeds: int,
    switch_off: Callable[[pytest.MonkeyPatch], None],
) -> tuple[int, int]:
    """Plan each case as the planner stands and with ``switch_off`` applied (a bound taken
    away): the same plan, in no more steps. Returns how many searches were compared
    (both complete) and how many the bound shortened."""
    compared = shorter = 0
    for seed in range(seeds):
        case = make(seed)
        got = plan(case.snapshot, case.preemptor)
        with monkeypatch.context() as off:
            switch_off(off)
            want = plan(case.snapshot, case.preemptor)
        where = f"{make.__name__}({seed})"
        if got.search is not None and want.search is not None:
            if got.search.exhausted or want.search.exhausted:
                continue
            compared += 1
            assert got.search.steps <= want.search.steps, where
            shorter += got.search.steps < want.search.steps
        assert the_plan(got) == the_plan(want), where
    return compared, shorter
