"""Dead letters keep the original bytes exactly, say why, and reach their topic."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from gpuyield.schemas.decoding import decode, encode
from gpuyield.schemas.messages import DeadLetter, Heartbeat
from gpuyield.streams.dead_letters import (
    dead_letter,
    decode_or_dead_letter,
    original_bytes,
    publish_dead_letter,
)
from gpuyield.streams.topics import TopicSpec

NOW = 1_764_000_000.0


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def a_heartbeat() -> Heartbeat:
    return Heartbeat(job="ml/train", pod="train-0", step=10, progress=0.1, sent_at=NOW)


@given(key=st.none() | st.binary(max_size=64), value=st.binary(max_size=512))
def test_any_bytes_survive_a_dead_letter_round_trip(key: bytes | None, value: bytes) -> None:
    letter = dead_letter("bad", "gpuyield.heartbeats", 3, 42, key, value, NOW)
    again = decode(DeadLetter, encode(letter))
    assert again == letter
    assert original_bytes(again) == (key, value)


def test_a_null_value_is_recorded_as_empty() -> None:
    letter = dead_letter("tombstone", "t", 0, 1, None, None, NOW)
    assert letter.value == ""
    assert letter.key is None
    assert original_bytes(letter) == (None, b"")


def test_a_good_record_decodes_to_its_model() -> None:
    beat = a_heartbeat()
    record = Record("gpuyield.heartbeats", 2, 7, b"ml/train", encode(beat))
    assert decode_or_dead_letter(Heartbeat, record, NOW) == beat


def test_non_utf8_garbage_becomes_a_dead_letter_with_its_bytes() -> None:
    garbage = b"\xff\xfe\x00{not json\x80"
    record = Record("gpuyield.heartbeats", 5, 99, b"\xc3\x28", garbage)
    letter = decode_or_dead_letter(Heartbeat, record, NOW)
    assert isinstance(letter, DeadLetter)
    assert letter.reason.startswith("not JSON")
    assert (letter.source_topic, letter.partition, letter.offset) == ("gpuyield.heartbeats", 5, 99)
    assert letter.received_at == NOW
    assert base64.b64decode(letter.value) == garbage
    assert original_bytes(letter) == (b"\xc3\x28", garbage)


def test_a_schema_violation_or_unknown_version_names_the_reason() -> None:
    bad_step = b'{"v": 1, "job": "j", "pod": "p", "step": -1, "progress": 0, "sent_at": 1}'
    letter = decode_or_dead_letter(Heartbeat, Record("h", 0, 0, None, bad_step), NOW)
    assert isinstance(letter, DeadLetter)
    assert letter.reason.startswith("Heartbeat: step:")
    future = b'{"v": 2, "job": "j"}'
    letter = decode_or_dead_letter(Heartbeat, Record("h", 0, 1, None, future), NOW)
    assert isinstance(letter, DeadLetter)
    assert "unknown format version 2" in letter.reason
    tombstone = decode_or_dead_letter(Heartbeat, Record("h", 0, 2, b"k", None), NOW)
    assert isinstance(tombstone, DeadLetter)
    assert tombstone.reason.startswith("empty message")


async def test_a_dead_letter_reaches_its_topic_intact(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    source = fresh_topics["gpuyield.heartbeats"].name
    target = fresh_topics["gpuyield.dead-letters"].name
    garbage = b"\x00\xff garbage \x80"
    record = Record(source, 1, 17, b"ml/train", garbage)
    letter = decode_or_dead_letter(Heartbeat, record, NOW)
    assert isinstance(letter, DeadLetter)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        sent = await publish_dead_letter(producer, letter, topic=target)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(target, sent.partition)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        stored = await asyncio.wait_for(consumer.getone(), timeout=10)
    finally:
        await consumer.stop()
    assert stored.key == source.encode()
    assert decode(DeadLetter, stored.value) == letter
    assert original_bytes(decode(DeadLetter, stored.value)) == (b"ml/train", garbage)


def test_a_message_too_large_to_keep_whole_leaves_a_prefix_with_its_size_and_digest() -> None:
    huge = b"{" + b"x" * (2 * 1024 * 1024)
    letter = dead_letter("not JSON", "gpuyield.heartbeats", 0, 9, b"ml/train", huge, NOW)
    assert letter.truncated
    assert letter.value_size == len(huge)
    assert letter.value_sha256 == hashlib.sha256(huge).hexdigest()
    assert huge.startswith(base64.b64decode(letter.value))


def test_every_dead_letter_fits_a_default_kafka_request() -> None:
    for size in (0, 750_000, 1_048_576, 20 * 1_048_576):
        letter = dead_letter("r" * 100_000, "t", 0, 1, b"k" * size, b"v" * size, NOW)
        assert len(encode(letter)) < 1_000_000, f"a {size}-byte message made a letter too large"


def test_a_truncated_letter_refuses_to_pass_its_prefix_off_as_the_original() -> None:
    letter = dead_letter("bad", "gpuyield.kube-events", 0, 4, None, b"z" * 600_000, NOW)
    with pytest.raises(ValueError, match=r"gpuyield.kube-events\[0\]@4"):
        original_bytes(letter)


async def test_a_dead_letter_for_a_message_over_a_megabyte_reaches_its_topic(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    target = fresh_topics["gpuyield.dead-letters"].name
    huge = b"\xff" * (1_200_000)
    letter = decode_or_dead_letter(Heartbeat, Record("h", 0, 3, b"ml/train", huge), NOW)
    assert isinstance(letter, DeadLetter)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        sent = await publish_dead_letter(producer, letter, topic=target)
    finally:
        await producer.stop()
    assert sent.offset >= 0
