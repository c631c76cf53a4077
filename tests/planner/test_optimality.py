"""The planner's plan is the brute-force reference's plan, on small clusters.

``reference.py`` enumerates every gang-respecting eviction set, keeps the
feasible and minimal ones (decision 9) and takes the least objective. On
clusters this small (at most 6 nodes, 7 other jobs) the planner's search must
complete (``search.exhausted`` false) and agree on feasibility, on every
criterion of the objective and on the tie-breaks down to the pod names.
"""

from __future__ import annotations

import math

import pytest
from builders import HOUR, NOW, a_job, a_node, a_policy, a_queue, a_snapshot
from hypothesis import given, settings

from gpuyield.agents.planner import plan
from gpuyield.schemas import Plan, Snapshot
from planner.reference import RefPlan, reference_plan
from planner.strategies import Case, any_cases, cases, examples, seeded_case


def disagreement(snapshot: Snapshot, preemptor: str | None, got: Plan, want: RefPlan) -> str:
    return (
        f"\nplanner and reference disagree (preemptor {preemptor!r})"
        f"\n--- reference:\n{want}"
        f"\n--- planner:\n{got.model_dump_json(indent=1, exclude={'candidates', 'explanation'})}"
        f"\n--- snapshot:\n{snapshot.model_dump_json()}"
    )


def assert_same_plan(snapshot: Snapshot, preemptor: str | None = None) -> Plan:
    got = plan(snapshot, preemptor)
    want = reference_plan(snapshot, preemptor)
    why = disagreement(snapshot, preemptor, got, want)
    assert not got.search.exhausted, "the search ran out of budget on a tiny cluster" + why
    assert got.preemptor == want.preemptor, why
    assert got.feasible == want.feasible, why
    if not want.feasible:
        return got
    assert got.objective.protected_victims == want.protected_victims, why
    assert math.isclose(
        got.objective.lost_gpu_seconds, want.lost_gpu_seconds, rel_tol=1e-9, abs_tol=1e-6
    ), why
    assert got.objective.victim_jobs == len(want.victim_jobs), why
    assert math.isclose(
        got.objective.victim_weight, want.victim_weight, rel_tol=1e-9, abs_tol=1e-9
    ), why
    assert tuple(sorted(v.job for v in got.victims)) == want.victim_jobs, why
    assert tuple(sorted(p for v in got.victims for p in v.pods)) == want.evicted_pods, why
    assert got.action == want.action, why
    return got


# --------------------------------------------------------------------------- random


@settings(max_examples=examples(250), deadline=None)
@given(any_cases())
def test_the_plan_is_the_brute_force_optimum_on_small_clusters(case: Case) -> None:
    assert_same_plan(case.snapshot, case.preemptor)


@settings(max_examples=examples(100), deadline=None)
@given(cases(reclaim=True))
def test_the_plan_is_the_brute_force_optimum_when_queues_reclaim(case: Case) -> None:
    assert_same_plan(case.snapshot, case.preemptor)


@settings(max_examples=examples(40), deadline=None)
@given(any_cases())
def test_the_chosen_preemptors_plan_is_the_brute_force_optimum(case: Case) -> None:
    assert_same_plan(case.snapshot, None)


@pytest.mark.parametrize("seed", range(300))
def test_the_plan_is_the_brute_force_optimum_on_seeded_clusters(seed: int) -> None:
    case = seeded_case(seed)
    assert_same_plan(case.snapshot, case.preemptor)


# --------------------------------------------------------------------------- by hand
#
# Small clusters whose best plan is worked out by hand; both the planner and the
# reference must find it, which also checks the reference itself.


