"""Gang integrity, placement, capability, the plan's action and the choice of preemptor.

Contract: ``shared/spec/plan-contract.md``, "Who may be a victim" rules 4-5,
"Plan" (``action``, ``placement``, the default preemptor); readings 0001
decisions 1, 5, 6, 10.
"""

from __future__ import annotations

from builders import HOUR, NOW, JobBuilder, a_job, a_node, a_pod, a_policy, a_queue, a_snapshot

from gpuyield.agents.planner import plan
from gpuyield.agents.planner.session import could_place_on_free_gpus
from gpuyield.schemas import Plan, PodPhase, Snapshot


def victim_jobs(result: Plan) -> list[str]:
    return [v.job for v in result.victims]


def running(name: str, *pods: tuple[str, int], priority: float = 100) -> JobBuilder:
    return a_job(name).priority(priority).running(pods=list(pods), started_at=NOW - HOUR)


def urgent(pods: int = 1, gpus: int = 8, priority: float = 1000) -> JobBuilder:
    return a_job("urgent").priority(priority).pending(pods=pods, gpus=gpus)


# --------------------------------------------------------------------------- gang integrity


def test_a_gang_that_would_drop_below_min_available_is_evicted_whole() -> None:
    # 'gang' runs 4 GPUs on each node; freeing n1 alone would leave it 1 of 2 pods.
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        jobs=[
            running("gang", ("n1", 4), ("n2", 4)),
            running("filler-1", ("n1", 4), priority=5000),
            running("filler-2", ("n2", 4), priority=5000),
            urgent(gpus=4),
        ],
    )
    result = plan(snapshot)
    (victim,) = result.victims
    assert victim.job == "gang"
    assert victim.pods == ("gang-0", "gang-1")
    assert victim.whole_job
    assert victim.gpus == 8
    assert result.lost_gpu_seconds == 8 * HOUR


def test_surplus_pods_of_an_elastic_job_go_one_by_one() -> None:
    # 4 pods of 2 GPUs, min_available 2: two surplus pods free the 4 GPUs needed.
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[
            running("elastic", ("n1", 2), ("n1", 2), ("n1", 2), ("n1", 2)).min_available(2),
            urgent(gpus=4),
        ],
    )
    (victim,) = plan(snapshot).victims
    assert victim.job == "elastic"
    assert len(victim.pods) == 2
    assert not victim.whole_job
    assert victim.gpus == 4


def test_an_elastic_job_goes_whole_once_fewer_than_min_available_pods_would_be_left() -> None:
    # 6 GPUs means 3 of 4 pods, leaving 1 < min_available 2: the whole job goes.
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[
            running("elastic", ("n1", 2), ("n1", 2), ("n1", 2), ("n1", 2)).min_available(2),
            urgent(gpus=6),
        ],
    )
    (victim,) = plan(snapshot).victims
    assert victim.whole_job
    assert victim.pods == ("elastic-0", "elastic-1", "elastic-2", "elastic-3")


def test_evicting_a_whole_gang_frees_every_node_it_ran_on() -> None:
    # 'gang' (8 GPUs on n1 and n2, 100 s since checkpoint: 1600 GPU-s) frees room
    # for both preemptor pods; 'a' + 'b' (150 s each: 2400 GPU-s) would cost more.
    snapshot = a_snapshot(
        nodes=[a_node(f"n{i}") for i in range(1, 5)],
        jobs=[
            a_job("gang")
            .priority(1)
            .running(pods=[("n1", 8), ("n2", 8)], started_at=NOW - HOUR, checkpointed_at=NOW - 100),
            a_job("a")
            .priority(1)
            .running(pods=[("n3", 8)], started_at=NOW - HOUR, checkpointed_at=NOW - 150),
            a_job("b")
            .priority(1)
            .running(pods=[("n4", 8)], started_at=NOW - HOUR, checkpointed_at=NOW - 150),
            urgent(pods=2),
        ],
    )
    result = plan(snapshot)
    assert victim_jobs(result) == ["gang"]
    assert result.lost_gpu_seconds == 1600.0
    assert result.placement == {"urgent-0": "n1", "urgent-1": "n2"}


