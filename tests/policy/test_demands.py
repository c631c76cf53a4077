"""One shortage, one round: the demand ledger holds a preemptor back while yields are in flight."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyield.agents.policy.demands import DemandLedger


def test_a_new_demand_may_be_planned() -> None:
    assert DemandLedger().may_plan("ft", 0.0)


def test_no_second_round_while_yields_are_in_flight() -> None:
    ledger = DemandLedger(cooldown_s=0.0).decided("ft", frozenset({"a", "b"}), 0.0, 120.0)
    assert not ledger.may_plan("ft", 60.0)


def test_a_round_is_over_once_every_yield_is_acknowledged() -> None:
    ledger = DemandLedger(cooldown_s=0.0).decided("ft", frozenset({"a", "b"}), 0.0, 120.0)
    ledger = ledger.acknowledged("ft", "a").acknowledged("ft", "b")
    assert ledger.waiting_on("ft") == frozenset()
    assert ledger.may_plan("ft", 60.0)


def test_a_redelivered_acknowledgement_changes_nothing() -> None:
    ledger = DemandLedger().decided("ft", frozenset({"a", "b"}), 0.0, 120.0)
    once = ledger.acknowledged("ft", "a")
    assert once.acknowledged("ft", "a") is once


def test_yields_past_their_deadline_no_longer_hold_the_demand_back() -> None:
    ledger = DemandLedger(cooldown_s=0.0).decided("ft", frozenset({"a"}), 0.0, 120.0)
    assert ledger.may_plan("ft", 120.0)


def test_the_cooldown_holds_a_demand_back_after_a_round() -> None:
    ledger = DemandLedger(cooldown_s=300.0).tried("ft", 0.0)
    assert not ledger.may_plan("ft", 299.0)
    assert ledger.may_plan("ft", 300.0)


def test_a_settled_demand_starts_afresh() -> None:
    ledger = DemandLedger(cooldown_s=300.0).decided("ft", frozenset({"a"}), 0.0, 120.0)
    assert ledger.settled("ft").may_plan("ft", 1.0)


def test_without_a_backoff_the_cooldown_never_grows() -> None:
    ledger = DemandLedger(cooldown_s=300.0)
    for k in range(5):
        ledger = ledger.tried("ft", 300.0 * k)
    assert ledger.retry_after("ft") == 300.0
    assert ledger.failures == {}


def test_a_demand_that_keeps_finding_no_plan_backs_off_up_to_the_cap() -> None:
    ledger = DemandLedger(cooldown_s=300.0, backoff_max_s=1800.0)
    waits = []
    for now in (0.0, 300.0, 900.0, 2100.0, 3900.0):
        assert ledger.may_plan("ft", now)
        ledger = ledger.tried("ft", now)
        waits.append(ledger.retry_after("ft"))
    assert waits == [300.0, 600.0, 1200.0, 1800.0, 1800.0]
    assert not ledger.may_plan("ft", 3900.0 + 1799.0)
    assert ledger.may_plan("ft", 3900.0 + 1800.0)


def test_a_decided_or_settled_round_ends_the_backoff() -> None:
    ledger = DemandLedger(cooldown_s=300.0, backoff_max_s=1800.0)
    for now in (0.0, 300.0, 900.0):
        ledger = ledger.tried("ft", now)
    assert ledger.retry_after("ft") == 1200.0
    assert ledger.decided("ft", frozenset({"a"}), 1000.0, 1120.0).retry_after("ft") == 300.0
    assert ledger.settled("ft").retry_after("ft") == 300.0


def test_the_backoff_is_per_demand() -> None:
    ledger = DemandLedger(cooldown_s=300.0, backoff_max_s=1800.0)
    ledger = ledger.tried("ft", 0.0).tried("ft", 300.0)
    assert ledger.retry_after("ft") == 600.0
    assert ledger.retry_after("other") == 300.0


def test_a_demand_with_an_sla_skips_the_cooldown_and_the_backoff() -> None:
    ledger = DemandLedger(cooldown_s=300.0, backoff_max_s=1800.0, sla_retry_s=60.0)
    for t in (0.0, 300.0, 900.0, 2100.0):
        ledger = ledger.tried("ft", t)  # four rounds without a plan: backed off to 30 min
    assert not ledger.may_plan("ft", 2159.0, sla=True)
    assert ledger.may_plan("ft", 2160.0, sla=True)
    assert not ledger.may_plan("ft", 2160.0)


def test_a_demand_with_an_sla_still_waits_for_its_round_in_flight() -> None:
    ledger = DemandLedger(cooldown_s=0.0).decided("ft", frozenset({"a"}), 0.0, 120.0)
    assert not ledger.may_plan("ft", 60.0, sla=True)


def test_a_demand_is_held_until_its_backoff_ends_and_no_later() -> None:
    ledger = DemandLedger(cooldown_s=300.0, backoff_max_s=1800.0)
    for k in range(3):
        ledger = ledger.tried("ft", 1000.0 * k)
    until = ledger.held_until("ft")  # three failures in a row: 1200 s after the last round
    assert not ledger.may_plan("ft", until - 1.0)
    assert until <= 3200.0
    assert ledger.may_plan("ft", 3200.0)


def test_a_round_in_flight_holds_a_demand_until_its_deadline() -> None:
    ledger = DemandLedger(cooldown_s=0.0).decided("ft", frozenset({"a"}), 0.0, 120.0)
    assert ledger.held_until("ft") == 120.0
    assert not ledger.may_plan("ft", 119.0)


def test_a_new_demand_is_not_held() -> None:
    assert DemandLedger().held_until("ft") == float("-inf")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.floats(min_value=0.0, max_value=1e7)), min_size=1, max_size=8
    ),
    st.floats(min_value=0.0, max_value=1e7),
    st.booleans(),
)
def test_may_plan_says_no_before_the_held_until_time(
    rounds: list[tuple[bool, float]], later: float, sla: bool
) -> None:
    """Whatever the rounds (found a plan or not) and whenever it asks before the hold ends."""
    ledger = DemandLedger(cooldown_s=300.0, backoff_max_s=1800.0, sla_retry_s=60.0)
    now = 0.0
    for decided, step in rounds:
        now += step
        if decided:
            ledger = ledger.decided("ft", frozenset({"a"}), now, now + 120.0)
        else:
            ledger = ledger.tried("ft", now)
    until = ledger.held_until("ft", sla=sla)
    asked = min(now + later, until)
    if asked < until:
        assert not ledger.may_plan("ft", asked, sla=sla)
    # Never late by more than its margin (a millionth of the times): just after, it may plan.
    assert ledger.may_plan("ft", until + 1e-5 * (abs(until) + 1.0), sla=sla)
