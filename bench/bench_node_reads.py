"""Node agents' broker egress per yield: messages each agent reads, before and after.

Not a test. ``python bench/bench_node_reads.py [--nodes 64 256 1000] [--yields 4]``
starts the embedded broker with the production topic layout (8 partitions
where keyed) and, per cluster size, puts on it what a busy cluster holds
within a node agent's heartbeat lookback: 3 jobs per node, ``--beats`` beats
each (keyed by job), and one decision's yield commands (``--yields`` jobs on
as many nodes, keyed by node). Then, with the agent's own classes:

- a yielding agent: ``HeartbeatFeed.follow`` of its job (``feed.read``), plus
  its command partition (``partition_for`` of its node, read to the end);
- an agent with nothing to yield: its command partition only.

Before this change every agent read every partition of both topics: all the
heartbeats in its lookback and all the commands, whatever it yielded. The
table gives the messages read per agent per yield and the broker's egress for
the decision (all agents together), measured on the broker, with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from machine import machine

from gpuyield.agents.node.heartbeat_feed import HeartbeatFeed
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Heartbeat, YieldCommand
from gpuyield.streams.embedded import EmbeddedBroker
from gpuyield.streams.partitioning import partition_for
from gpuyield.streams.topics import (
    DEFAULT_PARTITIONS,
    HEARTBEATS,
    YIELD_COMMANDS,
    ensure_topics,
    registry,
)

JOBS_PER_NODE = 3
IDLE_S = 1.0


def command(node: str, job: str, now: float) -> YieldCommand:
    return YieldCommand.model_validate(
        {
            "command_id": f"c-{secrets.token_hex(4)}",
            "decision_id": "d-bench",
            "action": "yield",
            "node": node,
            "job": job,
            "pods": (f"{job.split('/')[1]}-0",),
            "grace_s": 60.0,
            "issued_at": now,
            "deadline": now + 60.0,
            "reason": "bench",
        }
    )


async def fill(bootstrap: str, prefix: str, nodes: int, beats: int, yields: int) -> list[str]:
    """Heartbeats of every job and one decision's commands; returns the yielding nodes."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    now = time.time()
    try:
        pending = []
        for k in range(beats):
            for n in range(nodes):
                for j in range(JOBS_PER_NODE):
                    job = f"team/job-{n:05d}-{j}"
                    beat = Heartbeat(
                        job=job,
                        pod=f"job-{n:05d}-{j}-0",
                        step=k,
                        progress=0.5,
                        sent_at=now - beats + k,
                    )
                    pending.append(
                        await producer.send(prefix + HEARTBEATS, encode(beat), key=job.encode())
                    )
        yielding = [f"node-{n:05d}" for n in range(0, nodes, max(1, nodes // yields))][:yields]
        for node in yielding:
            job = f"team/job-{node.removeprefix('node-')}-0"
            pending.append(
                await producer.send(
                    prefix + YIELD_COMMANDS, encode(command(node, job, now)), key=node.encode()
                )
            )
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return yielding


async def partition_sizes(bootstrap: str, topic: str) -> dict[int, int]:
    """Messages per partition, counted by reading each one until nothing more comes.

    Not by end offsets: Tansu reports a wrong end when the last batch holds
    several records (see the runtime notes).
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(DEFAULT_PARTITIONS)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        counts = dict.fromkeys(range(DEFAULT_PARTITIONS), 0)
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < IDLE_S:
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batches.items():
                counts[tp.partition] += len(records)
                idle_since = time.monotonic()
        return counts
    finally:
        await consumer.stop()


async def settled(feed: HeartbeatFeed) -> int:
    """``feed.read`` once it stops growing (the catch-up may end early on Tansu)."""
    seen, idle_since = feed.read, time.monotonic()
    while time.monotonic() - idle_since < IDLE_S:
        await asyncio.sleep(0.1)
        if feed.read != seen:
            seen, idle_since = feed.read, time.monotonic()
    return seen


async def measure(bootstrap: str, nodes: int, beats: int, yields: int) -> dict[str, float]:
    prefix = f"b{secrets.token_hex(4)}."
    await ensure_topics(
        {"bootstrap_servers": bootstrap}, registry(prefix=prefix), replication_factor=1
    )
    yielding = await fill(bootstrap, prefix, nodes, beats, yields)
    beats_by_partition = await partition_sizes(bootstrap, prefix + HEARTBEATS)
    commands_by_partition = await partition_sizes(bootstrap, prefix + YIELD_COMMANDS)
    partitions = range(DEFAULT_PARTITIONS)
    all_beats, all_commands = sum(beats_by_partition.values()), sum(commands_by_partition.values())
    followed: list[int] = []
    for node in yielding:
        feed = HeartbeatFeed(
            ProgressBoard(), topic=prefix + HEARTBEATS, kafka={"bootstrap_servers": bootstrap}
        )
        await feed.start(range(DEFAULT_PARTITIONS))
        task = asyncio.create_task(feed.run())
        try:
            await feed.follow(f"team/job-{node.removeprefix('node-')}-0", since=time.time())
            followed.append(await settled(feed))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await feed.stop()
    own_commands = [
        commands_by_partition[partition_for(f"node-{n:05d}".encode(), partitions)]
        for n in range(nodes)
    ]
    return {
        "beats": all_beats,
        "commands": all_commands,
        "yielding_beats": sum(followed) / len(followed),
        "commands_per_agent": sum(own_commands) / nodes,
        "before_per_agent": all_beats + all_commands,
        "before_total": nodes * (all_beats + all_commands),
        "after_total": sum(followed) + sum(own_commands),
    }


async def main_async(args: argparse.Namespace) -> None:
    print(f"Machine: {machine()}; {JOBS_PER_NODE} jobs per node, {args.beats} beats each in the")
    print(f"lookback, one decision of {args.yields} yields; topics of 8 partitions\n")
    print(
        "| nodes | heartbeats on the topic | before: per agent | after: yielding agent "
        "| after: other agent | egress before | egress after | after / before |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with EmbeddedBroker() as broker:
        for nodes in args.nodes:
            m = await measure(broker.bootstrap, nodes, args.beats, args.yields)
            print(
                f"| {nodes} | {m['beats']:,.0f} | {m['before_per_agent']:,.0f} "
                f"| {m['yielding_beats'] + m['commands_per_agent']:,.0f} "
                f"| {m['commands_per_agent']:.1f} | {m['before_total']:,.0f} "
                f"| {m['after_total']:,.0f} | {m['after_total'] / m['before_total']:.4f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1000])
    parser.add_argument("--beats", type=int, default=10, help="heartbeats per job in the lookback")
    parser.add_argument("--yields", type=int, default=4, help="yield commands in the decision")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
