"""``partition_for`` names the partition the producers really write a key to."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from gpuyield.streams.partitioning import partition_for
from gpuyield.streams.topics import HEARTBEATS, YIELD_COMMANDS, TopicSpec

KEYS = [f"node-{i:04d}" for i in range(40)] + [f"team-{i}/train-{i}" for i in range(40)]


async def test_it_agrees_with_where_a_producer_puts_each_key(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    topic = fresh_topics[YIELD_COMMANDS].name
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        partitions = await producer.partitions_for(topic)
        assert len(partitions) > 1  # the check means something only with several
        for key in KEYS:
            sent = await producer.send_and_wait(topic, b"x", key=key.encode())
            assert partition_for(key.encode(), partitions) == sent.partition, key
    finally:
        await producer.stop()


def test_keys_spread_over_the_partitions() -> None:
    used = {partition_for(key.encode(), range(8)) for key in KEYS}
    assert used == set(range(8))


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="no partitions"):
        partition_for(HEARTBEATS.encode(), [])
