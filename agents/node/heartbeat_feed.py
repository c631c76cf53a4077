"""Feeds the heartbeats of the jobs this node is yielding into the progress board.

The agent needs heartbeats only while it yields a job: the checkpoint a
trainer reports after the signal is how it knows the job may go, and the
job's last checkpoint before the signal is the baseline and the lost-work
estimate. So it reads nothing while idle, and during a yield only the one
partition the job's heartbeats land in (the topic is keyed by job; see
``streams.partitioning``), not every partition of the cluster's heartbeats.

``follow(job, since)`` assigns that partition (no consumer group: no commits,
no rebalances, it is a view), seeks it to ``since`` minus the lookback, and
returns once the partition is read up to where it ended at the call, so a
baseline taken next is current; after a crash, ``since`` is the yield's
receipt, so the emergency checkpoint a trainer reported while the agent was
down is seen. ``unfollow`` drops the partition when no followed job is left
on it. Brokers that cannot look offsets up by time (Tansu answers with the
beginning) make it read more, never less; the board's fold is indifferent
to old or repeated beats, and to other jobs' beats on the same partition.

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

from gpuyield.agents.node.metrics import NodeMetrics
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.schemas.decoding import MessageError, decode
from gpuyield.schemas.messages import Heartbeat
from gpuyield.streams.metrics import lag
from gpuyield.streams.partitioning import partition_for

log = logging.getLogger(__name__)


class HeartbeatFeed:
    """A group-less consumer of the heartbeat partitions of the jobs being yielded here.

    Assignment changes are made by ``run``'s loop only (between fetches);
    ``follow`` and ``unfollow`` record what is wanted and wake it. ``read``
    counts the heartbeats read, for the benchmark.
    """

    def __init__(
        self,
        board: ProgressBoard,
        *,
        topic: str,
        kafka: dict[str, Any],
        lookback_s: float = 600.0,
        catch_up_timeout_s: float = 30.0,
        metrics: NodeMetrics | None = None,
    ) -> None:
        self._board = board
        self._metrics = metrics
        self._topic = topic
        self._kafka = kafka
        self._lookback_s = lookback_s
        self._catch_up_timeout_s = catch_up_timeout_s
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: tuple[int, ...] = ()
        self._jobs: dict[str, int] = {}  # followed job -> its partition
        self._followers: dict[int, int] = {}  # partition -> followed jobs on it
        self._seek_to: dict[int, float] = {}  # partitions to (re)start from a time
        self._start_time: dict[int, float] = {}  # the time each assigned partition was read from
        self._ends: dict[TopicPartition, int] = {}  # where each partition ended at its start
        self._positions: dict[TopicPartition, int] = {}
        self._caught_up: dict[int, asyncio.Event] = {}
        self._changed = asyncio.Event()
        self.read = 0

    async def start(self, partitions: Iterable[int]) -> None:
        """Connect; ``partitions`` are the heartbeat topic's partition ids."""
        consumer = AIOKafkaConsumer(
            **self._kafka, group_id=None, enable_auto_commit=False, auto_offset_reset="latest"
        )
        await consumer.start()
        self._consumer = consumer
        self._partitions = tuple(sorted(partitions))

    @property
    def assigned(self) -> frozenset[int]:
        """The partitions read now (none while no yield runs)."""
        return frozenset(self._start_time)

    async def follow(self, job: str, since: float) -> None:
        """Read ``job``'s heartbeats from ``since`` minus the lookback, caught up on return.

        Gives up waiting after the catch-up timeout (with a warning): the
        yield then goes on with what the board knows, as before.
        """
        partition = partition_for(job.encode(), self._partitions)
        if job not in self._jobs:
            self._jobs[job] = partition
            self._followers[partition] = self._followers.get(partition, 0) + 1
        start = since - self._lookback_s
        if partition not in self._start_time or start < self._start_time[partition]:
            self._seek_to[partition] = min(start, self._seek_to.get(partition, start))
            self._caught_up.setdefault(partition, asyncio.Event()).clear()
            self._changed.set()
        event = self._caught_up.setdefault(partition, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), self._catch_up_timeout_s)
        except TimeoutError:
            log.warning(
                "heartbeats of %s not caught up after %.0f s; going on",
                job,
                self._catch_up_timeout_s,
            )

    def unfollow(self, job: str) -> None:
        """Stop reading ``job``'s partition unless another followed job is on it."""
        partition = self._jobs.pop(job, None)
        if partition is None:
            return
        self._followers[partition] -= 1
        if self._followers[partition] == 0:
            del self._followers[partition]
            self._changed.set()

    async def _apply(self, consumer: AIOKafkaConsumer) -> None:
        """Make the assignment what the followed jobs need; seek the new partitions."""
        self._changed.clear()
        wanted = set(self._followers)
        for partition in list(self._start_time):
            if partition not in wanted:
                del self._start_time[partition]
                tp = TopicPartition(self._topic, partition)
                if self._metrics is not None:
                    self._metrics.released(self._topic, partition)
                self._ends.pop(tp, None)
                self._positions.pop(tp, None)
                self._caught_up.pop(partition, None)
        kept = {p: self._positions[TopicPartition(self._topic, p)] for p in self._start_time}
        seeks = {p: t for p, t in self._seek_to.items() if p in wanted}
        for partition in [p for p in self._seek_to if p not in wanted]:
            del self._seek_to[partition]
        consumer.assign([TopicPartition(self._topic, p) for p in sorted(wanted)])
        for partition, position in kept.items():
            if partition not in seeks:
                consumer.seek(TopicPartition(self._topic, partition), position)
        if not seeks:
            return
        tps = {p: TopicPartition(self._topic, p) for p in seeks}
        offsets = await consumer.offsets_for_times(
            {tps[p]: max(0, int(t * 1000)) for p, t in seeks.items()}
        )
        ends = await consumer.end_offsets(list(tps.values()))
        for partition, tp in tps.items():
            found = offsets.get(tp)
            if found is None:
                await consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, found.offset)
            self._start_time[partition] = seeks[partition]
            self._ends[tp] = ends[tp]
            # Resolved now, so beats sent from here on are seen whatever "latest" means.
            self._positions[tp] = await consumer.position(tp)
            if self._seek_to.get(partition) == seeks[partition]:
                del self._seek_to[partition]  # done, unless a follow asked for earlier meanwhile
        self._check_caught_up()

    def _check_caught_up(self) -> None:
        for tp, end in self._ends.items():
            if self._positions.get(tp, 0) >= end:
                self._caught_up.setdefault(tp.partition, asyncio.Event()).set()

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
                if self._changed.is_set():
                    await self._apply(consumer)
                if not self._start_time:
                    await self._changed.wait()  # idle: nothing to read until a yield starts
                    continue
                batches = await consumer.getmany(timeout_ms=200, max_records=500)
            except KafkaError as exc:
                log.warning("heartbeat feed: %s; retrying", exc)
                self._changed.set()  # assign and seek again
                await asyncio.sleep(1.0)
                continue
            for tp, records in batches.items():
                if tp not in self._ends:
                    continue  # fetched before the partition was dropped
                for message in records:
                    self._positions[tp] = message.offset + 1
                    self.read += 1
                    try:
                        beat = decode(Heartbeat, message.value)
                    except MessageError as exc:
                        log.debug("heartbeat %s@%d skipped: %s", tp, message.offset, exc)
                        continue
                    self._board.record(beat)
            self._report_lag(consumer)
            if any(not self._caught_up[p].is_set() for p in self._start_time):
                await self._refresh_positions(consumer)
                self._check_caught_up()

    def _report_lag(self, consumer: AIOKafkaConsumer) -> None:
        if self._metrics is None:
            return
        for tp in self._ends:
            self._metrics.behind(
                tp.topic, tp.partition, lag(consumer.highwater(tp), self._positions.get(tp, 0))
            )

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()
