"""Stalled agents: input waiting and a committed offset that stands still, not a timer."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from gpuyield.cli import main
from gpuyield.status_command import render_agents
from gpuyield.streams.agent_stalls import StallWatch, agent_topics
from gpuyield.streams.consumer_lag import GroupPositions, Position
from gpuyield.streams.live_view_store import LiveViewWriter, agents_key, read_agents
from gpuyield.streams.topics import TopicSpec

BEATS = ("gpuyield.heartbeats", 3)
KUBE = ("gpuyield.kube-events", 0)
AGENTS = agent_topics()


def test_an_agent_whose_offset_stands_still_with_input_waiting_is_stalled() -> None:
    watch = StallWatch(stall_s=60)
    for now in (0.0, 30.0, 61.0):  # a crash-looping progress agent: busy, but stuck at 1200
        positions = {BEATS: Position(1200, 1450), KUBE: Position(80 + int(now), 90 + int(now))}
        watch.observe(now, positions)
    report = {h.agent: h for h in watch.report(61.0, positions, AGENTS)}
    assert report["progress"].state == "stalled"
    assert report["progress"].waiting == 250
    assert report["progress"].stalled_for_s == 61.0
    assert report["progress"].stalled_partitions == ("gpuyield.heartbeats[3]@1200",)
    # the decider lags by 10 but moves on: not stalled
    assert report["decider"].state == "ok"
    assert report["decider"].waiting == 10


def test_a_quiet_agent_is_idle_not_stalled_and_its_clock_starts_when_input_arrives() -> None:
    watch = StallWatch(stall_s=60)
    watch.observe(0.0, {BEATS: Position(500, 500)})
    watch.observe(3600.0, {BEATS: Position(500, 500)})  # an hour with nothing to do
    watch.observe(3610.0, {BEATS: Position(500, 510)})
    positions = {BEATS: Position(500, 510)}
    watch.observe(3650.0, positions)
    assert watch.report(3650.0, positions, AGENTS)[0].state == "ok"
    watch.observe(3671.0, positions)
    assert watch.report(3671.0, positions, AGENTS)[0].state == "stalled"


def test_a_group_that_never_committed_counts_from_the_start_of_the_partition() -> None:
    watch = StallWatch(stall_s=5)
    positions = {KUBE: Position(None, 40)}
    watch.observe(0.0, positions)
    watch.observe(6.0, positions)
    decider = watch.report(6.0, positions, AGENTS)[1]
    assert (decider.state, decider.waiting, decider.stalled_partitions) == (
        "stalled",
        40,
        ("gpuyield.kube-events[0]@0",),
    )


@given(
    st.lists(
        st.tuples(st.floats(0, 30), st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=30
    )
)
def test_an_agent_that_moves_within_the_bound_is_never_stalled(
    steps: list[tuple[float, int, int]],
) -> None:
    """Whatever the input, a committed offset that moves at least every 30 s (< 60 s) is ok."""
    watch = StallWatch(stall_s=60)
    now, committed, end = 0.0, 0, 0
    for gap, processed, arrived in steps:
        now += gap
        end += arrived
        committed = min(end, committed + max(processed, 1))  # moves, or has caught up
        positions = {BEATS: Position(committed, end)}
        watch.observe(now, positions)
        assert watch.report(now, positions, AGENTS)[0].state == "ok"


def test_a_bound_must_be_positive() -> None:
    with pytest.raises(ValueError):
        StallWatch(0)


async def test_the_positions_are_the_groups_committed_offsets_and_the_topics_end(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec], topic_prefix: str
) -> None:
    """A real group processes 3 messages and commits, then stops while 2 more arrive."""
    kube = fresh_topics["gpuyield.kube-events"].name
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_batch_size=1)
    await producer.start()
    group = f"{topic_prefix}app"
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    positions = GroupPositions({"bootstrap_servers": kafka_bootstrap}, group)
    try:
        for i in range(3):
            await producer.send_and_wait(kube, b"{}", key=f"k{i}".encode())
        tp = TopicPartition(kube, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        processed = 0
        while processed < 3:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            processed += len(batch.get(tp, []))
        await consumer.commit({tp: 3})
        for i in range(2):
            await producer.send_and_wait(kube, b"{}", key=f"late{i}".encode())
        agents = agent_topics(topic_prefix)
        read = await positions.read([t for ts in agents.values() for t in ts])
        assert read[(kube, 0)] == Position(3, 5)
        assert read[(topic_prefix + "gpuyield.ticks", 0)] == Position(None, 0)
        assert len([k for k in read if k[0] == topic_prefix + "gpuyield.heartbeats"]) == 8
        watch = StallWatch(stall_s=10)
        watch.observe(0.0, read)
        watch.observe(11.0, read)
        decider = {h.agent: h for h in watch.report(11.0, read, agents)}["decider"]
        assert decider.state == "stalled"
        assert decider.stalled_partitions == (f"{kube}[0]@3",)
    finally:
        await positions.close()
        await consumer.stop()
        await producer.stop()


async def test_the_status_table_shows_a_stalled_agent_from_redis(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    cluster = redis_prefix.replace(":", "-").strip("-").lower()[:40]
    watch = StallWatch(stall_s=60)
    positions = {BEATS: Position(1200, 1450)}
    watch.observe(0.0, positions)
    watch.observe(90.0, positions)
    writer = LiveViewWriter(redis_url, cluster)
    try:
        await writer.publish_agents(watch.report(90.0, positions, AGENTS), 90.0)
    finally:
        await writer.close()
    stored = read_agents(redis_url, cluster)
    redis.Redis.from_url(redis_url).delete(agents_key(cluster))  # outside redis_prefix
    assert stored is not None
    assert [a["state"] for a in stored["agents"]] == ["stalled", "ok"]
    out = io.StringIO()
    render_agents(Console(file=out, width=200), stored["agents"], 5.0)
    row = next(line for line in out.getvalue().splitlines() if "progress" in line)
    assert "stalled" in row
    assert "250" in row
    assert "90 s" in row
    assert "gpuyield.heartbeats[3]@1200" in row


async def test_status_shows_a_stalled_decider_even_when_its_view_has_expired(
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stalled decider stops refreshing the view; the agents' report still says why."""
    cluster = "c-" + redis_prefix.split(":")[1]
    watch = StallWatch(stall_s=60)
    positions = {KUBE: Position(80, 95)}
    watch.observe(0.0, positions)
    watch.observe(400.0, positions)
    writer = LiveViewWriter(redis_url, cluster)
    try:
        await writer.publish_agents(watch.report(400.0, positions, AGENTS), time.time())
    finally:
        await writer.close()
    for name, value in {
        "GPUYIELD_REDIS_URL": redis_url,
        "GPUYIELD_CLUSTER_ID": cluster,
        "GPUYIELD_STATE_DIR": str(tmp_path),
        "COLUMNS": "200",
    }.items():
        monkeypatch.setenv(name, value)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(["status"])
    finally:
        redis.Redis.from_url(redis_url).delete(agents_key(cluster))
    assert exit_info.value.code != 0
    out = capsys.readouterr()
    decider = next(line for line in out.out.splitlines() if "decider" in line)
    assert "stalled" in decider
    assert "gpuyield.kube-events[0]@80" in decider
    assert "no live view" in out.err
