"""Heartbeats land on the heartbeats topic of a real Kafka-protocol broker, keyed by job."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from torch import nn

from gpuyield.agents.trainer import GracefulTrainer, KafkaHeartbeatSink
from gpuyield.schemas.decoding import decode
from gpuyield.schemas.messages import Heartbeat
from gpuyield.streams.topics import TopicSpec


async def test_heartbeats_land_on_the_topic_keyed_by_job(
    tmp_path: Path, kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    spec = fresh_topics["gpuyield.heartbeats"]
    sink = KafkaHeartbeatSink(kafka_bootstrap, topic=spec.name)
    with GracefulTrainer(
        tmp_path, job="research/tiny", pod="tiny-0", heartbeat=sink, heartbeat_every_steps=1
    ) as session:
        session.resume(model=nn.Linear(2, 1))
        for step in range(1, 6):
            session.step_done(step)
        assert session.finish() == 0
    assert session.heartbeat_stats.sent == 6

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(spec.name, p) for p in range(spec.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + 20
        while len(records) < 6 and time.monotonic() < deadline:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), timeout=10)
            records.extend(r for batch in batches.values() for r in batch)
    finally:
        await consumer.stop()

    assert {r.key for r in records} == {b"research/tiny"}
    beats = sorted((decode(Heartbeat, r.value) for r in records), key=lambda hb: hb.step)
    assert [hb.step for hb in beats] == [0, 1, 2, 3, 4, 5]
    assert {hb.pod for hb in beats} == {"tiny-0"}