def test_a_gang_of_two_eight_gpu_pods_is_not_spread_over_fragments_of_free_gpus() -> None:
    # Four 8-GPU nodes with 1, 5, 4 and 6 GPUs free: 16 in all, but no pod of 8
    # fits on any node, and nothing may be evicted.
    snapshot = a_snapshot(
        nodes=[a_node(f"n{i}") for i in range(1, 5)],
        jobs=[
            running("keep-1", ("n1", 7)).not_preemptable(),
            running("keep-2", ("n2", 3)).not_preemptable(),
            running("keep-3", ("n3", 4)).not_preemptable(),
            running("keep-4", ("n4", 2)).not_preemptable(),
            urgent(pods=2, gpus=8),
        ],
    )
    result = plan(snapshot)
    assert not result.feasible
    assert result.victims == ()
    assert result.placement == {}
    assert result.action == "none"


def test_a_gang_over_fragments_evicts_enough_to_give_each_pod_a_whole_node() -> None:
    snapshot = a_snapshot(
        nodes=[a_node(f"n{i}") for i in range(1, 5)],
        jobs=[
            running("frag-1", ("n1", 7)),
            running("frag-2", ("n2", 3)),
            running("frag-3", ("n3", 4)),
            running("frag-4", ("n4", 2)),
            urgent(pods=2, gpus=8),
        ],
    )
    result = plan(snapshot)
    assert result.feasible
    assert sorted(result.placement) == ["urgent-0", "urgent-1"]
    assert len(set(result.placement.values())) == 2  # each 8-GPU pod on its own node
    # The two smallest holders are the cheapest to evict (lost work is GPUs x seconds).
    assert victim_jobs(result) == ["frag-2", "frag-4"]
    assert sorted(result.placement.values()) == ["n2", "n4"]


def test_a_pod_never_spans_nodes_even_with_every_node_empty() -> None:
    snapshot = a_snapshot(nodes=[a_node("n1"), a_node("n2")], jobs=[urgent(gpus=16)])
    result = plan(snapshot)
    assert not result.feasible
    assert result.placement == {}


def test_a_half_placed_pending_gang_holding_gpus_is_evicted_at_no_lost_work() -> None:
    # 0001 decision 1: 'stuck' holds n1 with one pod while its second pod waits,
    # and blocks the gang 'urgent', which needs n1 and n2. Evicting the placed
    # pod breaks the deadlock and loses nothing (the gang never started).
    stuck = (
        a_job("stuck")
        .priority(10)
        .pending(pods=2, gpus=8)
        .with_pods(a_pod("stuck-0", 8, "n1", PodPhase.PENDING), a_pod("stuck-1", 8))
    )
    snapshot = a_snapshot(nodes=[a_node("n1"), a_node("n2")], jobs=[stuck, urgent(pods=2)])
    result = plan(snapshot)
    assert result.preemptor == "urgent"
    assert result.feasible
    (victim,) = result.victims
    assert victim.job == "stuck"
    assert victim.pods == ("stuck-0",)
    assert victim.whole_job
    assert victim.lost_gpu_seconds == 0.0
    assert sorted(result.placement.values()) == ["n1", "n2"]


def test_finished_pods_hold_no_gpus_and_are_not_evicted() -> None:
    done = (
        a_job("done")
        .priority(10)
        .running(pods=[], started_at=NOW - HOUR)
        .with_pods(a_pod("done-0", 8, "n1", PodPhase.SUCCEEDED))
    )
    snapshot = a_snapshot(nodes=[a_node("n1")], jobs=[done, urgent()])
    result = plan(snapshot)
    assert result.feasible
    assert result.victims == ()
    assert result.placement == {"urgent-0": "n1"}


def test_the_preemptors_own_running_pods_stay_and_only_its_unplaced_pods_are_placed() -> None:
    # 0001 decision 5: a growing elastic job places only its pods with no node.
    growing = (
        a_job("growing")
        .priority(1000)
        .pending(pods=2, gpus=8)
        .with_pods(a_pod("growing-0", 8, "n1"), a_pod("growing-1", 8))
    )
    snapshot = a_snapshot(nodes=[a_node("n1"), a_node("n2")], jobs=[growing])
    result = plan(snapshot, "growing")
    assert result.victims == ()
    assert result.placement == {"growing-1": "n2"}


# --------------------------------------------------------------------------- placement


def test_the_preemptor_is_never_placed_on_an_unschedulable_node() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1", schedulable=False), a_node("n2")],
        jobs=[running("victim", ("n2", 8)), urgent()],
    )
    result = plan(snapshot)
    assert victim_jobs(result) == ["victim"]
    assert result.placement == {"urgent-0": "n2"}


