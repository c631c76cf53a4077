"""The node agent's metrics: a metered ledger (real Redis) sees every phase transition; the
consumer lag of the topics it reads comes from the real broker's high watermarks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis.asyncio import Redis

from gpuyield.agents.node.executor import ExecutorSettings, YieldExecutor
from gpuyield.agents.node.gpus import FixedGpuCounter
from gpuyield.agents.node.metrics import MeteredLedger, NodeMetrics
from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.agents.node.records import Phase, YieldRecord
from gpuyield.agents.node.service import AgentTopics, report_lag
from gpuyield.streams.topics import YIELD_COMMANDS, TopicSpec
from node.live import NODE, Live
from node.node_fakes import (
    FakeAcks,
    FakeClock,
    FakePods,
    FakeSuspender,
    heartbeat,
    trainer_that_checkpoints,
    yield_command,
)

POD = PodRef("team", "train-0")
JOB = "team/train"
SETTINGS = ExecutorSettings(exit_grace_s=5, settle_s=2, poll_s=0.5, kill_timeout_s=10)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def sample(metrics: NodeMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


async def test_a_yield_passes_each_phase_once_and_leaves_nothing_in_flight(
    redis: Redis, redis_prefix: str
) -> None:
    metrics = NodeMetrics()
    ledger = MeteredLedger(redis, "node-a", metrics, prefix=redis_prefix.rstrip(":"))
    clock, pods, board = FakeClock(), FakePods(running={POD}), ProgressBoard()
    board.record(heartbeat(JOB, step=90, sent_at=clock() - 5, ckpt=80, ckpt_at=clock() - 60))
    pods.on_signal = trainer_that_checkpoints(pods, board, clock, JOB, step=97)
    executor = YieldExecutor(
        ledger=ledger,
        signaller=pods,
        suspender=FakeSuspender(),
        gpus=FixedGpuCounter(4),
        board=board,
        acks=FakeAcks(),
        settings=SETTINGS,
        clock=clock,
        sleep=clock.sleep,
    )
    record, _ = await ledger.claim(yield_command(), clock())
    assert sample(metrics, "gpuyield_node_commands_in_flight", phase="received") == 1

    await executor.run(record)

    for phase in Phase:
        assert sample(metrics, "gpuyield_node_phase_transitions_total", phase=phase.value) == 1
        if phase is not Phase.DONE:
            assert sample(metrics, "gpuyield_node_commands_in_flight", phase=phase.value) == 0
    assert sample(metrics, "gpuyield_node_acks_total", outcome="checkpointed") == 1


async def test_a_restarted_agent_counts_its_recovered_commands_in_flight_without_transitions(
    redis: Redis, redis_prefix: str
) -> None:
    prefix = redis_prefix.rstrip(":")
    before = NodeMetrics()
    first = MeteredLedger(redis, "node-a", before, prefix=prefix)
    record, _ = await first.claim(yield_command(), 1000.0)
    await first.save(record.to(Phase.SIGNALLED, signalled_at=1001.0))

    after = NodeMetrics()  # the restarted process
    recovered = await MeteredLedger(redis, "node-a", after, prefix=prefix).in_flight()

    assert [r.phase for r in recovered] == [Phase.SIGNALLED]
    assert sample(after, "gpuyield_node_commands_in_flight", phase="signalled") == 1
    assert sample(after, "gpuyield_node_phase_transitions_total", phase="signalled") == 0


def test_writing_the_same_phase_again_is_no_transition() -> None:
    metrics = NodeMetrics()
    record = YieldRecord(command=yield_command(), received_at=1000.0).to(Phase.SIGNALLING)
    metrics.entered(record)
    metrics.entered(record)  # a retried save
    assert sample(metrics, "gpuyield_node_phase_transitions_total", phase="signalling") == 1
    assert sample(metrics, "gpuyield_node_commands_in_flight", phase="signalling") == 1


LAG = "gpuyield_consumer_lag_messages"


async def test_the_lag_is_the_partitions_end_less_what_the_agent_has_fetched(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec], topic_prefix: str
) -> None:
    commands = fresh_topics[YIELD_COMMANDS].name
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(commands, f"c{i}".encode(), partition=3)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    metrics = NodeMetrics(prefix=topic_prefix)
    try:
        consumer.assign([TopicPartition(commands, 3)])
        fetched: list[object] = []
        while not fetched:
            fetched = [
                m
                for ms in (await consumer.getmany(timeout_ms=1000, max_records=2)).values()
                for m in ms
            ]
        await report_lag(consumer, metrics)
    finally:
        await consumer.stop()
    assert len(fetched) == 2
    assert metrics.registry.get_sample_value(LAG, {"topic": "gpuyield.yield-commands"}) == 3


async def test_a_running_agent_reports_the_lag_of_its_commands_partition(
    kafka_bootstrap: str,
    fresh_topics: dict[str, TopicSpec],
    topic_prefix: str,
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
) -> None:
    client = Redis.from_url(redis_url)
    live = Live(
        kafka_bootstrap,
        AgentTopics.with_prefix(topic_prefix),
        client,
        redis_prefix.rstrip(":"),
        tmp_path,
    )
    metrics = NodeMetrics(prefix=topic_prefix)
    try:
        async with live.agent(metrics=metrics):
            await live.send(live.topics.commands, b"not a command", key=NODE)
            for _ in range(100):  # read once it is dead-lettered
                if sample(metrics, "gpuyield_dead_letters_total", topic="gpuyield.yield-commands"):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # the next fetch reports the lag after it
    finally:
        live.cleanup()
        await client.aclose()
    assert sample(metrics, "gpuyield_dead_letters_total", topic="gpuyield.yield-commands") == 1
    assert metrics.registry.get_sample_value(LAG, {"topic": "gpuyield.yield-commands"}) == 0


def test_a_partition_let_go_no_longer_counts_in_the_lag() -> None:
    metrics = NodeMetrics(prefix="p.")
    metrics.behind("p.gpuyield.heartbeats", 1, 40)
    metrics.behind("p.gpuyield.heartbeats", 5, 7)
    metrics.released("p.gpuyield.heartbeats", 1)
    assert sample(metrics, LAG, topic="gpuyield.heartbeats") == 7
    metrics.released("p.gpuyield.heartbeats", 5)
    assert metrics.registry.get_sample_value(LAG, {"topic": "gpuyield.heartbeats"}) == 0