def test_a_pod_that_just_checkpointed_is_not_evicted_for_a_smaller_name_list() -> None:
    """Decision 9: evicting b-0 too costs nothing and sorts ["b-0", "b-1"] before
    ["b-1"], but it frees nothing the preemptor can use (n1 is unschedulable)."""
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8, schedulable=False), a_node("n2", gpus=8)],
        jobs=[
            a_job("b")
            .priority(0)
            .running(pods=[("n1", 8), ("n2", 8)], checkpointed_at=NOW)
            .min_available(0),
            a_job("pre").priority(1000).pending(pods=1, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [(v.job, v.pods, v.whole_job) for v in result.victims] == [("b", ("b-1",), False)]
    assert result.lost_gpu_seconds == 0.0


def test_an_unprotected_plan_wins_even_when_it_loses_more_work() -> None:
    """Rule 3 / reading 4: a protected victim only when no plan without one exists."""
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8), a_node("n2", gpus=8)],
        queues=[
            a_queue("mine", guarantee=16),
            a_queue("theirs", guarantee=0),
        ],
        jobs=[
            a_job("heavy")
            .in_queue("theirs")
            .priority(5000)
            .running(pods=[("n1", 8)], started_at=NOW - HOUR, checkpointed_at=NOW - 1),
            a_job("light")
            .in_queue("theirs")
            .priority(0)
            .running(pods=[("n2", 8)], started_at=NOW - 2 * HOUR, checkpointed_at=NOW - HOUR),
            a_job("pre").in_queue("mine").priority(1000).pending(pods=1, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [v.job for v in result.victims] == ["light"]
    assert result.action == "reclaim"
    assert result.objective.protected_victims == 0


def test_a_protected_victim_is_taken_when_no_other_plan_exists() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8)],
        queues=[a_queue("mine", guarantee=8), a_queue("theirs")],
        jobs=[
            a_job("heavy").in_queue("theirs").priority(5000).running(pods=[("n1", 8)]),
            a_job("pre").in_queue("mine").priority(1000).pending(pods=1, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [(v.job, v.protected) for v in result.victims] == [("heavy", True)]


def test_equal_lost_work_prefers_fewer_victim_jobs() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8), a_node("n2", gpus=8)],
        jobs=[
            a_job("big").running(pods=[("n1", 8)], checkpointed_at=NOW - 100),
            a_job("s1").running(pods=[("n2", 4)], checkpointed_at=NOW - 100),
            a_job("s2").running(pods=[("n2", 4)], checkpointed_at=NOW - 100),
            a_job("pre").priority(1000).pending(pods=1, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [v.job for v in result.victims] == ["big"]


def test_equal_lost_work_and_count_prefers_the_lighter_victim() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8), a_node("n2", gpus=8)],
        jobs=[
            a_job("a-heavier").priority(50).running(pods=[("n1", 8)], checkpointed_at=NOW - 60),
            a_job("b-lighter").priority(10).running(pods=[("n2", 8)], checkpointed_at=NOW - 60),
            a_job("pre").priority(1000).pending(pods=1, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [v.job for v in result.victims] == ["b-lighter"]


def test_identical_pods_go_to_the_cheapest_nodes_and_are_listed_in_node_order() -> None:
    """The search takes the cheapest nodes first (n3, then n1); the plan names them as n1, n3."""
    snapshot = a_snapshot(
        nodes=[a_node(f"n{i}", gpus=8) for i in range(1, 5)],
        jobs=[
            a_job("on-n1").priority(10).running(pods=[("n1", 8)], checkpointed_at=NOW - 600),
            a_job("on-n2").priority(10).running(pods=[("n2", 8)], checkpointed_at=NOW - 3600),
            a_job("on-n3").priority(10).running(pods=[("n3", 8)], checkpointed_at=NOW - 60),
            a_job("on-n4").priority(10).running(pods=[("n4", 8)], checkpointed_at=NOW - 7200),
            a_job("pre").priority(1000).pending(pods=2, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert sorted(v.job for v in result.victims) == ["on-n1", "on-n3"]
    assert result.placement == {"pre-0": "n1", "pre-1": "n3"}


def test_a_full_tie_goes_to_the_first_names() -> None:
    """Reading 7: sorted victim job names first, then sorted evicted pod names."""
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8), a_node("n2", gpus=8)],
        jobs=[
            *(
                a_job(name)
                .priority(10)
                .running(pods=[(node, 4), (node, 4)], checkpointed_at=NOW - 60)
                .min_available(1)
                for name, node in (("z", "n1"), ("y", "n2"))
            ),
            a_job("pre").priority(1000).pending(pods=1, gpus=4),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [(v.job, v.pods) for v in result.victims] == [("y", ("y-0",))]


def test_a_gang_below_min_available_goes_whole_even_when_one_pod_would_do() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8), a_node("n2", gpus=8)],
        jobs=[
            a_job("gang")
            .priority(0)
            .running(pods=[("n1", 8), ("n2", 4)], checkpointed_at=NOW - 60)
            .min_available(2),
            a_job("pre").priority(1000).pending(pods=1, gpus=8),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [(v.job, v.pods, v.whole_job) for v in result.victims] == [
        ("gang", ("gang-0", "gang-1"), True)
    ]
    assert result.lost_gpu_seconds == 12 * 60.0


def test_one_protected_victim_beats_two_even_when_it_loses_more_work() -> None:
    """Reading 4: a plan with fewer protected victims always wins. Evicting all of
    'big' (protected) makes room; 'big-1' plus 'small' loses less but takes two."""
    snapshot = a_snapshot(
        nodes=[a_node("n0"), a_node("n1"), a_node("n2")],
        queues=[a_queue("mine", guarantee=24), a_queue("theirs")],
        jobs=[
            a_job("big")
            .in_queue("theirs")
            .priority(500)
            .running(
                pods=[("n1", 4), ("n0", 8)],
                started_at=NOW - 2 * HOUR,
                checkpointed_at=NOW - 2 * HOUR,
            )
            .min_available(1),
            a_job("small")
            .in_queue("theirs")
            .priority(500)
            .running(pods=[("n2", 2)], started_at=NOW - 2 * HOUR, checkpointed_at=NOW - 60),
            a_job("mate").in_queue("mine").running(pods=[("n1", 3), ("n2", 4)]).not_preemptable(),
            a_job("pre").in_queue("mine").priority(0).pending_gang(8, 2, 2),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [(v.job, v.pods, v.protected) for v in result.victims] == [
        ("big", ("big-0", "big-1"), True)
    ]


def test_a_gang_fits_in_the_free_gpus_of_two_nodes_of_one_rack() -> None:
    """Rule 5: 2 + 1 free GPUs hold three 1-GPU pods; nobody needs to go."""
    snapshot = a_snapshot(
        nodes=[a_node("n2", gpus=2, rack="r0"), a_node("n4", gpus=2, rack="r0")],
        jobs=[
            a_job("busy").priority(100).running(pods=[("n4", 1)], started_at=NOW - 599),
            a_job("pre").priority(0).pending(pods=3, gpus=1),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert result.feasible
    assert result.action == "none"
    assert sorted(result.placement.values()) == ["n2", "n2", "n4"]


def test_a_start_after_now_counts_as_no_time_at_all_so_no_cooldown_when_it_is_zero() -> None:
    """Decision 2: a negative interval counts as 0, and reading 2 asks 0 < 0."""
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8)],
        jobs=[
            a_job("skewed").priority(0).running(pods=[("n1", 8)], started_at=NOW + 30),
            a_job("pre").priority(1000).pending(pods=1, gpus=8),
        ],
        policy=a_policy(cooldown_s=0),
    )
    result = assert_same_plan(snapshot, "pre")
    assert [(v.job, v.lost_gpu_seconds) for v in result.victims] == [("skewed", 0.0)]


def test_a_protected_elastic_job_gives_up_the_cheapest_pods_across_nodes() -> None:
    """Lost work decides among plans with one protected victim: elastic-0 (n1) and
    elastic-2 (n3) free room for three 1-GPU pods with 3 GPUs lost, not 4."""
    snapshot = a_snapshot(
        nodes=[a_node("n1", gpus=8), a_node("n3", gpus=2)],
        queues=[a_queue("mine", guarantee=12), a_queue("theirs")],
        jobs=[
            a_job("blocker")
            .in_queue("mine")
            .running(pods=[("n1", 4), ("n3", 1)])
            .not_preemptable(),
            a_job("elastic")
            .in_queue("theirs")
            .priority(5000)
            .running(pods=[("n1", 2), ("n1", 2), ("n3", 1)], started_at=NOW - 100 * HOUR)
            .min_available(0),
            a_job("pre").in_queue("mine").priority(1000).pending(pods=3, gpus=1),
        ],
    )
    result = assert_same_plan(snapshot, "pre")
    assert [(v.job, v.pods) for v in result.victims] == [("elastic", ("elastic-0", "elastic-2"))]
    assert result.lost_gpu_seconds == 3 * 100 * HOUR
