"""A session opened on a snapshot whose builder kept the sums over its jobs is the session
opened by walking the jobs, and the plan is the same (``schemas.snapshot.kept_sums``)."""

from __future__ import annotations

from hypothesis import given, settings

from gpuyield.agents.planner import plan
from gpuyield.agents.planner.session import PlanningSession
from gpuyield.schemas import Snapshot
from gpuyield.schemas.snapshot import REFERENCE_TOTALS, JobReferences, ReferenceTotals, kept_sums
from planner.strategies import Case, any_cases, random_case


def with_kept_sums(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` rebuilt as the decider builds its own: checked from sums kept job by job."""
    totals = ReferenceTotals()
    for job in snapshot.jobs:
        totals.add(JobReferences.of(job))
    kept = Snapshot.model_validate(dict(snapshot), context={REFERENCE_TOTALS: totals})
    assert kept_sums(kept) is not None
    return kept


def same_session(case: Case) -> None:
    kept = with_kept_sums(case.snapshot)
    assert kept_sums(case.snapshot) is None
    one = PlanningSession.open(kept, case.preemptor)
    two = PlanningSession.open(case.snapshot, case.preemptor)
    assert (one.holders, one.usage, one.node_free, one.free_counts, one.to_place) == (
        two.holders,
        two.usage,
        two.node_free,
        two.free_counts,
        two.to_place,
    )
    assert one.holding == two.holding
    for job in case.snapshot.jobs:  # the sums' index finds the very job the scan does
        assert kept.job(job.name) is case.snapshot.job(job.name)
    assert kept.job("nobody/here") is None
    assert plan(kept, case.preemptor, explain=True) == plan(
        case.snapshot, case.preemptor, explain=True
    )


@settings(max_examples=150, deadline=None)
@given(any_cases())
def test_a_session_from_kept_sums_is_the_session_walked(case: Case) -> None:
    same_session(case)


def test_the_same_on_a_fixed_sweep_of_random_clusters() -> None:
    for seed in range(300):
        same_session(random_case(seed))
