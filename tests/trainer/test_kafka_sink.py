"""Heartbeats land on the heartbeats topic of a real Kafka-protocol broker, keyed by job.

And a broker that is not there, or goes away, costs training nothing: the
sink fails fast while it is gone, leaves no socket open (the suite turns a
ResourceWarning into an error), and delivers again once it is back.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from torch import nn

from gpuyield.agents.trainer import GracefulTrainer, HeartbeatPublisher, KafkaHeartbeatSink
from gpuyield.agents.trainer.kafka_sink import SinkUnavailable, bootstrap_addresses
from gpuyield.schemas.decoding import decode
from gpuyield.schemas.messages import Heartbeat
from gpuyield.streams.embedded import EmbeddedBroker, free_port
from gpuyield.streams.topic_reader import read_topics
from gpuyield.streams.topics import TopicSpec


def beat(job: str, step: int) -> Heartbeat:
    return Heartbeat(
        job=job, pod=f"{job.split('/')[1]}-0", step=step, progress=step / 100, sent_at=1.7e9 + step
    )


def on_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, Heartbeat]]:
    """Every heartbeat on ``topic``, partition by partition, in offset order."""
    return [
        (m.key, decode(Heartbeat, m.value))
        for m in read_topics({"bootstrap_servers": bootstrap}, [topic], idle_s=0.5, timeout_s=30)
    ]


def open_sockets() -> int:
    """This process's open sockets (a socket kafka-python failed to close stays counted)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except FileNotFoundError:
            continue  # the descriptor listdir itself used
    return count


def test_heartbeats_land_on_the_topic_keyed_by_job(
    tmp_path: Path, kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    spec = fresh_topics["gpuyield.heartbeats"]
    sink = KafkaHeartbeatSink(kafka_bootstrap, topic=spec.name)
    with GracefulTrainer(
        tmp_path, job="research/tiny", pod="tiny-0", heartbeat=sink, heartbeat_every_steps=1
    ) as session:
        session.resume(model=nn.Linear(2, 1))
        for step in range(1, 6):
            session.step_done(step)
        assert session.finish() == 0
    assert session.heartbeat_stats.sent == 6

    records = on_topic(kafka_bootstrap, spec.name)
    assert {key for key, _ in records} == {b"research/tiny"}
    assert [hb.step for _, hb in records] == [0, 1, 2, 3, 4, 5]  # in order on its partition
    assert {hb.pod for _, hb in records} == {"tiny-0"}


def test_each_jobs_heartbeats_reach_its_partition_in_order(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    spec = fresh_topics["gpuyield.heartbeats"]
    jobs = ["research/a", "research/b", "shared/c"]
    publisher = HeartbeatPublisher(KafkaHeartbeatSink(kafka_bootstrap, topic=spec.name), buffer=100)
    for step in range(20):
        for job in jobs:
            publisher.publish(beat(job, step))
    stats = publisher.close(timeout_s=60)
    assert (stats.sent, stats.dropped, stats.failed) == (60, 0, 0)

    records = on_topic(kafka_bootstrap, spec.name)
    for job in jobs:
        assert [hb.step for key, hb in records if key == job.encode()] == list(range(20))


def test_a_closed_port_fails_fast_and_leaves_no_socket_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = open_sockets()
    sink = KafkaHeartbeatSink(f"127.0.0.1:{free_port()}", retry_after_s=3600)
    with caplog.at_level(logging.WARNING, "gpuyield.agents.trainer.kafka_sink"):
        with pytest.raises(SinkUnavailable, match="is unreachable"):
            sink.send(beat("research/a", 1))
        for step in range(2, 50):  # not even tried until retry_after_s has passed
            with pytest.raises(SinkUnavailable, match="was unreachable"):
                sink.send(beat("research/a", step))
    sink.close()

    assert open_sockets() == before
    unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 1  # one line per outage, not one per heartbeat


def test_training_goes_on_against_a_closed_port(tmp_path: Path) -> None:
    sink = KafkaHeartbeatSink(f"127.0.0.1:{free_port()}", retry_after_s=60.0)
    with GracefulTrainer(tmp_path, job="ns/j", heartbeat=sink, heartbeat_every_steps=1) as session:
        session.resume(model=nn.Linear(2, 1))
        for step in range(1, 21):
            assert session.step_done(step) is False
        assert session.finish() == 0

    stats = session.heartbeat_stats
    assert stats.sent == 0
    assert stats.failed + stats.dropped == stats.published == 21


@pytest.mark.slow
def test_a_stopped_broker_costs_heartbeats_not_training_and_they_resume_when_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = open_sockets()
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    port = broker.port
    sink = KafkaHeartbeatSink(broker.bootstrap, send_timeout_s=2.0, retry_after_s=0.0)
    try:
        for step in range(3):
            sink.send(beat("research/a", step))
        broker.stop()

        failures = 0
        with caplog.at_level(logging.INFO, "gpuyield.agents.trainer.kafka_sink"):
            for step in range(3, 8):
                try:
                    sink.send(beat("research/a", step))
                except Exception:
                    failures += 1
            assert failures == 5

            broker = EmbeddedBroker(port, log_path=tmp_path / "tansu-2.log").start()
            for step in range(8, 12):
                sink.send(beat("research/a", step))
        sink.close()

        # The new broker (memory storage) holds what came after it started, in order.
        assert [hb.step for _, hb in on_topic(broker.bootstrap, "gpuyield.heartbeats")] == [
            8,
            9,
            10,
            11,
        ]
        messages = [r.getMessage() for r in caplog.records]
        assert sum("unreachable (" in m for m in messages) == 1
        assert sum("reachable again" in m for m in messages) == 1
    finally:
        sink.close()
        broker.stop()
    assert open_sockets() == before


def test_a_malformed_bootstrap_server_is_named() -> None:
    with pytest.raises(ValueError, match="'kafka' is not HOST:PORT"):
        bootstrap_addresses("127.0.0.1:9092,kafka")
    assert bootstrap_addresses("[::1]:9092, b:9093") == [("::1", 9092), ("b", 9093)]
