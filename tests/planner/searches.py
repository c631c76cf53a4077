"""Searches and eligible sets as a plan makes them, for the tests that read the planner's
internals."""

from __future__ import annotations

from gpuyield.agents.planner import DEFAULT_RULES, _eligible, _judge
from gpuyield.agents.planner.search import Budget, Search
from gpuyield.agents.planner.session import PlanningSession
from planner.strategies import Case


def every_search(case: Case) -> Search:
    """Every candidate eligible, none protected: the bounds must hold over all of them."""
    session = PlanningSession.open(case.snapshot, case.preemptor)
    return Search(session, range(len(session.candidates)), frozenset(), Budget(10_000))


def eligible_of(session: PlanningSession) -> tuple[list[int], frozenset[int]]:
    """The eligible candidates and the protected ones among them, judged as a plan judges."""
    judged = {c.index: _judge(session, c, DEFAULT_RULES, every=False) for c in session.candidates}
    return _eligible(judged)
