"""A kafka-python consumer closes without its IO thread reading from a socket being closed.

The race (``gpuyield.streams.kafka_python_close``) needs the broker's answer to
land just as the consumer closes and the IO thread to lose the CPU between
select() and recv(): a loaded machine's luck. Here that interleaving is forced:
the IO thread's next read after the last poll is held until the closing thread
has taken the connections down (or a second has passed). With a plain
``consumer.close()`` in place of ``close_consumer`` this test fails in most
runs (13 of 15 here): the IO thread logs "Error receiving network data" with
an AttributeError traceback, as ``gpuyield alerts`` did under load.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.net import transport

from gpuyield.streams.kafka_python_close import close_consumer
from gpuyield.streams.topics import TopicSpec


class HeldRead:
    """Holds the IO thread's first read after ``arm()`` until ``release()``."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.reading = threading.Event()
        self.released = threading.Event()

    def arm(self) -> None:
        self.armed.set()

    def release(self) -> None:
        self.released.set()

    def wrap(self, recv: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def held(transport_: Any) -> Any:
            if self.armed.is_set() and threading.current_thread().name.startswith("kafka-io"):
                self.armed.clear()
                self.reading.set()
                self.released.wait(1.0)  # preempted while the other thread closes
            return recv(transport_)

        return held


@pytest.fixture
def held_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldRead]:
    held = HeldRead()
    recv = transport.KafkaTCPTransport._sock_recv
    monkeypatch.setattr(transport.KafkaTCPTransport, "_sock_recv", held.wrap(recv))
    yield held
    held.release()


def a_consumer_with_a_fetch_in_flight(bootstrap: str, topic: str) -> Any:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=1000,  # so the answer comes well after the poll below returns
    )
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_end(partition)
    consumer.poll(timeout_ms=100)  # the topic is quiet: the broker holds the fetch
    return consumer


def closing_its_connections_once_the_answer_is_read(consumer: Any, held: HeldRead) -> None:
    """The closing thread reaches the connections just as the IO thread reads the answer."""
    close_connections = consumer._client.close

    def close(*args: Any, **kwargs: Any) -> None:
        held.reading.wait(2.0)
        close_connections(*args, **kwargs)
        held.release()

    consumer._client.close = close


def test_a_consumer_closed_as_its_fetch_is_answered_logs_no_error(
    kafka_bootstrap: str,
    fresh_topics: dict[str, TopicSpec],
    held_read: HeldRead,
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = a_consumer_with_a_fetch_in_flight(
        kafka_bootstrap, fresh_topics["gpuyield.alerts"].name
    )
    held_read.arm()
    closing_its_connections_once_the_answer_is_read(consumer, held_read)
    with caplog.at_level(logging.ERROR, logger="kafka"):
        close_consumer(consumer)
        held_read.release()
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
