"""Handing fetched messages to their streams without a task per message (streams/fast_delivery.py).

faust's consumer callback puts a message on its stream's buffer: at once when
the buffer has room, else it waits for room, and a rebalance (the flow
suspended) must be able to interrupt that wait. These tests drive
``DeliveringConsumer._deliver`` with such a callback over a real bounded queue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, cast

import faust
from faust.types import Message

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.worker.app import WorkerOptions, build_app
from gpuyield.streams.fast_delivery import DeliveringConsumer, deliver_without_tasks


def heartbeat_message(offset: int) -> Message:
    return Message(
        "gpuyield.heartbeats",
        3,
        offset,
        1_790_000_000.0 + offset,
        0,
        [],
        b"research/sweep-0",
        b'{"v":1,"job":"research/sweep-0"}',
        None,
    )


class Buffer:
    """A stream's bounded buffer, and the callback that fills it (as faust's conductor does)."""

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue(maxsize=size)
        self.delivered_in: list[asyncio.Task[Any] | None] = []

    async def callback(self, message: Message) -> None:
        self.delivered_in.append(asyncio.current_task())
        await self.queue.put(message)


@contextlib.contextmanager
def consumer_for(buffer: Buffer) -> Iterator[DeliveringConsumer]:
    """A consumer that is never started (nothing is fetched): its thread's loop is closed after."""
    app = faust.App("fast-delivery-test", broker="kafka://127.0.0.1:9", store="memory://")
    deliver_without_tasks(app)
    consumer = app.transport.Consumer(
        app.transport,
        callback=buffer.callback,
        on_partitions_revoked=app._on_partitions_revoked,
        on_partitions_assigned=app._on_partitions_assigned,
        loop=asyncio.get_running_loop(),
    )
    assert isinstance(consumer, DeliveringConsumer)
    try:
        yield consumer
    finally:
        cast(Any, consumer)._thread.thread_loop.close()


def test_the_worker_app_consumes_with_the_delivering_consumer() -> None:
    app = build_app(
        WorkerOptions(app_kwargs={"id": "fast-delivery", "broker": ["kafka://127.0.0.1:9"]}),
        ControllerConfig(),
    )
    assert app.transport.Consumer is DeliveringConsumer


async def test_a_message_the_buffer_has_room_for_is_delivered_inline_in_order() -> None:
    buffer = Buffer(size=10)
    with consumer_for(buffer) as consumer:
        for offset in range(3):
            await consumer._deliver(heartbeat_message(offset))
        assert [buffer.queue.get_nowait().offset for _ in range(3)] == [0, 1, 2]
        # Run by the drain loop's own task: no task was made for them.
        assert buffer.delivered_in == [asyncio.current_task()] * 3


async def test_a_delivery_that_waits_for_room_completes_when_the_stream_takes_a_message() -> None:
    buffer = Buffer(size=1)
    with consumer_for(buffer) as consumer:
        await consumer._deliver(heartbeat_message(0))
        waiting = asyncio.ensure_future(consumer._deliver(heartbeat_message(1)))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the buffer is full
        assert buffer.queue.get_nowait().offset == 0  # the stream reads one
        await asyncio.wait_for(waiting, 1.0)
        assert buffer.queue.get_nowait().offset == 1


async def test_a_rebalance_interrupts_a_delivery_waiting_for_room_and_nothing_is_put() -> None:
    buffer = Buffer(size=1)
    with consumer_for(buffer) as consumer:
        await consumer._deliver(heartbeat_message(0))
        waiting = asyncio.ensure_future(consumer._deliver(heartbeat_message(1)))
        await asyncio.sleep(0.01)
        consumer.stop_flow()  # what faust does when partitions are revoked
        await asyncio.wait_for(waiting, 1.0)
        assert buffer.queue.get_nowait().offset == 0
        await asyncio.sleep(0.01)
        assert buffer.queue.empty()  # the interrupted put was cancelled, not completed later
