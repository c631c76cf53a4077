"""A search over every candidate of a case, for the tests that read the search's internals."""

from __future__ import annotations

from gpuyield.agents.planner.search import Budget, Search
from gpuyield.agents.planner.session import PlanningSession
from planner.strategies import Case


def every_search(case: Case) -> Search:
    """Every candidate eligible, none protected: the bounds must hold over all of them."""
    session = PlanningSession.open(case.snapshot, case.preemptor)
    return Search(session, range(len(session.candidates)), frozenset(), Budget(10_000))
