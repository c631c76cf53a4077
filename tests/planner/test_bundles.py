"""What a job's pods on one node may lose without breaking its gang (``surplus_gpus``).

The bounds of the search cost a node's jobs by it: surplus pods at their loss
rate, anything more at the whole job.
"""

from __future__ import annotations

from builders import HOUR, NOW, a_job, a_node, a_pod, a_snapshot

from gpuyield.agents.planner.bundles import surplus_gpus
from gpuyield.agents.planner.session import CandidateFacts, PlanningSession
from gpuyield.schemas import JobState


def elastic_job(min_available: int | None) -> CandidateFacts:
    """Four pods, two on each node (8 and 2 GPUs on node a, 4 and 2 on node b)."""
    job = (
        a_job("elastic")
        .with_pods(
            a_pod("elastic-0", 8, "a"),
            a_pod("elastic-1", 2, "a"),
            a_pod("elastic-2", 4, "b"),
            a_pod("elastic-3", 2, "b"),
        )
        .min_available(min_available)
        .started(NOW - HOUR)
    )
    preemptor = a_job("pre").with_pods(a_pod("pre-0", 8)).in_state(JobState.PENDING)
    snapshot = a_snapshot(nodes=[a_node("a", 16), a_node("b", 8)], jobs=[job, preemptor])
    (candidate,) = PlanningSession.open(snapshot, "pre").candidates
    return candidate


def test_pods_the_surplus_covers_may_all_go() -> None:
    assert surplus_gpus(elastic_job(min_available=2), [8, 2]) is None


def test_beyond_the_surplus_only_the_largest_surplus_pods_may_go() -> None:
    assert surplus_gpus(elastic_job(min_available=3), [2, 8]) == 8


def test_a_rigid_gang_may_lose_nothing_on_one_of_its_nodes() -> None:
    assert surplus_gpus(elastic_job(min_available=4), [8, 2]) == 0


def test_a_job_whose_pods_are_all_here_may_lose_them_all() -> None:
    candidate = elastic_job(min_available=4)
    assert surplus_gpus(candidate, [8, 2, 4, 2]) is None