def test_free_gpus_on_unschedulable_nodes_do_not_make_a_plan_feasible() -> None:
    snapshot = a_snapshot(nodes=[a_node("n1", schedulable=False)], jobs=[urgent()])
    result = plan(snapshot)
    assert not result.feasible
    assert result.placement == {}


def test_evicting_on_an_unschedulable_node_frees_nothing_for_the_preemptor() -> None:
    # 'cheap' (just checkpointed) sits on the cordoned node: taking it would not help.
    snapshot = a_snapshot(
        nodes=[a_node("cordoned", schedulable=False), a_node("open")],
        jobs=[
            a_job("cheap")
            .priority(10)
            .running(pods=[("cordoned", 8)], started_at=NOW - HOUR, checkpointed_at=NOW),
            running("dear", ("open", 8)),
            urgent(),
        ],
    )
    result = plan(snapshot)
    assert victim_jobs(result) == ["dear"]
    assert result.placement == {"urgent-0": "open"}


def test_a_feasible_plan_places_every_preemptor_pod_on_a_node_with_room() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2", 4), a_node("n3")],
        jobs=[running("victim", ("n3", 8)), urgent(pods=3, gpus=4)],
    )
    result = plan(snapshot)
    assert result.feasible
    assert result.victims == ()
    assert sorted(result.placement) == ["urgent-0", "urgent-1", "urgent-2"]
    per_node: dict[str, int] = {}
    for node in result.placement.values():
        per_node[node] = per_node.get(node, 0) + 4
    assert per_node["n1"] <= 8
    assert per_node.get("n2", 0) <= 4
    assert "n3" not in per_node


def test_a_plan_that_fits_without_evicting_evicts_nobody() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        jobs=[running("victim", ("n1", 8)), urgent()],
    )
    result = plan(snapshot)
    assert result.feasible
    assert result.victims == ()
    assert result.action == "none"
    assert result.lost_gpu_seconds == 0.0
    assert result.placement == {"urgent-0": "n2"}


# --------------------------------------------------------------------------- capability


def capped(*jobs: JobBuilder, capability: int = 8) -> Snapshot:
    return a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        queues=[a_queue("team", capability=capability)],
        jobs=[j.in_queue("team") for j in jobs],
    )


def test_a_preemptor_over_its_queues_capability_is_infeasible_and_evicts_nothing() -> None:
    # n2 is free, but 'team' already holds 8 of its 8 GPUs with a job that may not go.
    result = plan(capped(running("held", ("n1", 8)).not_preemptable(), urgent().in_queue("team")))
    assert not result.feasible
    assert result.victims == ()
    assert result.action == "none"
    assert result.placement == {}
    assert any("capability" in line for line in result.explanation)


def test_a_preemptor_over_its_queues_capability_preempts_within_its_queue_first() -> None:
    # 0001 decision 10: the node n2 is free, yet the queue's capability demands a victim.
    result = plan(capped(running("held", ("n1", 8)), urgent().in_queue("team")))
    assert result.feasible
    assert victim_jobs(result) == ["held"]
    assert result.action == "preempt"


def test_a_preemptor_that_brings_its_queue_exactly_to_capability_fits() -> None:
    result = plan(capped(running("held", ("n1", 8)), urgent().in_queue("team"), capability=16))
    assert result.feasible
    assert result.victims == ()
    assert result.placement == {"urgent-0": "n2"}


def test_an_infeasible_plan_says_why_in_its_explanation() -> None:
    snapshot = a_snapshot(nodes=[a_node("n1")], jobs=[urgent(gpus=16)])
    result = plan(snapshot)
    assert not result.feasible
    assert any("cannot fit" in line for line in result.explanation)


# --------------------------------------------------------------------------- action


def two_queues(*jobs: JobBuilder, mine_guarantee: int = 16) -> Snapshot:
    return a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        queues=[a_queue("mine", guarantee=mine_guarantee), a_queue("theirs")],
        jobs=jobs,
    )


def test_action_is_preempt_when_every_victim_is_in_the_preemptors_queue() -> None:
    snapshot = two_queues(
        running("own", ("n1", 8)).in_queue("mine"),
        running("other", ("n2", 8), priority=5000).in_queue("theirs").not_preemptable(),
        urgent().in_queue("mine"),
    )
    result = plan(snapshot)
    assert victim_jobs(result) == ["own"]
    assert result.action == "preempt"


def test_action_is_reclaim_when_every_victim_is_in_another_queue() -> None:
    snapshot = two_queues(
        running("own", ("n1", 8), priority=5000).in_queue("mine"),
        running("other", ("n2", 8)).in_queue("theirs"),
        urgent().in_queue("mine"),
    )
    result = plan(snapshot)
    assert victim_jobs(result) == ["other"]
    assert result.action == "reclaim"


