"""One node agent wired to Kafka and Redis: the composition the CLI and the demo run.

``run_node_agent`` owns the agent's Kafka clients and runs until ``stop``:

- a producer for acks and dead letters (``acks="all"``; no idempotent
  producer, which Tansu refuses; the acks are idempotent by command id);
- the heartbeat feed (no group): it reads the partition of a job only while
  this node yields that job, and nothing while idle (see ``heartbeat_feed``);
- the agent's in-flight yields from the ledger, taken up next;
- then the command consumer: group ``gpuyield-node-<node>`` for its offsets,
  with the one partition this node's key hashes to assigned by hand (the
  topic is keyed by node; ``streams.partitioning`` applies the producers'
  partitioner), so the broker sends each agent its own node's commands and
  those of the few nodes sharing the partition, not the whole cluster's. The
  partition count is read at start: after partitions are added to the topic,
  restart the agents. Offsets are committed by hand, after each batch is
  durably recorded (see ``agent``); a fresh group starts at the earliest
  offset, so commands sent before the agent's first start are not lost (the
  ledger and the staleness rule keep old ones from running twice or late).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from redis.asyncio import Redis

from gpuyield.agents.node.agent import NodeAgent
from gpuyield.agents.node.clock import Clock, Sleep, system_clock, system_sleep
from gpuyield.agents.node.executor import ExecutorSettings, YieldExecutor
from gpuyield.agents.node.gpus import GpuCounter
from gpuyield.agents.node.heartbeat_feed import HeartbeatFeed
from gpuyield.agents.node.ledger import WEEK_S, Ledger
from gpuyield.agents.node.metrics import MeteredLedger, NodeMetrics
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.agents.node.signalling import Signaller
from gpuyield.agents.node.suspenders import JobSuspender
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import DeadLetter, YieldAck
from gpuyield.streams.dead_letters import publish_dead_letter
from gpuyield.streams.metrics import lag
from gpuyield.streams.partitioning import partition_for
from gpuyield.streams.topics import DEAD_LETTERS, HEARTBEATS, YIELD_ACKS, YIELD_COMMANDS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentTopics:
    """The topics a node agent reads and writes (prefixed in tests)."""

    commands: str = YIELD_COMMANDS
    heartbeats: str = HEARTBEATS
    acks: str = YIELD_ACKS
    dead_letters: str = DEAD_LETTERS

    @classmethod
    def with_prefix(cls, prefix: str) -> AgentTopics:
        return cls(
            *(prefix + name for name in (YIELD_COMMANDS, HEARTBEATS, YIELD_ACKS, DEAD_LETTERS))
        )


@dataclass(frozen=True, slots=True)
class NodeAgentConfig:
    node: str
    kafka: dict[str, Any]  # aiokafka client arguments (bootstrap_servers, security)
    topics: AgentTopics = field(default_factory=AgentTopics)
    session_timeout_s: float = 45.0
    producer_max_batch_size: int = 16384
    redis_prefix: str = "gpuyield"
    record_ttl_s: int = WEEK_S
    heartbeat_lookback_s: float = 600.0  # read a job's heartbeats from this long before its yield
    catch_up_timeout_s: float = 30.0
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    group_prefix: str = ""  # the topic prefix: deployments sharing one Kafka get their own groups

    @property
    def group_id(self) -> str:
        return f"{self.group_prefix}gpuyield-node-{self.node}"


class KafkaAckSink:
    """Acks on their topic, keyed by job, each waited for."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    async def publish(self, ack: YieldAck) -> None:
        await self._producer.send_and_wait(self._topic, encode(ack), key=ack.job.encode())


