"""Heartbeats never block a step: a bounded buffer, a background thread, counted drops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch import nn

from gpuyield.agents.trainer import (
    GracefulTrainer,
    HeartbeatPublisher,
    JsonLinesSink,
)
from gpuyield.schemas.decoding import decode
from gpuyield.schemas.messages import Heartbeat


def beat(step: int) -> Heartbeat:
    return Heartbeat(job="ns/j", pod="p", step=step, progress=0.0, sent_at=float(step))


class BlockingSink:
    """Blocks in send() until released: a broker that never answers."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.sent: list[int] = []

    def send(self, heartbeat: Heartbeat) -> None:
        self.entered.set()
        self.release.wait()
        self.sent.append(heartbeat.step)


class FailingSink:
    def send(self, heartbeat: Heartbeat) -> None:
        raise ConnectionError("broker down")


@pytest.fixture
def blocking() -> Iterator[BlockingSink]:
    sink = BlockingSink()
    yield sink
    sink.release.set()  # let the abandoned daemon thread end


def test_a_sink_blocked_forever_does_not_stop_training(
    tmp_path: Path, blocking: BlockingSink
) -> None:
    session = GracefulTrainer(
        tmp_path,
        job="ns/j",
        heartbeat=blocking,
        heartbeat_every_steps=1,
        heartbeat_buffer=4,
        flush_timeout_s=0.1,
    )
    session.resume(model=nn.Linear(2, 1))
    for step in range(1, 101):
        assert session.step_done(step) is False

    assert session.finish() == 0
    stats = session.heartbeat_stats
    assert stats.published == 101  # one at resume, one per step
    assert stats.sent == 0
    assert stats.dropped == 100  # all but the one stuck in the sink
    assert blocking.entered.is_set()


def test_a_full_buffer_drops_the_oldest(blocking: BlockingSink) -> None:
    publisher = HeartbeatPublisher(blocking, buffer=3)
    publisher.publish(beat(0))
    assert blocking.entered.wait(10)  # heartbeat 0 is in the sink, the buffer is empty
    for step in range(1, 10):
        publisher.publish(beat(step))

    assert publisher.stats.dropped == 6
    blocking.release.set()
    stats = publisher.close()
    assert blocking.sent == [0, 7, 8, 9]
    assert (stats.published, stats.sent, stats.dropped, stats.failed) == (10, 4, 6, 0)


def test_a_run_of_drops_is_logged_once(
    blocking: BlockingSink, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = HeartbeatPublisher(blocking, buffer=2)
    publisher.publish(beat(0))
    assert blocking.entered.wait(10)
    with caplog.at_level(logging.WARNING, "gpuyield.agents.trainer.heartbeats"):
        for step in range(1, 30):
            publisher.publish(beat(step))
    blocking.release.set()
    publisher.close()

    full = [r for r in caplog.records if "buffer full" in r.getMessage()]
    assert len(full) == 1
    assert publisher.stats.dropped == 27


def test_a_failing_sink_is_counted_and_training_goes_on(tmp_path: Path) -> None:
    with GracefulTrainer(
        tmp_path, job="ns/j", heartbeat=FailingSink(), heartbeat_every_steps=1
    ) as session:
        session.resume(model=nn.Linear(2, 1))
        for step in range(1, 11):
            session.step_done(step)
        assert session.finish() == 0
    assert session.heartbeat_stats.failed == 11


def test_json_lines_sink_writes_one_heartbeat_per_line(tmp_path: Path) -> None:
    path = tmp_path / "hb" / "beats.jsonl"
    publisher = HeartbeatPublisher(JsonLinesSink(path))
    for step in range(3):
        publisher.publish(beat(step))
    publisher.close()

    assert [decode(Heartbeat, line).step for line in path.read_bytes().splitlines()] == [0, 1, 2]
