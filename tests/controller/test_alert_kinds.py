"""Each meaning its own alert kind: subscribers route on ``kind``, never on the message text."""

from __future__ import annotations

from cluster_objects import queue
from harness import NOW, production_demand, shared_pool

from gpuyield.schemas.messages import AlertKind, YieldAck, YieldOutcome


def test_a_yield_the_node_agent_could_not_carry_out_raises_yield_failed() -> None:
    c = shared_pool()
    production_demand(c)
    command = c.commands[0]
    c.feed(
        YieldAck(
            command_id=command.command_id,
            decision_id=command.decision_id,
            node=command.node,
            job=command.job,
            outcome=YieldOutcome.FAILED,
            detail="pods/eviction forbidden: the agent's ServiceAccount lacks the verb",
            acked_at=NOW + 5,
        )
    )
    assert [(a.kind, a.severity) for a in c.alerts] == [(AlertKind.YIELD_FAILED, "critical")]
    assert "pods/eviction forbidden" in c.alerts[0].message


def test_records_no_snapshot_can_hold_raise_invalid_input_not_an_unservable_demand() -> None:
    c = shared_pool()
    # Volcano's webhook rejects a negative weight; a controller must not stop on one.
    bad = queue("production", weight=4, capability=32, guarantee=16, reclaimable=False)
    bad["spec"]["weight"] = -4
    c.change(bad, NOW - 30)
    production_demand(c)
    assert c.decisions == []
    assert [a.kind for a in c.alerts] == [AlertKind.INVALID_INPUT]
    assert "weight" in c.alerts[0].message


def test_alert_kinds_are_distinct_values() -> None:
    values = [kind.value for kind in AlertKind]
    assert len(values) == len(set(values))