def test_action_is_mixed_when_victims_come_from_both() -> None:
    snapshot = two_queues(
        running("own", ("n1", 8)).in_queue("mine"),
        running("other", ("n2", 8)).in_queue("theirs"),
        urgent(pods=2).in_queue("mine"),
    )
    result = plan(snapshot)
    assert victim_jobs(result) == ["other", "own"]
    assert result.action == "mixed"


def test_action_is_none_when_it_fits_without_evicting() -> None:
    result = plan(two_queues(urgent().in_queue("mine")))
    assert result.feasible
    assert result.action == "none"


def test_action_is_none_when_it_cannot_fit() -> None:
    result = plan(two_queues(urgent(gpus=16).in_queue("mine")))
    assert not result.feasible
    assert result.action == "none"


def test_victims_report_the_grace_deadline_from_the_policy() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[running("victim", ("n1", 8)), urgent()],
        policy=a_policy(grace_s=45),
    )
    (victim,) = plan(snapshot).victims
    assert victim.grace_s == 45


# --------------------------------------------------------------------------- preemptor


def pending(name: str, priority: float, submitted_at: float) -> JobBuilder:
    return a_job(name).priority(priority).pending(pods=1, gpus=8, submitted_at=submitted_at)


def test_without_preemptor_the_highest_priority_pending_job_is_served() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[
            pending("early-low", 100, NOW - 10 * HOUR),
            pending("late-high", 200, NOW - 1),
            pending("a-low", 100, NOW - 10 * HOUR),
        ],
    )
    assert plan(snapshot).preemptor == "late-high"


def test_equal_priorities_are_served_in_submission_order() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[pending("a-late", 100, NOW - 1), pending("z-early", 100, NOW - 2)],
    )
    assert plan(snapshot).preemptor == "z-early"


def test_equal_priority_and_submission_are_served_in_name_order() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[pending("bravo", 100, NOW - 1), pending("alpha", 100, NOW - 1)],
    )
    assert plan(snapshot).preemptor == "alpha"


def test_running_jobs_are_never_chosen_as_the_default_preemptor() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        jobs=[running("big", ("n1", 8), priority=9000), pending("small", 1, NOW - 1)],
    )
    assert plan(snapshot).preemptor == "small"


def test_an_explicit_preemptor_is_served_even_if_another_pending_job_ranks_higher() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[pending("high", 900, NOW - 1), pending("low", 1, NOW - 1)],
    )
    result = plan(snapshot, "low")
    assert result.preemptor == "low"
    assert result.placement == {"low-0": "n1"}


def test_with_no_pending_job_the_plan_has_no_preemptor_and_does_nothing() -> None:
    snapshot = a_snapshot(nodes=[a_node("n1")], jobs=[running("steady", ("n1", 8))])
    result = plan(snapshot)
    assert result.preemptor is None
    assert result.action == "none"
    assert result.feasible
    assert result.victims == ()
    assert result.placement == {}
    assert result.explanation  # it says so


# --------------------------------------------------------------------------- the free-GPU pre-check


def test_free_gpus_here_and_there_cannot_hold_a_gang_of_whole_node_pods() -> None:
    """32 GPUs free in all and two whole nodes free, but three 8-GPU pods wait: the sum
    and the largest pod pass, the slots do not, and no plan without victims exists."""
    snapshot = a_snapshot(
        nodes=[a_node(f"n{i}") for i in range(6)],
        jobs=[
            running("half-2", ("n2", 4)),
            running("half-3", ("n3", 4)),
            running("half-4", ("n4", 4)),
            running("half-5", ("n5", 4)),
            urgent(pods=3, gpus=8),
        ],
    )
    assert not could_place_on_free_gpus(snapshot, "urgent")
    result = plan(snapshot, "urgent")
    assert not (result.feasible and not result.victims)


def test_two_whole_nodes_free_hold_a_gang_of_two_whole_node_pods() -> None:
    snapshot = a_snapshot(
        nodes=[a_node(f"n{i}") for i in range(4)],
        jobs=[running("half-2", ("n2", 4)), running("half-3", ("n3", 4)), urgent(pods=2, gpus=8)],
    )
    assert could_place_on_free_gpus(snapshot, "urgent")
    result = plan(snapshot, "urgent")
    assert result.feasible
    assert not result.victims
