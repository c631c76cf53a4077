"""One shortage, one round: the demand ledger holds a preemptor back while yields are in flight."""

from __future__ import annotations

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