async def run_node_agent(
    config: NodeAgentConfig,
    *,
    redis: Redis,
    signaller: Signaller,
    suspender: JobSuspender,
    gpus: GpuCounter,
    stop: asyncio.Event,
    ready: asyncio.Event | None = None,
    clock: Clock = system_clock,
    sleep: Sleep = system_sleep,
    metrics: NodeMetrics | None = None,
) -> NodeAgent:
    """Run one node's agent until ``stop`` is set; returns the agent (for its counters).

    ``ready`` is set once in-flight yields are taken up and the command
    consumer is started. ``metrics`` (``--metrics-port``) counts its phases.
    """
    topics = config.topics
    producer = AIOKafkaProducer(
        **config.kafka,
        acks="all",
        max_batch_size=config.producer_max_batch_size,
        client_id=config.group_id,
    )
    await producer.start()
    board = ProgressBoard()
    feed = HeartbeatFeed(
        board,
        topic=topics.heartbeats,
        kafka=config.kafka,
        lookback_s=config.heartbeat_lookback_s,
        catch_up_timeout_s=config.catch_up_timeout_s,
        metrics=metrics,
    )
    feed_task: asyncio.Task[None] | None = None
    consumer: AIOKafkaConsumer | None = None
    ledger = (
        Ledger(redis, config.node, prefix=config.redis_prefix, ttl_s=config.record_ttl_s)
        if metrics is None
        else MeteredLedger(
            redis, config.node, metrics, prefix=config.redis_prefix, ttl_s=config.record_ttl_s
        )
    )

    async def dead_letter(letter: DeadLetter) -> None:
        await publish_dead_letter(producer, letter, topic=topics.dead_letters)
        if metrics is not None:
            metrics.dead_letter(letter.source_topic)

    executor = YieldExecutor(
        ledger=ledger,
        signaller=signaller,
        suspender=suspender,
        gpus=gpus,
        board=board,
        acks=KafkaAckSink(producer, topics.acks),
        settings=config.executor,
        clock=clock,
        sleep=sleep,
        feed=feed,
    )
    agent = NodeAgent(
        config.node,
        ledger=ledger,
        executor=executor,
        dead_letters=dead_letter,
        clock=clock,
        sleep=sleep,
    )
    try:
        await feed.start(await producer.partitions_for(topics.heartbeats))
        feed_task = asyncio.create_task(feed.run(), name="gpuyield-heartbeat-feed")
        await agent.recover()  # each recovered yield follows its job's heartbeats itself
        mine = TopicPartition(
            topics.commands,
            partition_for(config.node.encode(), await producer.partitions_for(topics.commands)),
        )
        session_ms = int(config.session_timeout_s * 1000)
        consumer = AIOKafkaConsumer(
            **config.kafka,
            group_id=config.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(100, session_ms // 3),
        )
        # No group join (the partition is assigned by hand): the group only keeps offsets.
        # Recovered yields run meanwhile, and a stop is honoured at once.
        if not await _unless_stopped(consumer.start(), stop):
            return agent
        consumer.assign([mine])
        log.info(
            "node agent for %s ready (group %s, partition %d of %s)",
            config.node,
            config.group_id,
            mine.partition,
            topics.commands,
        )
        if ready is not None:
            ready.set()
        await _consume(consumer, agent, stop, sleep, metrics)
    finally:
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()
        await agent.close()
        if feed_task is not None:
            feed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feed_task
        await feed.stop()
        await producer.stop()
    return agent


async def _unless_stopped(step: Awaitable[object], stop: asyncio.Event) -> bool:
    """Run ``step`` unless ``stop`` comes first (then ``step`` is cancelled); True if it ran."""
    work = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if work.done():
        work.result()
        return True
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    return False


async def report_lag(consumer: AIOKafkaConsumer, metrics: NodeMetrics | None) -> None:
    """``gpuyield_consumer_lag_messages`` of the partitions ``consumer`` reads: its high
    watermark (known once fetched) less its position."""
    if metrics is None:
        return
    for tp in consumer.assignment():
        position = await consumer.position(tp)
        metrics.behind(tp.topic, tp.partition, lag(consumer.highwater(tp), position))


async def _consume(
    consumer: AIOKafkaConsumer,
    agent: NodeAgent,
    stop: asyncio.Event,
    sleep: Sleep,
    metrics: NodeMetrics | None = None,
) -> None:
    """Read, record, commit; a failed record is read again after a pause (not committed)."""
    while not stop.is_set():
        try:
            batches = await consumer.getmany(timeout_ms=500, max_records=100)
            await report_lag(consumer, metrics)
        except KafkaError as exc:
            log.warning("command consumer: %s; retrying", exc)
            await sleep(1.0)
            continue
        handled: dict[TopicPartition, int] = {}
        failed = False
        for tp, messages in batches.items():
            for message in messages:
                try:
                    await agent.handle(message)
                except Exception as exc:
                    log.error(
                        "command %s@%d not recorded (%s); reading it again", tp, message.offset, exc
                    )
                    consumer.seek(tp, message.offset)
                    failed = True
                    break
                handled[tp] = message.offset + 1
        if handled:
            try:
                await consumer.commit(handled)
            except KafkaError as exc:
                # Redelivery is harmless: the ledger knows these commands.
                log.warning("offset commit failed (%s); the commands may be redelivered", exc)
        if failed:
            await sleep(1.0)
