"""Messages no agent can read go to ``gpuyield.dead-letters``, bytes intact, with the reason.

An agent that meets a bad message must neither crash (a crash-looping
consumer stops the whole partition behind one bad record) nor drop it
silently. It records the original key and value, base64-encoded so any bytes
survive JSON, with where they came from, and moves on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import DeadLetter
from gpuyield.streams.topics import DEAD_LETTERS

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class RecordLike(Protocol):
    """What a dead letter needs of a consumed record (aiokafka's ConsumerRecord has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class Producer(Protocol):
    """The part of aiokafka's AIOKafkaProducer a dead letter is sent with."""

    async def send_and_wait(
        self, topic: str, value: bytes | None = None, key: bytes | None = None
    ) -> Any: ...


MAX_KEPT_BYTES = 256 * 1024
"""Original bytes kept whole up to this size (key and value together); base64
makes them 4/3 larger, so a dead letter stays far below Kafka's 1 MiB default
``max.request.size`` (and the broker's ``message.max.bytes``)."""

MAX_REASON_CHARS = 4096
"""A reason longer than this is cut: validation errors can quote the input."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def dead_letter(
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    now: float,
) -> DeadLetter:
    """The record of one unreadable message; a null value (a tombstone) is recorded as empty.

    Whatever the message's size, the letter fits a producer request: bytes
    beyond ``MAX_KEPT_BYTES`` are left out and the letter says so, with the
    value's size and SHA-256 (the whole message is still at its offset in the
    source topic for as long as that topic keeps it).
    """
    raw = value or b""
    raw_key = key or b""
    truncated = len(raw) + len(raw_key) > MAX_KEPT_BYTES
    if truncated:
        raw_key = raw_key[: MAX_KEPT_BYTES // 4]
        raw = raw[: MAX_KEPT_BYTES - len(raw_key)]
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 14] + " [reason cut]"
    return DeadLetter(
        reason=reason,
        source_topic=topic,
        partition=partition,
        offset=offset,
        key=None if key is None else _b64(raw_key),
        value=_b64(raw),
        received_at=now,
        truncated=truncated,
        value_size=len(value or b""),
        value_sha256=hashlib.sha256(value or b"").hexdigest(),
    )


def original_bytes(letter: DeadLetter) -> tuple[bytes | None, bytes]:
    """The original key and value of a dead letter, byte for byte (for replays).

    A truncated letter has only a prefix: asking it for the original bytes is
    an error that says where the whole message is.
    """
    if letter.truncated:
        raise ValueError(
            f"dead letter keeps only a prefix of a {letter.value_size}-byte message; the whole "
            f"message is at {letter.source_topic}[{letter.partition}]@{letter.offset}"
        )
    try:
        key = None if letter.key is None else base64.b64decode(letter.key, validate=True)
        return key, base64.b64decode(letter.value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"dead letter holds invalid base64: {exc}") from None


def decode_or_dead_letter(model: type[M], record: RecordLike, now: float) -> M | DeadLetter:
    """The record's message, or the dead letter that says why it is unreadable."""
    try:
        return decode(model, record.value)
    except MessageError as exc:
        log.warning(
            "dead letter from %s[%d]@%d: %s", record.topic, record.partition, record.offset, exc
        )
        return dead_letter(
            str(exc),
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value,
            now,
        )


async def publish_dead_letter(
    producer: Producer, letter: DeadLetter, topic: str = DEAD_LETTERS
) -> Any:
    """Send a dead letter, keyed by its source topic, and wait for the broker's ack.

    Waiting matters: the caller commits the bad record's offset only after
    its dead letter is stored, so a crash in between re-sends rather than loses it.
    """
    return await producer.send_and_wait(
        topic, value=encode(letter), key=letter.source_topic.encode()
    )
