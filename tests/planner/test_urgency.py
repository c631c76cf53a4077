"""Production's claim: what gives way to a waiting preemptor with an SLA, and when at risk.

gpuyield's reading (README, "SLA at risk"; ``agents/planner/urgency.py``): a
waiting job with an SLA (``sla_deadline``) may take a candidate in its
cooldown or at its eviction limit, as a protected victim (taken only when no
plan without one exists); once it has waited ``sla_risk_share`` of its
budget (``sla_deadline - submitted_at``), W_eff protection across queues is
lifted too. Nothing else gives way. Each test builds the smallest cluster
where the override alone decides.
"""

from __future__ import annotations

from builders import HOUR, NOW, JobBuilder, a_job, a_node, a_policy, a_queue, a_snapshot
from hypothesis import given
from hypothesis import strategies as st

from gpuyield.agents.planner import plan
from gpuyield.agents.planner.urgency import budget_risk, sla_risk
from gpuyield.schemas import Plan, Snapshot

# A production fine-tune submitted 3 h ago with a 10 h budget: 30 % of it waited.
SUBMITTED = NOW - 3 * HOUR
AT_RISK = SUBMITTED + 10 * HOUR  # 30 % >= the default share (10 %)
NOT_YET = SUBMITTED + 40 * HOUR  # 7.5 %: not at risk yet

QUEUES = [
    a_queue("production", guarantee=16, capability=16, reclaimable=False),
    a_queue("research", guarantee=0, reclaimable=True),
]


def research(name: str = "victim") -> JobBuilder:
    return a_job(name).in_queue("research").priority(100)


def fine_tune(deadline: float | None) -> JobBuilder:
    return (
        a_job("ft")
        .in_queue("production")
        .priority(1000)
        .submitted(SUBMITTED)
        .pending(pods=1, gpus=8)
        .due_by(deadline)
    )


def one_node_held_by(victim: JobBuilder, deadline: float | None, **policy: float) -> Snapshot:
    return a_snapshot(
        nodes=[a_node("n1", 8)],
        queues=QUEUES,
        jobs=[victim, fine_tune(deadline)],
        policy=a_policy(**policy),
    )


def victims(result: Plan) -> list[str]:
    return [v.job for v in result.victims]


def in_cooldown() -> JobBuilder:
    return research().running(pods=[("n1", 8)], started_at=NOW - 60, checkpointed_at=NOW - 30)


def test_a_preemptor_with_an_sla_overrides_the_cooldown_before_it_is_at_risk() -> None:
    result = plan(one_node_held_by(in_cooldown(), NOT_YET))
    assert victims(result) == ["victim"]
    assert result.objective is not None
    assert result.objective.protected_victims == 1


def test_a_preemptor_with_an_sla_overrides_the_eviction_limit() -> None:
    limited = (
        research()
        .running(pods=[("n1", 8)], started_at=NOW - 2 * HOUR, checkpointed_at=NOW - 60)
        .evicted_at(NOW - 5 * HOUR, NOW - 4 * HOUR, NOW - 3 * HOUR)
    )
    assert victims(plan(one_node_held_by(limited, None))) == []
    assert victims(plan(one_node_held_by(limited, NOT_YET))) == ["victim"]


def test_a_preemptor_without_an_sla_never_overrides_the_cooldown() -> None:
    result = plan(one_node_held_by(in_cooldown(), None))
    assert not result.feasible
    assert victims(result) == []


def finishing() -> JobBuilder:
    """A near-finished research job: W_eff 100 + 150 ln(101) + 800 x 0.99^2 > 1000."""
    return (
        research()
        .running(pods=[("n1", 8)], started_at=NOW - 100 * HOUR, checkpointed_at=NOW - 60)
        .progress(0.99)
    )


def test_the_share_of_the_budget_is_a_policy_knob() -> None:
    # 7.5 % of the budget waited: at risk, so unprotected, once the share is 5 %.
    calm = plan(one_node_held_by(finishing(), NOT_YET))
    urgent = plan(one_node_held_by(finishing(), NOT_YET, sla_risk_share=0.05))
    assert calm.objective is not None
    assert calm.objective.protected_victims == 1
    assert urgent.objective is not None
    assert urgent.objective.protected_victims == 0


def test_overridden_victims_go_last_even_at_a_higher_loss() -> None:
    """A victim past its cooldown that loses an hour beats one in cooldown that loses 30 s."""
    fresh = research("fresh").running(pods=[("n1", 8)], started_at=NOW - 60, checkpointed_at=NOW)
    old = research("old").running(
        pods=[("n2", 8)], started_at=NOW - 2 * HOUR, checkpointed_at=NOW - HOUR
    )
    snapshot = a_snapshot(
        nodes=[a_node("n1", 8), a_node("n2", 8)],
        queues=QUEUES,
        jobs=[fresh, old, fine_tune(AT_RISK)],
    )
    result = plan(snapshot)
    assert victims(result) == ["old"]
    assert result.objective is not None
    assert result.objective.protected_victims == 0


def test_a_preemptor_at_risk_lifts_w_eff_protection() -> None:
    """The near-finished job is protected (the only plan takes it all the same); at risk,
    it is no longer protected."""
    calm = plan(one_node_held_by(finishing(), NOT_YET))
    urgent = plan(one_node_held_by(finishing(), AT_RISK))
    assert victims(calm) == victims(urgent) == ["victim"]
    assert calm.objective is not None
    assert calm.objective.protected_victims == 1
    assert urgent.objective is not None
    assert urgent.objective.protected_victims == 0


def test_preemptable_false_never_gives_way() -> None:
    pinned = in_cooldown().not_preemptable()
    assert victims(plan(one_node_held_by(pinned, AT_RISK))) == []


def test_the_queues_guarantee_never_gives_way() -> None:
    """Research within its guarantee is not reclaimed, however urgent production is."""
    guarded = [QUEUES[0], a_queue("research", guarantee=8, reclaimable=True)]
    snapshot = a_snapshot(
        nodes=[a_node("n1", 8)],
        queues=guarded,
        jobs=[in_cooldown(), fine_tune(AT_RISK)],
    )
    assert victims(plan(snapshot)) == []


def test_the_plan_says_why_the_rules_gave_way() -> None:
    result = plan(one_node_held_by(in_cooldown(), AT_RISK), explain=True)
    assert "SLA at risk: waited 10800 s of its 36000 s budget" in result.explanation[0]
    (candidate,) = result.candidates
    cooldown = next(v for v in candidate.verdicts if v.rule == "cooldown")
    assert cooldown.allowed
    assert cooldown.protected
    assert "overridden: the preemptor has an SLA" in cooldown.reason


def test_a_running_job_is_never_at_risk() -> None:
    job = fine_tune(AT_RISK).running(pods=[("n1", 8)]).build()
    assert sla_risk(job, NOW, a_policy()) is None


@given(
    budget=st.floats(min_value=1.0, max_value=1e7),
    waited=st.floats(min_value=0.0, max_value=2e7),
    share=st.floats(min_value=0.0, max_value=1.0),
)
def test_at_risk_exactly_when_the_share_of_the_budget_is_used(
    budget: float, waited: float, share: float
) -> None:
    risk = budget_risk(0.0, budget, waited, share)  # times from the submission: exact
    assert (risk is not None) == (waited >= share * budget)
