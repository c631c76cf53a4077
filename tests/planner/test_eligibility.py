"""Who may be a victim: rules 1-3 of the contract, the effective weight, and the queue tree.

Contract: ``shared/spec/plan-contract.md`` ("Effective weight", "Who may be a
victim" 1-3, precise readings 1-3, 5, 6). Readings: ``docs/design/0001``.
Each test builds the smallest cluster where the rule alone decides, so it
fails if that rule were dropped from the planner.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pytest
from builders import HOUR, NOW, JobBuilder, a_job, a_node, a_pod, a_policy, a_queue, a_snapshot

from gpuyield.agents.planner import DEFAULT_RULES, effective_weight, plan
from gpuyield.agents.planner.eligibility import judge_candidates
from gpuyield.agents.planner.rules import Verdict
from gpuyield.agents.planner.session import CandidateFacts, PlanningSession
from gpuyield.schemas import JobState, Plan, Policy, Queue, Snapshot

# --------------------------------------------------------------------------- helpers


def victim_jobs(result: Plan) -> list[str]:
    return [v.job for v in result.victims]


def outcome_of(result: Plan, job: str) -> str:
    (cand,) = (c for c in result.candidates if c.job == job)
    return cand.outcome


def one_full_node(
    victim: JobBuilder, *, preemptor_priority: float = 1000.0, policy: Policy | None = None
) -> Snapshot:
    """Node n1 (8 GPUs) is fully held by ``victim``; ``urgent`` (same queue) wants 8 GPUs."""
    return a_snapshot(
        nodes=[a_node("n1", 8)],
        jobs=[
            victim.running(
                pods=[("n1", 8)], started_at=victim.started_at, checkpointed_at=victim.checkpoint_at
            ),
            a_job("urgent").priority(preemptor_priority).pending(pods=1, gpus=8),
        ],
        policy=policy,
    )


def cheap() -> JobBuilder:
    """A same-queue job of low weight that started an hour ago: a victim by default."""
    return a_job("victim").priority(100).started(NOW - HOUR)


def assert_is_victim(snapshot: Snapshot) -> None:
    result = plan(snapshot)
    assert result.feasible
    assert victim_jobs(result) == ["victim"]


def assert_is_not_victim(snapshot: Snapshot) -> None:
    """Ruled out by a rule on the candidate itself: the plan cannot fit the preemptor."""
    result = plan(snapshot, explain=True)
    assert victim_jobs(result) == []
    assert not result.feasible
    assert outcome_of(result, "victim") == "ineligible"


def assert_no_plan_takes_it(snapshot: Snapshot) -> None:
    """Ruled out by the state after the plan (guarantees): nothing is evicted."""
    result = plan(snapshot)
    assert victim_jobs(result) == []
    assert not result.feasible
    assert result.action == "none"


def test_the_baseline_victim_is_taken() -> None:
    """Every negative test below differs from this one in one fact only."""
    assert_is_victim(one_full_node(cheap()))


# --------------------------------------------------------------------------- rule 1


def test_a_job_marked_not_preemptable_is_never_a_victim() -> None:
    assert_is_not_victim(one_full_node(cheap().not_preemptable()))


def test_a_not_preemptable_job_is_passed_over_even_when_it_would_be_the_cheapest() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        jobs=[
            a_job("fresh-checkpoint")
            .priority(100)
            .not_preemptable()
            .running(pods=[("n1", 8)], started_at=NOW - HOUR, checkpointed_at=NOW - 1),
            a_job("no-checkpoint").priority(100).running(pods=[("n2", 8)], started_at=NOW - HOUR),
            a_job("urgent").priority(1000).pending(pods=1, gpus=8),
        ],
    )
    assert victim_jobs(plan(snapshot)) == ["no-checkpoint"]


def test_a_job_that_started_less_than_cooldown_ago_is_not_a_victim() -> None:
    assert_is_not_victim(one_full_node(cheap().started(NOW - 599)))


def test_a_job_that_started_exactly_cooldown_ago_is_past_its_cooldown() -> None:
    # Reading 2: in cooldown iff now - started_at < cooldown_s; 600 < 600 is false.
    assert_is_victim(one_full_node(cheap().started(NOW - 600)))


def test_the_cooldown_comes_from_the_policy_when_given() -> None:
    started_20_min_ago = cheap().started(NOW - 1200)
    assert_is_victim(one_full_node(started_20_min_ago))
    assert_is_not_victim(one_full_node(started_20_min_ago, policy=a_policy(cooldown_s=1201)))


def test_a_zero_cooldown_lets_a_job_that_started_this_instant_be_a_victim() -> None:
    assert_is_victim(one_full_node(cheap().started(NOW), policy=a_policy(cooldown_s=0)))


def test_a_job_that_never_started_has_no_cooldown() -> None:
    # 0001 decision 2: started_at null is not in cooldown.
    never_started = cheap().running(pods=[("n1", 8)], started_at=None)
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[never_started, a_job("urgent").priority(1000).pending(pods=1, gpus=8)],
    )
    assert_is_victim(snapshot)


def test_a_job_evicted_max_evictions_times_inside_the_window_is_not_a_victim() -> None:
    assert_is_not_victim(one_full_node(cheap().evicted_at(NOW - 10, NOW - 20, NOW - 30)))


def test_a_job_evicted_fewer_than_max_evictions_times_is_still_a_victim() -> None:
    assert_is_victim(one_full_node(cheap().evicted_at(NOW - 10, NOW - 20)))


def test_an_eviction_exactly_window_seconds_ago_still_counts() -> None:
    # Reading 3: counted when 0 <= now - e <= eviction_window_s.
    at_edge = cheap().evicted_at(NOW - 10, NOW - 20, NOW - 86_400)
    assert_is_not_victim(one_full_node(at_edge))


def test_an_eviction_just_outside_the_window_does_not_count() -> None:
    just_out = cheap().evicted_at(NOW - 10, NOW - 20, NOW - 86_401)
    assert_is_victim(one_full_node(just_out))


def test_an_eviction_at_now_counts() -> None:
    assert_is_not_victim(one_full_node(cheap().evicted_at(NOW, NOW - 10, NOW - 20)))


def test_evictions_in_the_future_are_ignored() -> None:
    skewed = cheap().evicted_at(NOW - 10, NOW - 20, NOW + 5)
    assert_is_victim(one_full_node(skewed))


def test_the_eviction_limit_and_window_come_from_the_policy_when_given() -> None:
    once_an_hour_ago = cheap().evicted_at(NOW - HOUR)
    assert_is_not_victim(one_full_node(once_an_hour_ago, policy=a_policy(max_evictions=1)))
    assert_is_victim(
        one_full_node(once_an_hour_ago, policy=a_policy(max_evictions=1, eviction_window_s=3599))
    )


# --------------------------------------------------------------------------- rule 2

NO_BONUS = {"alpha": 0.0, "beta": 0.0}
"""With alpha = beta = 0, W_eff is the priority: weights can be made exactly equal."""


def test_a_same_queue_job_of_strictly_lower_weight_is_a_victim() -> None:
    policy = a_policy(**NO_BONUS)
    assert_is_victim(one_full_node(cheap().priority(999), policy=policy))


def test_a_same_queue_job_of_equal_weight_is_not_a_victim() -> None:
    policy = a_policy(**NO_BONUS)
    assert_is_not_victim(one_full_node(cheap().priority(1000), policy=policy))


def test_a_same_queue_job_of_higher_weight_is_not_a_victim() -> None:
    policy = a_policy(**NO_BONUS)
    assert_is_not_victim(one_full_node(cheap().priority(1001), policy=policy))


def test_run_time_can_lift_a_lower_priority_job_out_of_reach() -> None:
    # 100 + 150 * ln(1 + 24) = 582.8 >= 500: the priority alone would make it a victim.
    ran_a_day = cheap().priority(100).started(NOW - 24 * HOUR)
    assert_is_not_victim(one_full_node(ran_a_day, preemptor_priority=500))
    assert_is_victim(one_full_node(cheap().priority(100), preemptor_priority=500))


def test_progress_can_lift_a_lower_priority_job_out_of_reach() -> None:
    # 100 + 150 ln 2 + 800 * 0.9^2 = 851.97 >= 800; at progress 0 it is 203.97.
    assert_is_not_victim(one_full_node(cheap().progress(0.9), preemptor_priority=800))
    assert_is_victim(one_full_node(cheap().progress(0.0), preemptor_priority=800))


# --------------------------------------------------------------------------- W_eff


def test_effective_weight_is_priority_plus_alpha_log_run_hours_plus_beta_progress_squared() -> None:
    job = (
        a_job("j")
        .priority(1000)
        .running(pods=[("n1", 8)], started_at=NOW - 3 * HOUR)
        .progress(0.5)
        .build()
    )
    expected = 1000 + 150 * math.log(4) + 800 * 0.25
    assert effective_weight(job, NOW, Policy()) == pytest.approx(expected, rel=1e-12)


def test_effective_weight_uses_the_policys_alpha_and_beta() -> None:
    job = (
        a_job("j")
        .priority(10)
        .running(pods=[("n1", 8)], started_at=NOW - 1 * HOUR)
        .progress(0.5)
        .build()
    )
    expected = 10 + 2 * math.log(2) + 40 * 0.25
    assert effective_weight(job, NOW, a_policy(alpha=2, beta=40)) == pytest.approx(
        expected, rel=1e-12
    )


def test_a_job_that_is_not_running_has_no_run_time_bonus() -> None:
    # 0001 decision 3: T_run_hours is 0 unless the job is Running.
    job = (
        a_job("j")
        .priority(10)
        .running(pods=[("n1", 8)], started_at=NOW - 5 * HOUR)
        .progress(0.5)
        .in_state(JobState.SUSPENDED)
        .build()
    )
    assert effective_weight(job, NOW, Policy()) == pytest.approx(10 + 800 * 0.25, rel=1e-12)


def test_the_plan_reports_each_candidates_effective_weight() -> None:
    result = plan(one_full_node(cheap().priority(100).progress(0.5)), explain=True)
    (cand,) = result.candidates
    assert cand.w_eff == pytest.approx(100 + 150 * math.log(2) + 800 * 0.25, rel=1e-12)
    assert result.victims[0].w_eff == pytest.approx(cand.w_eff, rel=1e-12)


def test_a_pending_preemptor_weighs_its_priority_not_its_progress() -> None:
    # With its W_eff (100 + 800 * 0.81 = 748) it would outweigh the victim's 500.
    policy = a_policy(alpha=0.0)
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[
            a_job("victim").priority(500).running(pods=[("n1", 8)], started_at=NOW - HOUR),
            a_job("urgent").priority(100).pending(pods=1, gpus=8).progress(0.9),
        ],
        policy=policy,
    )
    assert_is_not_victim(snapshot)


def test_a_pending_preemptor_of_higher_priority_than_the_victims_weight_takes_it() -> None:
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[
            a_job("victim").priority(500).running(pods=[("n1", 8)], started_at=NOW - HOUR),
            a_job("urgent").priority(501).pending(pods=1, gpus=8).progress(0.0),
        ],
        policy=a_policy(alpha=0.0),
    )
    assert_is_victim(snapshot)


def test_a_running_preemptor_that_grows_weighs_its_effective_weight() -> None:
    # 0001 decision 4: 'grow' (priority 500, running 24 h) weighs
    # 500 + 150 ln 25 = 982.8, above the victim's 800 + 150 ln 2 = 904.
    grow = (
        a_job("grow")
        .priority(500)
        .min_available(1)
        .running(pods=[("n1", 8)], started_at=NOW - 24 * HOUR)
        .with_pods(a_pod("grow-0", 8, "n1"), a_pod("grow-1", 8))
    )
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        jobs=[
            a_job("victim").priority(800).running(pods=[("n2", 8)], started_at=NOW - HOUR),
            grow,
        ],
    )
    result = plan(snapshot, "grow")
    assert victim_jobs(result) == ["victim"]
    assert result.placement == {"grow-1": "n2"}


# --------------------------------------------------------------------------- rule 3


def reclaim_case(
    *,
    mine_guarantee: int = 8,
    theirs_guarantee: int = 0,
    theirs_reclaimable: bool = True,
    victim: JobBuilder | None = None,
    extra_nodes: tuple[str, ...] = (),
    extra_jobs: tuple[JobBuilder, ...] = (),
) -> Snapshot:
    """``urgent`` in queue ``mine`` wants 8 GPUs; ``victim`` in queue ``theirs`` holds n1."""
    victim = victim or cheap()
    return a_snapshot(
        nodes=[a_node("n1"), *(a_node(n) for n in extra_nodes)],
        queues=[
            a_queue("mine", guarantee=mine_guarantee),
            a_queue("theirs", guarantee=theirs_guarantee, reclaimable=theirs_reclaimable),
        ],
        jobs=[
            victim.in_queue("theirs").running(
                pods=[("n1", 8)], started_at=victim.started_at, checkpointed_at=victim.checkpoint_at
            ),
            a_job("urgent").in_queue("mine").priority(1000).pending(pods=1, gpus=8),
            *extra_jobs,
        ],
    )


def test_a_job_of_a_reclaimable_queue_over_its_guarantee_is_reclaimed() -> None:
    result = plan(reclaim_case())
    assert victim_jobs(result) == ["victim"]
    assert result.action == "reclaim"


def test_nothing_is_reclaimed_from_a_queue_that_is_not_reclaimable() -> None:
    assert_is_not_victim(reclaim_case(theirs_reclaimable=False))


def test_nothing_is_reclaimed_from_a_queue_using_exactly_its_guarantee() -> None:
    assert_is_not_victim(reclaim_case(theirs_guarantee=8))


def test_reclaim_never_takes_a_queue_below_its_guarantee() -> None:
    # 'theirs' uses 8 > 4, but evicting its only job would leave it at 0 < 4.
    assert_no_plan_takes_it(reclaim_case(theirs_guarantee=4))


def test_reclaim_picks_a_costlier_victim_to_keep_the_queue_at_its_guarantee() -> None:
    # 'theirs' (guarantee 8) holds 8 on n1 and 4 on n2. Evicting the cheap 8-GPU
    # job would leave it at 4; evicting the 4-GPU job leaves it at exactly 8.
    snapshot = reclaim_case(
        theirs_guarantee=8,
        victim=cheap().checkpointed(NOW - 1),
        extra_nodes=("n2",),
        extra_jobs=(
            a_job("costly")
            .in_queue("theirs")
            .priority(100)
            .running(pods=[("n2", 4)], started_at=NOW - 10 * HOUR),
        ),
    )
    result = plan(snapshot)
    assert victim_jobs(result) == ["costly"]
    assert result.placement == {"urgent-0": "n2"}


def test_a_queue_over_its_guarantee_with_the_preemptor_placed_may_not_reclaim() -> None:
    assert_no_plan_takes_it(reclaim_case(mine_guarantee=4))


def test_a_queue_already_at_its_guarantee_may_not_reclaim_for_more() -> None:
    # 'mine' holds 8 of its 8 guaranteed GPUs on n2 (untouchable); placing 8 more
    # would take it to 16.
    snapshot = reclaim_case(
        extra_nodes=("n2",),
        extra_jobs=(
            a_job("mine-running")
            .in_queue("mine")
            .priority(5000)
            .not_preemptable()
            .running(pods=[("n2", 8)], started_at=NOW - HOUR),
        ),
    )
    assert_no_plan_takes_it(snapshot)


def test_own_queue_victims_count_as_gone_when_checking_the_guarantee_for_reclaim() -> None:
    # Reading 5: 'mine' (guarantee 16) holds 8 on n1 via 'own-cheap' and wants 16
    # more on n1 + n2. Before the plan it would be 24 > 16, after it is 16 <= 16.
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        queues=[a_queue("mine", guarantee=16), a_queue("theirs")],
        jobs=[
            a_job("own-cheap")
            .in_queue("mine")
            .priority(100)
            .running(pods=[("n1", 8)], started_at=NOW - HOUR),
            a_job("other")
            .in_queue("theirs")
            .priority(100)
            .running(pods=[("n2", 8)], started_at=NOW - HOUR),
            a_job("urgent").in_queue("mine").priority(1000).pending(pods=2, gpus=8),
        ],
    )
    result = plan(snapshot)
    assert result.feasible
    assert victim_jobs(result) == ["other", "own-cheap"]
    assert result.action == "mixed"


def test_a_reclaim_also_preempts_within_the_own_queue_to_stay_within_its_guarantee() -> None:
    # Room is only on n1 (n2 keeps 4 pinned GPUs), so 'other' must be reclaimed.
    # 'mine' would then use 4 + 8 = 12 > 8: 'own' (on n2, freeing no room the
    # preemptor can use) must go too, for the guarantee alone (reading 5).
    snapshot = a_snapshot(
        nodes=[a_node("n1"), a_node("n2")],
        queues=[
            a_queue("mine", guarantee=8),
            a_queue("theirs"),
            a_queue("pinned", reclaimable=False),
        ],
        jobs=[
            running_in("theirs", "other", "n1"),
            a_job("own")
            .in_queue("mine")
            .priority(100)
            .running(pods=[("n2", 4)], started_at=NOW - HOUR),
            a_job("pin")
            .in_queue("pinned")
            .priority(100)
            .running(pods=[("n2", 4)], started_at=NOW - HOUR),
            urgent_in("mine"),
        ],
    )
    result = plan(snapshot)
    assert result.feasible
    assert victim_jobs(result) == ["other", "own"]
    assert result.action == "mixed"
    assert result.placement == {"urgent-0": "n1"}


def test_a_reclaim_victim_of_higher_weight_is_marked_protected_and_taken_as_last_resort() -> None:
    result = plan(reclaim_case(victim=cheap().priority(5000)))
    assert victim_jobs(result) == ["victim"]
    assert result.victims[0].protected
    assert result.objective.protected_victims == 1


def test_a_reclaim_victim_of_equal_weight_is_protected() -> None:
    result = plan(reclaim_case(victim=cheap().priority(1000).started(None)))
    # It never started: W_eff = priority = 1000, equal to the preemptor's.
    assert result.victims[0].protected


def test_a_reclaim_victim_of_lower_weight_is_not_protected() -> None:
    result = plan(reclaim_case())
    assert not result.victims[0].protected
    assert result.objective.protected_victims == 0


def test_a_protected_victim_is_spared_when_a_plan_without_it_exists() -> None:
    # 'precious' loses nothing (checkpointed this instant) but outweighs the preemptor.
    snapshot = reclaim_case(
        victim=a_job("precious").priority(5000).started(NOW - HOUR).checkpointed(NOW),
        extra_nodes=("n2",),
        extra_jobs=(
            a_job("plain")
            .in_queue("theirs")
            .priority(10)
            .running(pods=[("n2", 8)], started_at=NOW - 10 * HOUR),
        ),
    )
    result = plan(snapshot, explain=True)
    assert victim_jobs(result) == ["plain"]
    assert outcome_of(result, "precious") == "spared"


def test_same_queue_jobs_of_higher_weight_are_never_protected_victims() -> None:
    # Protection is a reclaim notion; within the queue rule 2 refuses outright.
    result = plan(one_full_node(cheap().priority(5000)), explain=True)
    (cand,) = result.candidates
    assert not cand.eligible
    assert not cand.protected


# --------------------------------------------------------------------------- hierarchy


def tree_snapshot(
    queues: list[Queue], jobs: list[JobBuilder], nodes: tuple[str, ...] = ("n1", "n2")
) -> Snapshot:
    return a_snapshot(nodes=[a_node(n) for n in nodes], queues=queues, jobs=jobs)


def running_in(queue: str, name: str, node: str, priority: float = 100) -> JobBuilder:
    return (
        a_job(name)
        .in_queue(queue)
        .priority(priority)
        .running(pods=[(node, 8)], started_at=NOW - HOUR)
    )


def urgent_in(queue: str) -> JobBuilder:
    return a_job("urgent").in_queue(queue).priority(1000).pending(pods=1, gpus=8)


def test_siblings_reclaim_from_each_other_whatever_their_parent_uses() -> None:
    # LCA is 'org'; 'org' is on neither branch below it, so its large guarantee
    # (which it does not use) does not matter.
    snapshot = tree_snapshot(
        queues=[
            a_queue("org", guarantee=100),
            a_queue("team-a", parent="org", guarantee=8),
            a_queue("team-b", parent="org"),
        ],
        jobs=[running_in("team-b", "victim", "n1"), urgent_in("team-a")],
        nodes=("n1",),
    )
    assert_is_victim(snapshot)


def test_every_queue_on_the_victims_branch_below_the_lca_must_be_reclaimable() -> None:
    queues = [
        a_queue("mine", guarantee=8),
        a_queue("dept", reclaimable=False),
        a_queue("team", parent="dept"),
    ]
    jobs = [running_in("team", "victim", "n1"), urgent_in("mine")]
    assert_is_not_victim(tree_snapshot(queues, jobs, nodes=("n1",)))


def test_a_child_is_not_reclaimed_from_while_its_parent_is_at_its_guarantee() -> None:
    # 'team' (no guarantee) holds 16, over its own guarantee; but its parent
    # 'dept' uses exactly its 16 (through 'team'), so neither job may go.
    queues = [
        a_queue("mine", guarantee=8),
        a_queue("dept", guarantee=16),
        a_queue("team", parent="dept"),
    ]
    jobs = [
        running_in("team", "victim", "n1"),
        running_in("team", "victim-2", "n2"),
        urgent_in("mine"),
    ]
    result = plan(tree_snapshot(queues, jobs))
    assert not result.feasible
    assert victim_jobs(result) == []


def test_a_child_may_be_reclaimed_down_to_its_parents_guarantee() -> None:
    # 'dept' holds nothing itself: it is over its guarantee of 8 only because
    # its child's 16 GPUs count toward it (reading 6).
    queues = [
        a_queue("mine", guarantee=8),
        a_queue("dept", guarantee=8),
        a_queue("team", parent="dept"),
    ]
    jobs = [
        running_in("team", "victim", "n1"),
        running_in("team", "victim-2", "n2"),
        urgent_in("mine"),
    ]
    result = plan(tree_snapshot(queues, jobs))
    assert result.feasible
    assert len(result.victims) == 1


def test_reclaiming_from_a_child_stops_at_its_parents_guarantee() -> None:
    # 'team' has no guarantee, but its parent 'dept' keeps 8: of team's 16 GPUs
    # only 8 may go, so a preemptor needing 16 cannot be served.
    queues = [
        a_queue("mine", guarantee=16),
        a_queue("dept", guarantee=8),
        a_queue("team", parent="dept"),
    ]
    jobs = [
        running_in("team", "victim", "n1"),
        running_in("team", "victim-2", "n2"),
        a_job("urgent").in_queue("mine").priority(1000).pending(pods=2, gpus=8),
    ]
    assert_no_plan_takes_it(tree_snapshot(queues, jobs))


def test_the_preemptors_parent_must_stay_within_its_guarantee_to_reclaim() -> None:
    # 'mine' stays at 8 <= 8, but its parent 'dept' would reach 16 > 8
    # because the sibling 'peer' already holds 8 (not preemptable).
    def snapshot(dept_guarantee: int) -> Snapshot:
        return tree_snapshot(
            queues=[
                a_queue("dept", guarantee=dept_guarantee),
                a_queue("mine", parent="dept", guarantee=8),
                a_queue("peer", parent="dept", guarantee=8),
                a_queue("other"),
            ],
            jobs=[
                running_in("peer", "peer-job", "n2").not_preemptable(),
                running_in("other", "victim", "n1"),
                urgent_in("mine"),
            ],
        )

    assert_no_plan_takes_it(snapshot(dept_guarantee=8))
    assert_is_victim(snapshot(dept_guarantee=16))


def test_capability_is_checked_for_the_preemptors_ancestors_counting_siblings() -> None:
    # 'dept' caps at 8 and the sibling 'peer' already holds 8 on n1: the
    # preemptor does not fit under the cap, although n2 is free.
    queues = [
        a_queue("dept", capability=8),
        a_queue("mine", parent="dept"),
        a_queue("peer", parent="dept"),
    ]
    jobs = [running_in("peer", "peer-job", "n1").not_preemptable(), urgent_in("mine")]
    result = plan(tree_snapshot(queues, jobs))
    assert not result.feasible
    assert victim_jobs(result) == []
    assert any("capability" in line for line in result.explanation)


def test_under_an_ancestors_capability_a_sibling_may_be_reclaimed_to_make_room() -> None:
    queues = [
        a_queue("dept", capability=8),
        a_queue("mine", parent="dept", guarantee=8),
        a_queue("peer", parent="dept"),
    ]
    jobs = [running_in("peer", "peer-job", "n1"), urgent_in("mine")]
    result = plan(tree_snapshot(queues, jobs))
    assert result.feasible
    assert victim_jobs(result) == ["peer-job"]
    assert result.action == "reclaim"


def test_a_queue_never_reclaims_from_its_ancestor() -> None:
    queues = [a_queue("dept"), a_queue("mine", parent="dept", guarantee=8)]
    jobs = [running_in("dept", "victim", "n1"), urgent_in("mine")]
    assert_is_not_victim(tree_snapshot(queues, jobs, nodes=("n1",)))


def test_a_queue_never_reclaims_from_its_descendant() -> None:
    queues = [a_queue("mine", guarantee=8), a_queue("team", parent="mine")]
    jobs = [running_in("team", "victim", "n1"), urgent_in("mine")]
    assert_is_not_victim(tree_snapshot(queues, jobs, nodes=("n1",)))


def test_a_queue_never_reclaims_from_a_grandchild() -> None:
    queues = [
        a_queue("mine", guarantee=8),
        a_queue("team", parent="mine"),
        a_queue("squad", parent="team"),
    ]
    jobs = [running_in("squad", "victim", "n1"), urgent_in("mine")]
    assert_is_not_victim(tree_snapshot(queues, jobs, nodes=("n1",)))


def test_an_explained_plan_reads_back_as_itself_with_each_candidate_s_own_verdicts() -> None:
    """Candidates with the same verdict share one (frozen) object; the plan is unchanged."""
    snapshot = a_snapshot(
        nodes=[a_node(f"n{i}") for i in range(4)],
        jobs=(
            a_job("urgent").priority(1000).pending(1, 8),
            *(
                a_job(f"sweep-{i}")
                .priority(10 * i)
                .running(pods=[(f"n{i}", 8)], started_at=NOW - (i + 1) * HOUR)
                for i in range(4)
            ),
        ),
    )
    result = plan(snapshot, explain=True)
    assert Plan.model_validate_json(result.model_dump_json()) == result
    preemptable = [v for c in result.candidates for v in c.verdicts if v.rule == "preemptable"]
    assert len(preemptable) == 4
    assert len({id(v) for v in preemptable}) == 1
    cooldowns = {v.reason for c in result.candidates for v in c.verdicts if v.rule == "cooldown"}
    assert len(cooldowns) == 4  # each started at its own time: its own words


# --------------------------------------------------------------------------- judging all


def three_candidates() -> PlanningSession:
    """In queue 'theirs' (over its guarantee): 'light' (a plain victim), 'heavy' (outweighs
    the preemptor: protected) and 'pinned' (not preemptable, and in its cooldown)."""
    snapshot = reclaim_case(
        victim=a_job("light").priority(100).started(NOW - HOUR),
        extra_nodes=("n2", "n3"),
        extra_jobs=(
            a_job("heavy").priority(5000).in_queue("theirs").running(pods=[("n2", 8)]),
            a_job("pinned")
            .not_preemptable()
            .in_queue("theirs")
            .running(pods=[("n3", 8)], started_at=NOW - 10),
        ),
    )
    return PlanningSession.open(snapshot, "urgent")


def names(session: PlanningSession, indexes: Iterable[int]) -> list[str]:
    return [session.candidates[i].name for i in indexes]


def test_judging_all_candidates_lists_the_eligible_and_the_protected_among_them() -> None:
    session = three_candidates()
    judged = judge_candidates(session, DEFAULT_RULES, every=False)
    assert names(session, judged.eligible) == ["heavy", "light"]
    assert names(session, judged.protected) == ["heavy"]


def test_asking_every_verdict_lists_each_rule_s_verdict_past_a_refusal() -> None:
    session = three_candidates()
    (pinned,) = (c.index for c in session.candidates if c.name == "pinned")
    every = judge_candidates(session, DEFAULT_RULES, every=True).verdicts[pinned]
    assert [(name, v.allowed) for name, v in every] == [
        ("preemptable", False),
        ("cooldown", False),
        ("eviction-limit", True),
        ("reclaim", True),
    ]


def test_asking_every_verdict_finds_the_same_eligible_and_protected_candidates() -> None:
    session = three_candidates()
    first = judge_candidates(session, DEFAULT_RULES, every=False)
    every = judge_candidates(session, DEFAULT_RULES, every=True)
    assert (every.eligible, every.protected) == (first.eligible, first.protected)


class AskedFor:
    """A rule that abstains, and records whom it was asked about."""

    name = "asked-for"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        self.asked.append(candidate.name)
        return None


def test_without_every_verdict_judging_stops_at_a_candidates_first_refusal() -> None:
    session = three_candidates()
    after = AskedFor()
    judged = judge_candidates(session, (*DEFAULT_RULES[:1], after, *DEFAULT_RULES[1:]), every=False)
    assert after.asked == ["heavy", "light"]  # "pinned" was refused by the rule before it
    assert judged.verdicts == {}  # an unexplained plan reads eligibility alone
