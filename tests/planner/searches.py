"""Searches and eligible sets as a plan makes them, for the tests that read the planner's
internals."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from gpuyield.agents.planner import DEFAULT_RULES, plan
from gpuyield.agents.planner import search as search_module
from gpuyield.agents.planner.eligibility import judge_candidates
from gpuyield.agents.planner.objective import cost_of
from gpuyield.agents.planner.search import Budget, Changes, DeltaCost, Found, Search, State
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
    (both complete) and how many the bound shortened.

    Every bound is asked from the first step and never given up, in both runs: when a
    search builds one and when it gives one up depend on its steps and cuts so far, which
    the bound under test changes, and a bound asked in one run and not the other could
    make the shorter tree longer (packed cluster 166 did, when the pair bound gave up
    after 16 asks in one run only)."""
    monkeypatch.setattr(search_module, "_FIRST_AFTER", 0)
    for give_up in ("_FIRST_TRIES", "_TIE_TRIES", "_PAIR_TRIES"):
        monkeypatch.setattr(search_module, give_up, 10**9)
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


def cheapest_below(
    session: PlanningSession,
    eligible: list[int],
    protected: frozenset[int],
    state: State,
    i: int,
    allow: Callable[[str, int], bool],
) -> float | None:
    """The least lost work of any completion of ``state`` whose pod ``i`` goes to a node
    ``allow`` takes (by name and rank): the search without the bound, exhaustive (no
    cut on protected victims, no leaf reduced), None if it runs out of budget. Its
    nodes are ranked as the search that asked ranked them (protected ones last). Neither
    the first-node bound nor the pair bound is asked: they are what the callers check."""
    search = Search(session, eligible, protected, Budget(200_000))
    search.protected = frozenset()
    search._first_bound_pays = lambda gpus: False  # type: ignore[method-assign]
    search._last_pair_bound = lambda state, i: None  # type: ignore[method-assign]
    rank = search.tables[session.to_place[i].gpus].rank
    children = search._children
    start = replace(state, protected=0)

    def allowed(at: State, j: int) -> Iterator[tuple[Changes, str, int, DeltaCost]]:
        for child in children(at, j):
            if j != i or at is not start or allow(child[1], rank[child[2]]):
                yield child

    def leaf(at: State) -> None:
        cost = cost_of(session, {c: p for c, p in at.evicted.items() if p}, frozenset())
        if search.best is None or cost < search.best.cost:
            search.best = Found(cost, dict(at.evicted), dict(at.placement))

    search._children = allowed  # type: ignore[method-assign, assignment]
    search._leaf = leaf  # type: ignore[method-assign, assignment]
    search._place(start, i)
    if search.budget.exhausted:
        return None
    return math.inf if search.best is None else search.best.cost.lost_gpu_seconds
