"""Read topics from the beginning (or a time) up to now, synchronously, with kafka-python.

For the commands that look back (``gpuyield audit``, ``gpuyield replay``):
they read what the topics hold now and stop, unlike a subscriber.

"Up to now" is the end offset each partition had when the read began, with
one Tansu precaution (runtime notes): its reported end offset can be short
when the last batch held several records, so the read also goes on until a
poll brings nothing new. Only topics the broker lists are read: asking Tansu
about a missing topic would create it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuyield.streams.kafka_python_close import close_consumer


@dataclass(frozen=True, slots=True)
class TopicMessage:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None


def read_topics(
    client_kwargs: dict[str, Any],
    topics: Sequence[str],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    idle_s: float = 1.0,
    timeout_s: float = 300.0,
) -> Iterator[TopicMessage]:
    """Every message of ``topics`` stamped within [since_ms, until_ms], in partition order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_kwargs, enable_auto_commit=False, group_id=None)
    try:
        existing = consumer.topics()
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            if topic in existing
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        if not partitions:
            return
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        starts: dict[Any, Any] = {}
        if since_ms is not None:
            starts = consumer.offsets_for_times(dict.fromkeys(partitions, since_ms))
        for tp in partitions:
            found = starts.get(tp)
            if since_ms is None:
                consumer.seek_to_beginning(tp)
            elif found is None:
                consumer.seek(tp, ends[tp])  # nothing at or after since_ms
            else:
                consumer.seek(tp, found.offset)
        deadline = time.monotonic() + timeout_s
        last_news = time.monotonic()
        while time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    if until_ms is not None and (record.timestamp or 0) > until_ms:
                        continue
                    yield TopicMessage(
                        record.topic,
                        record.partition,
                        record.offset,
                        record.timestamp,
                        record.key,
                        record.value,
                    )
            if batches:
                last_news = time.monotonic()
                continue
            caught_up = all(consumer.position(tp) >= ends[tp] for tp in partitions)
            if caught_up and time.monotonic() - last_news >= idle_s:
                return
    finally:
        close_consumer(consumer)
