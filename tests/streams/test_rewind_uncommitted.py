"""A partition the group never committed is read from its beginning after a rebalance.

On the session's broker: records fetched and dropped (a rebalance under way)
leave the consumer's position past them; the seek to the committed offsets
brings back a committed partition but leaves a never-committed one where it
was (``streams/rewind_uncommitted.py``).
"""

from __future__ import annotations

import secrets

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gpuyield.streams.rewind_uncommitted import never_committed, rewind_never_committed

HEARTBEATS = "gpuyield.heartbeats"
CHANGELOG = "gy-worker-progress-changelog"


def test_only_partitions_without_an_offset_above_zero_are_rewound() -> None:
    committed: dict[TopicPartition, int | None] = {
        TopicPartition(HEARTBEATS, 3): None,  # never committed
        TopicPartition(HEARTBEATS, 1): 0,  # committed before anything was read
        TopicPartition(HEARTBEATS, 5): -1,  # what some brokers answer for none
        TopicPartition(HEARTBEATS, 0): 45,  # seek_to_committed moved it
        TopicPartition(CHANGELOG, 2): None,  # recovery positions changelogs
    }
    rewound = never_committed(committed, skip=lambda tp: tp.topic == CHANGELOG)
    assert rewound == [
        TopicPartition(HEARTBEATS, 1),
        TopicPartition(HEARTBEATS, 3),
        TopicPartition(HEARTBEATS, 5),
    ]


async def test_a_never_committed_partition_read_past_dropped_records_is_read_again(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = topic_prefix + HEARTBEATS
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_batch_size=1)
    await producer.start()
    try:
        for partition in (0, 1):
            for step in range(4):
                await producer.send_and_wait(
                    topic, f"step {step}".encode(), key=b"research/sweep-07", partition=partition
                )
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id="gy-" + secrets.token_hex(4),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        committed_tp, never_tp = TopicPartition(topic, 0), TopicPartition(topic, 1)
        consumer.assign([committed_tp, never_tp])
        read: dict[TopicPartition, int] = {committed_tp: 0, never_tp: 0}
        while sum(read.values()) < 8:  # fetched, then dropped by the caller
            for tp, records in (await consumer.getmany(timeout_ms=2000)).items():
                read[tp] += len(records)
        await consumer.commit({committed_tp: 2})  # the peer got this far on partition 0
        assert await consumer.position(never_tp) == 4

        committed = await consumer.seek_to_committed()
        assert await consumer.position(committed_tp) == 2
        assert await consumer.position(never_tp) == 4  # aiokafka left it past the dropped ones

        rewound = rewind_never_committed(consumer, committed, skip=lambda tp: False)

        assert rewound == [never_tp]
        assert await consumer.position(never_tp) == 0
        assert await consumer.position(committed_tp) == 2
        again = await consumer.getmany(never_tp, timeout_ms=5000)
        assert [r.value for r in again[never_tp]] == [f"step {s}".encode() for s in range(4)]
    finally:
        await consumer.stop()
