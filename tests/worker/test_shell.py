"""The worker's shell without a broker: one input to an outcome, applied and sent in order."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "controller"))

from cluster_objects import event, node, pod, pod_group
from harness import NOW, shared_pool

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Outcome
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.worker.shell import (
    DeciderIndex,
    OutcomeSinks,
    TableView,
    apply_writes,
    decide,
    publish_outcome,
)
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import KubeEvent, Reservation

CONFIG = ControllerConfig()


def table_of_shared_pool() -> dict[bytes, object]:
    """The decider table (bytes keys, as Faust keeps it) of a 4-node pool research fills."""
    return {k.encode(): v for k, v in shared_pool().records.items()}


def demand_outcome(table: dict[bytes, object]) -> Outcome:
    group = pod_group(
        "ft-llama", namespace="prod", queue="production", phase="Inqueue", unschedulable=True
    )
    first = decide(table, KubeEvent, encode(event(group, NOW)), "kube/0/1", CONFIG)
    assert isinstance(first, Outcome)
    apply_writes(table, first.writes)
    raw = encode(event(pod("ft-llama", 0, namespace="prod", priority=1000), NOW))
    outcome = decide(table, KubeEvent, raw, "kube/0/2", CONFIG)
    assert isinstance(outcome, Outcome)
    return outcome


def test_undecodable_and_rejected_input_becomes_a_dead_letter_reason() -> None:
    table: dict[bytes, object] = {}
    assert decide(table, KubeEvent, b"\x00 not json", "kube/0/1", CONFIG).startswith("not JSON")
    bad = pod("ft", 0, namespace="prod")
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "two"
    reason = decide(table, KubeEvent, encode(event(bad, NOW)), "kube/0/2", CONFIG)
    assert isinstance(reason, str)
    assert "nvidia.com/gpu must be a whole number" in reason


def test_the_index_kept_next_to_the_table_follows_it_and_decides_the_same() -> None:
    table = table_of_shared_pool()
    without = table_of_shared_pool()
    index = DeciderIndex(CONFIG)
    group = pod_group(
        "ft-llama", namespace="prod", queue="production", phase="Inqueue", unschedulable=True
    )
    inputs = [
        encode(event(group, NOW)),
        encode(event(pod("ft-llama", 0, namespace="prod", priority=1000), NOW)),
    ]
    for n, raw in enumerate(inputs):
        kept = decide(table, KubeEvent, raw, f"kube/0/{n}", CONFIG, index=index)
        rebuilt = decide(without, KubeEvent, raw, f"kube/0/{n}", CONFIG)
        assert isinstance(kept, Outcome)
        assert kept == rebuilt
        apply_writes(table, kept.writes, index)
        apply_writes(without, rebuilt.writes)
    assert kept.commands  # the demand made research yield
    assert index.of(TableView(table)).state() == RecordIndex.build(TableView(table), CONFIG).state()


def test_an_index_reset_after_a_rebalance_is_rebuilt_from_the_table() -> None:
    table = table_of_shared_pool()
    index = DeciderIndex(CONFIG)
    before = index.of(TableView(table))
    table[b"node/gpu-09"] = {"gpus": 8, "schedulable": True, "rack": None, "nvlink": None}
    index.reset()  # as the worker does when its partitions move: the table was recovered
    after = index.of(TableView(table))
    assert after is not before
    assert after.cluster_gpus == before.cluster_gpus + 8


def test_writes_land_on_the_table_and_deletions_remove_keys() -> None:
    table: dict[bytes, object] = {}
    added = decide(table, KubeEvent, encode(event(node("gpu-00"), NOW)), "kube/0/1", CONFIG)
    assert isinstance(added, Outcome)
    apply_writes(table, added.writes)
    assert table[b"node/gpu-00"] == {
        "gpus": 8,
        "schedulable": True,
        "rack": "rack-a",
        "nvlink": None,
    }
    apply_writes(table, {"node/gpu-00": None, "node/never-there": None})
    assert b"node/gpu-00" not in table


def test_an_outcome_is_sent_reservations_first_then_decisions_commands_alerts() -> None:
    table = table_of_shared_pool()
    outcome = demand_outcome(table)
    assert outcome.reservations
    assert outcome.commands
    sent: list[tuple[str, bytes]] = []
    enforced: list[tuple[Reservation, ...]] = []

    def sink(topic: str):  # type: ignore[no-untyped-def]
        async def send(key: bytes, value: bytes) -> None:
            sent.append((topic, key))

        return send

    async def enforce(holds: tuple[Reservation, ...]) -> None:
        assert sent == [], "holds are enforced before anything is sent"
        enforced.append(holds)

    sinks = OutcomeSinks(sink("reservations"), sink("decisions"), sink("commands"), sink("alerts"))
    asyncio.run(publish_outcome(outcome, sinks, enforce=enforce))
    assert enforced == [outcome.reservations]
    topics = [t for t, _ in sent]
    assert topics == sorted(topics, key=["reservations", "decisions", "commands", "alerts"].index)
    assert [k for t, k in sent if t == "commands"] == [c.node.encode() for c in outcome.commands]


def test_a_decision_is_sent_as_its_encoded_bytes_its_snapshot_models_kept_for_the_next() -> None:
    outcome = demand_outcome(table_of_shared_pool())
    decision = outcome.decisions[0]
    assert decision.snapshot is not None
    sent: list[bytes] = []

    async def decisions(key: bytes, value: bytes) -> None:
        sent.append(value)

    async def elsewhere(key: bytes, value: bytes) -> None:
        pass

    sinks = OutcomeSinks(elsewhere, decisions, elsewhere, elsewhere)
    asyncio.run(publish_outcome(outcome, sinks))
    asyncio.run(publish_outcome(outcome, sinks))

    assert sent == [encode(decision), encode(decision)]
    assert len(sinks.kept) == len(decision.snapshot.nodes) + len(decision.snapshot.jobs)
