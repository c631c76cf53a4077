"""faust's consumer without four asyncio tasks per message.

faust hands each fetched message to its topic's stream as
``await self.wait_first(callback(message), self.suspend_flow.wait())``, so a
rebalance (``suspend_flow``) or a stop can interrupt a delivery that waits on
a full stream buffer. mode's ``wait_first`` wraps the callback, that wait and
the service's stopped and crashed events in four tasks and an
``asyncio.wait``, then cancels three: about 24 µs of CPU per message on the
bench machine, for a callback that nearly always finishes at once (the
buffer has room). That was an eighth of a worker's CPU per heartbeat.

``DeliveringConsumer`` starts the callback inline instead, when nothing is
suspended, stopped or crashed: a callback that completes without waiting
costs no task at all. One that must wait (a full buffer, the callback lock
held by a rebalance) is raced against a suspension exactly as before, the
coroutine driven on from where it stopped. While the flow is suspended, or
the service stopping, delivery goes through ``wait_first`` as in faust.
The rest of the drain loop is faust 0.15's ``Consumer._drain_messages``.

The same consumer reads again what faust dropped. A partition the group
never committed is read from its beginning after each rebalance
(``streams/rewind_uncommitted.py``): faust's seek to the committed offsets
leaves such a partition past the records it dropped while the rebalance was
under way. And every few commit intervals, a partition read past records
that nothing will process is sought back (``streams/stranded_records.py``).
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Coroutine, Generator, Iterable, Mapping, Set
from typing import Any, cast

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message
from mode import ServiceT

from gpuyield.streams.rewind_uncommitted import rewind_never_committed
from gpuyield.streams.stranded_records import MAX_SEEKS_BACK, Seen, StrandedWatch


@types.coroutine
def _drive_on(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """Drive ``coro`` on from its first suspension (it yielded ``yielded``), as its task would.

    Whatever the enclosing task sends or throws in goes to ``coro``, so a
    cancellation reaches the wait inside the callback as it would in faust.
    """
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(sent)
        except StopIteration as stop:
            return stop.value


async def _finish(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """``_drive_on`` as a native coroutine, which ``wait_first`` accepts."""
    return await _drive_on(coro, yielded)


class DeliveringConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer, handing each message to its stream without a task."""

    async def _deliver(self, message: Message) -> None:
        callback = cast(Any, self).callback
        interrupted = (
            self.suspend_flow.is_set()
            or cast(Any, self)._stopped.is_set()
            or cast(Any, self)._crashed.is_set()
        )
        if interrupted:
            await self.wait_first(callback(message), self.suspend_flow.wait())
            return
        coro = callback(message)
        try:
            yielded = coro.send(None)
        except StopIteration:
            return  # delivered without waiting: the common case
        await self.wait_first(_finish(coro, yielded), self.suspend_flow.wait())

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stranded: StrandedWatch[TP] = StrandedWatch()
        """Partitions read past records nothing will process (``streams/stranded_records.py``)."""
        self._next_stranded_check = 0.0

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        thread = cast(Any, self)._thread
        if self.app.conf.consumer_auto_offset_reset == "earliest":
            rewound = rewind_never_committed(
                thread._ensure_consumer(), committed, self._is_changelog_tp
            )
            if rewound:
                self.log.info(
                    "Never committed, read from the beginning: %s",
                    ", ".join(f"{tp.topic}[{tp.partition}]" for tp in rewound),
                )
        return committed

    async def on_partitions_revoked(self, revoked: Set[TP]) -> None:
        self.stranded.forget(revoked)
        await super().on_partitions_revoked(revoked)

    def _positions(self, tps: Iterable[TP]) -> dict[TP, int]:
        """aiokafka's positions (the next offset it hands over), where it has one.

        Read in place: only the fetch loop, between its batches, or a seek
        moves them.
        """
        kafka = cast(Any, self)._thread._consumer
        assignment = kafka._subscription.subscription.assignment if kafka is not None else None
        if assignment is None:
            return {}
        positions: dict[TP, int] = {}
        for tp in tps:
            try:
                state = assignment.state_value(tp)
            except (KeyError, AssertionError):
                continue
            if state is not None and state.has_valid_position:
                positions[tp] = state.position
        return positions

    def _busy(self) -> set[TP]:
        """Partitions with an event not yet acknowledged or waiting in an agent's buffer.

        By partition, not by buffer: one agent reads several topics (the
        decider's ticks keep its buffer busy while a kube-events partition is
        stranded behind them).
        """
        busy = {message.tp for message in cast(Any, self)._unacked_messages}
        for channel in cast(Any, self.app.topics)._topics:
            queue = getattr(channel, "_queue", None)  # made on first use: none yet is empty
            for event in list(getattr(queue, "_queue", ())):  # asyncio.Queue's deque
                message = getattr(event, "message", None)
                if message is not None:
                    busy.add(message.tp)
        return busy

    async def _seek_back_stranded(self) -> None:
        """Seek back each flowing partition read past records that nothing will process."""
        now = time.monotonic()
        if now < self._next_stranded_check:
            return
        self._next_stranded_check = now + max(5.0, 2 * float(self.commit_interval))
        if not self.flow_active or cast(Any, self.app).rebalancing:
            self.stranded.check({})  # a rebalance seeks everything anyway: start over
            return
        acks = self.app.topics.acks_enabled_for  # only acknowledged input commits as it goes
        flowing = [
            tp
            for tp in self._get_active_partitions()
            if acks(tp.topic) and not self._is_changelog_tp(tp)
        ]
        busy = self._busy()
        committed = cast(Any, self)._committed_offset
        seen = {
            tp: Seen(position=position, committed=committed.get(tp) or 0, idle=tp not in busy)
            for tp, position in self._positions(flowing).items()
        }
        verdict = self.stranded.check(seen)
        for tp, offset in verdict.seek_back.items():
            self.log.warning(
                "%s[%s]: position %s but committed %s, with nothing in flight: "
                "records no agent processed, reading them again",
                tp.topic,
                tp.partition,
                seen[tp].position,
                offset,
            )
            await self.seek(tp, offset)
        for tp in verdict.given_up:
            self.log.error(
                "%s[%s]: sought back to %s %s times, still not processed; left to the stall watch",
                tp.topic,
                tp.partition,
                seen[tp].committed,
                MAX_SEEKS_BACK,
            )

    async def _drain_messages(self, fetcher: ServiceT) -> None:  # pragma: no cover
        # faust 0.15's loop, delivery aside (see the module's docstring).
        this = cast(Any, self)
        getmany = self.getmany
        consumer_should_stop = this._stopped.is_set
        fetcher_should_stop = cast(Any, fetcher)._stopped.is_set
        get_read_offset = this._read_offset.__getitem__
        set_read_offset = this._read_offset.__setitem__
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        commit_every = this._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for
        yield_every = 100
        num_since_yield = 0
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                ait = getmany(timeout=1.0)
                # getmany can be called in a loop that never yields to the event loop
                await self.sleep(0)
                if not self.should_stop:
                    async for tp, message in ait:
                        num_since_yield += 1
                        if num_since_yield > yield_every:
                            await asyncio.sleep(0)
                            num_since_yield = 0
                        offset = message.offset
                        r_offset = get_read_offset(tp)
                        if r_offset is None or offset >= r_offset:
                            gap = offset - (r_offset or 0)
                            if gap > 1 and r_offset and acks_enabled_for(message.topic):
                                await this._add_gap(tp, r_offset + 1, offset)
                            if commit_every is not None and this._n_acked >= commit_every:
                                this._n_acked = 0
                                await self.commit()
                            await self._deliver(message)
                            set_read_offset(tp, offset)
                        else:
                            self.log.dev(
                                "DROPPED MESSAGE ROFF %r: k=%r v=%r",
                                offset,
                                message.key,
                                message.value,
                            )
                    await self._seek_back_stranded()
                    unset_flag(CONSUMER_FETCHING)
        except this.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)


def deliver_without_tasks(app: Any) -> None:
    """Make ``app``'s consumer a ``DeliveringConsumer`` (call before the worker starts).

    Only faust's aiokafka transport (the ``kafka://`` brokers gpuyield uses) is changed.
    """
    transport = app.transport
    if isinstance(transport, faust_aiokafka.Transport):
        cast(Any, transport).Consumer = DeliveringConsumer  # this app's transport only
