"""Messages no agent can read go to ``gpuyield.dead-letters``, bytes intact, with the reason.

An agent that meets a bad message must neither crash (a crash-looping
consumer stops the whole partition behind one bad record) nor drop it
silently. It records the original key and value, base64-encoded so any bytes
survive JSON, with where they came from, and moves on.
"""

from __future__ import annotations

import base64
import binascii
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
    """The record of one unreadable message; a null value (a tombstone) is recorded as empty."""
    return DeadLetter(
        reason=reason,
        source_topic=topic,
        partition=partition,
        offset=offset,
        key=None if key is None else _b64(key),
        value=_b64(value or b""),
        received_at=now,
    )


def original_bytes(letter: DeadLetter) -> tuple[bytes | None, bytes]:
    """The original key and value of a dead letter, byte for byte (for replays)."""
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
