"""The node agent reads heartbeats only for the jobs it yields, and only their partitions.

Against the real broker: heartbeats of many jobs spread over the topic's 8
partitions; the feed reads nothing until a yield follows a job, then that
job's partition only (from before the yield, caught up when ``follow``
returns), and nothing again once the yield is over. What it follows is in its consumer lag.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer

from gpuyield.agents.node.heartbeat_feed import HeartbeatFeed
from gpuyield.agents.node.metrics import NodeMetrics
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Heartbeat
from gpuyield.streams.partitioning import partition_for
from gpuyield.streams.topics import HEARTBEATS, TopicSpec

JOBS = [f"team/job-{i}" for i in range(24)]
LAG = "gpuyield_consumer_lag_messages"
BEATS_PER_JOB = 5


def beat(job: str, step: int, sent_at: float) -> Heartbeat:
    return Heartbeat(
        job=job,
        pod=f"{job.split('/')[1]}-0",
        step=step,
        progress=0.5,
        last_checkpoint_step=step - step % 100,
        last_checkpoint_at=sent_at - 30,
        sent_at=sent_at,
    )


@pytest.fixture
async def topic(kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]) -> str:
    """The heartbeat topic holding ``BEATS_PER_JOB`` beats of every job of ``JOBS``."""
    name = fresh_topics[HEARTBEATS].name
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        now = time.time()
        sends = [
            await producer.send(
                name, encode(beat(job, 100 * k + 7, now - 60 + k)), key=job.encode()
            )
            for k in range(BEATS_PER_JOB)
            for job in JOBS
        ]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
    return name


@pytest.fixture
async def feed(
    kafka_bootstrap: str, topic: str
) -> AsyncIterator[tuple[HeartbeatFeed, ProgressBoard]]:
    board = ProgressBoard()
    feed = HeartbeatFeed(
        board, topic=topic, kafka={"bootstrap_servers": kafka_bootstrap}, catch_up_timeout_s=20
    )
    await feed.start(range(8))
    task = asyncio.create_task(feed.run())
    try:
        yield feed, board
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await feed.stop()


def on_partition(partition: int) -> list[str]:
    return [job for job in JOBS if partition_for(job.encode(), range(8)) == partition]


async def test_an_idle_agent_reads_no_heartbeat(feed: tuple[HeartbeatFeed, ProgressBoard]) -> None:
    reader, board = feed
    await asyncio.sleep(0.5)
    assert reader.read == 0
    assert reader.assigned == frozenset()
    assert len(board) == 0


async def test_following_a_job_reads_its_partition_only_and_is_caught_up_on_return(
    feed: tuple[HeartbeatFeed, ProgressBoard],
) -> None:
    reader, board = feed
    job = JOBS[0]
    partition = partition_for(job.encode(), range(8))
    await reader.follow(job, since=time.time())
    seen = board.get(job)
    assert seen is not None
    assert seen.step == 100 * (BEATS_PER_JOB - 1) + 7  # the newest beat, read before return
    assert reader.assigned == {partition}
    neighbours = on_partition(partition)
    assert reader.read == BEATS_PER_JOB * len(neighbours)
    assert {j for j in JOBS if board.get(j) is not None} == set(neighbours)


async def test_the_partition_is_dropped_when_the_last_yield_on_it_ends(
    feed: tuple[HeartbeatFeed, ProgressBoard],
) -> None:
    reader, _ = feed
    partition = max(range(8), key=lambda p: len(on_partition(p)))
    first, second = on_partition(partition)[:2]
    await reader.follow(first, since=time.time())
    await reader.follow(second, since=time.time())
    read = reader.read
    reader.unfollow(first)
    await asyncio.sleep(0.3)
    assert reader.assigned == {partition}  # the second yield still needs it
    reader.unfollow(second)
    for _ in range(50):
        if not reader.assigned:
            break
        await asyncio.sleep(0.1)
    assert reader.assigned == frozenset()
    assert reader.read == read  # the second follow re-read nothing


async def test_the_followed_partitions_lag_is_reported_until_it_is_let_go(
    kafka_bootstrap: str, topic: str, topic_prefix: str
) -> None:
    metrics = NodeMetrics(prefix=topic_prefix)
    feed = HeartbeatFeed(
        ProgressBoard(),
        topic=topic,
        kafka={"bootstrap_servers": kafka_bootstrap},
        catch_up_timeout_s=20,
        metrics=metrics,
    )
    await feed.start(range(8))
    task = asyncio.create_task(feed.run())
    labels = {"topic": "gpuyield.heartbeats"}
    try:
        assert metrics.registry.get_sample_value(LAG, labels) is None  # reads nothing yet
        await feed.follow(JOBS[0], since=time.time())
        await asyncio.sleep(0.5)
        assert metrics.registry.get_sample_value(LAG, labels) == 0  # caught up
        partition = partition_for(JOBS[0].encode(), range(8))
        assert metrics.lag.partitions("gpuyield.heartbeats") == {partition}
        feed.unfollow(JOBS[0])
        for _ in range(50):
            if not feed.assigned:
                break
            await asyncio.sleep(0.1)
        assert metrics.lag.partitions("gpuyield.heartbeats") == frozenset()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await feed.stop()
