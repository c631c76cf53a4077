"""A lost broker state is detected: a restarted memory-only broker, topics gone, layouts changed."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gpuyield.streams.broker_state import (
    EXIT_BROKER_LOST,
    BrokerState,
    guard_broker,
    lost_state,
    observe,
    start_on_broker,
)
from gpuyield.streams.embedded import EmbeddedBroker
from gpuyield.streams.topics import changelogs, ensure_topics, registry

BASE = BrokerState("gpuyield-a1", {"gpuyield.ticks": 1, "gpuyield.heartbeats": 8})


def test_the_same_broker_with_the_same_topics_has_lost_nothing() -> None:
    same = BrokerState("gpuyield-a1", {"gpuyield.heartbeats": 8, "gpuyield.ticks": 1})
    assert lost_state(BASE, same) is None


def test_a_new_cluster_id_is_a_new_broker() -> None:
    reason = lost_state(BASE, BrokerState("gpuyield-b2", dict(BASE.partitions)))
    assert reason is not None
    assert "cluster id is gpuyield-b2, was gpuyield-a1" in reason


def test_a_topic_gone_or_with_another_partition_count_is_named() -> None:
    reason = lost_state(BASE, BrokerState("gpuyield-a1", {"gpuyield.ticks": 4}))
    assert reason == (
        "topic gpuyield.heartbeats is gone; topic gpuyield.ticks has 4 partitions, had 1"
    )


def test_topics_created_after_the_baseline_do_not_count() -> None:
    more = BrokerState("gpuyield-a1", {**BASE.partitions, "gpuyield.alerts": 1})
    assert lost_state(BASE, more) is None


async def test_a_broker_restarted_under_a_client_is_detected(tmp_path: Path) -> None:
    specs = registry(prefix="r.") + changelogs("r-app")
    record = tmp_path / "state" / "broker.json"
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    port = broker.port
    kafka = {"bootstrap_servers": broker.bootstrap}
    try:
        baseline = await start_on_broker(kafka, specs, 1, record)
        assert baseline.partitions == {spec.name: spec.partitions for spec in specs}
        broker.stop()
        broker = EmbeddedBroker(port, log_path=tmp_path / "tansu-2.log").start()
        await name_a_topic(kafka, "r.gpuyield.ticks")
        exits: list[int] = []
        reason = await asyncio.wait_for(
            guard_broker("test client", kafka, baseline, interval_s=0.05, exit=exits.append),
            timeout=30,  # a hang guard
        )
        assert exits == [EXIT_BROKER_LOST]
        assert "cluster id is" in reason
        assert "topic r.gpuyield.heartbeats is gone" in reason
        assert "topic r.gpuyield.ticks has 4 partitions, had 1" in reason
    finally:
        broker.stop()


async def name_a_topic(kafka: dict[str, str], topic: str) -> None:
    """A reconnecting client names a topic: Tansu creates it with its default of 4 partitions."""
    producer = AIOKafkaProducer(**kafka)
    await producer.start()
    await producer.send_and_wait(topic, b"{}", key=b"tick")
    await producer.stop()
    assert (await observe(kafka, [topic])).partitions == {topic: 4}


async def test_the_next_start_on_a_new_broker_gives_its_topics_the_registry_layout(
    tmp_path: Path,
) -> None:
    specs = registry(prefix="r.") + changelogs("r-app")
    names = [spec.name for spec in specs]
    record = tmp_path / "state" / "broker.json"
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    port = broker.port
    kafka = {"bootstrap_servers": broker.bootstrap}
    try:
        first = await start_on_broker(kafka, specs, 1, record)
        broker.stop()
        broker = EmbeddedBroker(port, log_path=tmp_path / "tansu-2.log").start()
        await name_a_topic(kafka, "r.gpuyield.ticks")
        await name_a_topic(kafka, "r-app-decider-changelog")
        # the dying predecessor's producer created a changelog right and wrote into it
        progress = [spec for spec in specs if spec.name == "r-app-progress-changelog"]
        await ensure_topics(kafka, progress, 1)
        producer = AIOKafkaProducer(**kafka)
        await producer.start()
        await producer.send_and_wait("r-app-progress-changelog", b"{}", key=b"job")
        await producer.stop()
        tables = [spec.name for spec in changelogs("r-app")]
        second = await start_on_broker(kafka, specs, 1, record, discard=tables)
        assert second.cluster_id != first.cluster_id
        # the decider's topics have their one partition again, and the changelogs are empty
        assert second.partitions == first.partitions
        assert (await observe(kafka, names)).partitions == first.partitions
        assert await end_offsets(kafka, "r-app-progress-changelog") == [0] * 8
    finally:
        broker.stop()


async def end_offsets(kafka: dict[str, str], topic: str) -> list[int]:
    consumer = AIOKafkaConsumer(**kafka)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(8)]
        ends = await consumer.end_offsets(partitions)
        return [ends[p] for p in partitions]
    finally:
        await consumer.stop()


async def test_a_first_start_leaves_an_existing_layout_alone(tmp_path: Path) -> None:
    """Without a record of an earlier broker, a different layout may be an operator's choice."""
    specs = registry(prefix="r.")
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        kafka = {"bootstrap_servers": broker.bootstrap}
        await name_a_topic(kafka, "r.gpuyield.ticks")
        state = await start_on_broker(kafka, specs, 1, tmp_path / "broker.json")
        assert state.partitions["r.gpuyield.ticks"] == 4


async def test_an_unreachable_broker_is_not_a_lost_one(tmp_path: Path) -> None:
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    kafka = {"bootstrap_servers": broker.bootstrap}
    try:
        baseline = await observe(kafka, [])
    finally:
        broker.stop()
    exits: list[int] = []
    checks = 0

    async def count(seconds: float) -> None:
        nonlocal checks
        checks += 1
        if checks > 2:
            raise TimeoutError  # stop the guard after two failed looks
        await asyncio.sleep(0)

    guard = guard_broker(
        "test client", kafka, baseline, interval_s=0, exit=exits.append, sleep=count
    )
    with contextlib.suppress(TimeoutError):
        await guard
    assert exits == []


async def test_an_embedded_broker_that_exited_is_a_lost_state(tmp_path: Path) -> None:
    exits: list[int] = []
    reason = await guard_broker(
        "test worker",
        {"bootstrap_servers": "127.0.0.1:1"},
        BrokerState(None, {}),
        interval_s=0,
        alive=lambda: False,
        exit=exits.append,
    )
    assert exits == [EXIT_BROKER_LOST]
    assert reason == "the embedded broker this process started has exited"
