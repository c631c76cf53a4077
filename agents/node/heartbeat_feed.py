"""Feeds ``gpuyield.heartbeats`` into the progress board: how the agent hears of checkpoints.

Every node agent reads every partition, without a consumer group (no
commits, no rebalances: it is a view, and each agent needs all jobs that may
land on its node). On start it seeks to ``from_time``: the caller passes a
lookback before the oldest yield still in flight, so after a crash the agent
sees the emergency checkpoint a trainer reported while it was down, and
knows running jobs' last checkpoints for the lost-work estimate. Brokers that
cannot look offsets up by time (Tansu answers with the beginning) make it read
more, never less; the board's fold is indifferent to old or repeated beats.

Unreadable heartbeats are skipped with a debug log: dead-lettering them is the
job of the worker, which consumes the topic as a group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.schemas.decoding import MessageError, decode
from gpuyield.schemas.messages import Heartbeat

log = logging.getLogger(__name__)


class HeartbeatFeed:
    """A group-less consumer of the heartbeat topic that updates a ``ProgressBoard``.

    ``caught_up`` is set once everything that was on the topic at start has
    been read (so a baseline taken after it is current).
    """

    def __init__(self, board: ProgressBoard, *, topic: str, kafka: dict[str, Any]) -> None:
        self._board = board
        self._topic = topic
        self._kafka = kafka
        self._consumer: AIOKafkaConsumer | None = None
        self._ends: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}
        self.caught_up = asyncio.Event()
        self.read = 0

    async def start(self, partitions: Iterable[int], from_time: float) -> None:
        """Connect, assign ``partitions`` and seek each to ``from_time`` (Unix seconds)."""
        consumer = AIOKafkaConsumer(
            **self._kafka, group_id=None, enable_auto_commit=False, auto_offset_reset="latest"
        )
        await consumer.start()
        self._consumer = consumer
        try:
            assigned = [TopicPartition(self._topic, p) for p in sorted(partitions)]
            consumer.assign(assigned)
            offsets = await consumer.offsets_for_times(
                {tp: max(0, int(from_time * 1000)) for tp in assigned}
            )
            for tp in assigned:
                found = offsets.get(tp)
                if found is None:
                    await consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, found.offset)
            self._ends = await consumer.end_offsets(assigned)
            # Resolved now, so beats sent from here on are seen whatever "latest" means.
            self._positions = {tp: await consumer.position(tp) for tp in assigned}
        except BaseException:
            await self.stop()
            raise
        self._check_caught_up()

    def _check_caught_up(self) -> None:
        if all(self._positions.get(tp, 0) >= end for tp, end in self._ends.items()):
            self.caught_up.set()

    async def _refresh_positions(self, consumer: AIOKafkaConsumer) -> None:
        """Positions past gaps in the offsets too (a fetch can skip offsets without records)."""
        for tp in self._ends:
            with contextlib.suppress(Exception):
                self._positions[tp] = max(self._positions.get(tp, 0), await consumer.position(tp))

    async def run(self) -> None:
        """Read until cancelled."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("start() the feed first")
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=500, max_records=500)
            except KafkaError as exc:
                log.warning("heartbeat feed: %s; retrying", exc)
                await asyncio.sleep(1.0)
                continue
            for tp, records in batches.items():
                for message in records:
                    self._positions[tp] = message.offset + 1
                    try:
                        beat = decode(Heartbeat, message.value)
                    except MessageError as exc:
                        log.debug("heartbeat %s@%d skipped: %s", tp, message.offset, exc)
                        continue
                    self._board.record(beat)
                    self.read += 1
            if not self.caught_up.is_set():
                await self._refresh_positions(consumer)
                self._check_caught_up()

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()
