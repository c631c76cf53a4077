"""Benchmark: yield latency, from a yield command on Kafka to its acknowledgement.

The real path on one machine: the embedded Tansu broker, this machine's Redis
(else an embedded Valkey), a node agent (in-process, production settings),
and ``examples/train_tiny.py`` trainers (real torch, CPU) registered as local
pods. Each round starts a trainer, waits for its first periodic checkpoint,
sends a yield command and times the acknowledgement; the ack's own
``seconds_taken`` (signal -> released) is reported too.

    .venv/bin/python bench/bench_yield.py [--rounds 5]

The trainer's model is tiny, so this is the path's own latency: signal,
next step boundary, emergency checkpoint, exit, the agent noticing, the
suspension and the ack. Add the save time of the real model
(``bench/bench_checkpoint.py``) for a large one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from machine import machine
from redis.asyncio import Redis

from gpuyield.agents.node.gpus import FixedGpuCounter
from gpuyield.agents.node.local_signaller import LocalPodRegistry, LocalProcessSignaller
from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.service import AgentTopics, NodeAgentConfig, run_node_agent
from gpuyield.agents.node.suspenders import LocalJobSuspender
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import CommandAction, Heartbeat, YieldAck, YieldCommand
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedRedis
from gpuyield.streams.topics import ensure_topics, registry

ROOT = Path(__file__).resolve().parents[1]
NODE = "bench-node"


async def first_checkpoint(consumer: AIOKafkaConsumer, job: str) -> None:
    while True:
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            for r in records:
                beat = Heartbeat.model_validate_json(r.value)
                if beat.job == job and beat.last_checkpoint_step is not None:
                    return


async def ack_of(consumer: AIOKafkaConsumer, command_id: str) -> YieldAck:
    while True:
        batch = await consumer.getmany(timeout_ms=20)
        for records in batch.values():
            for r in records:
                ack = YieldAck.model_validate_json(r.value)
                if ack.command_id == command_id:
                    return ack


async def run(bootstrap: str, redis_url: str, rounds: int, tmp: Path) -> list[tuple[float, float]]:
    prefix = f"y{secrets.token_hex(4)}."
    await ensure_topics({"bootstrap_servers": bootstrap}, registry(prefix=prefix), 1)
    topics = AgentTopics.with_prefix(prefix)
    client = Redis.from_url(redis_url)
    redis_prefix = f"gpuyield-bench:{secrets.token_hex(4)}"
    pods = LocalPodRegistry(client, prefix=redis_prefix)
    config = NodeAgentConfig(
        node=NODE,
        kafka={"bootstrap_servers": bootstrap},
        topics=topics,
        session_timeout_s=6.0,
        producer_max_batch_size=1,
        redis_prefix=redis_prefix,
        group_prefix=prefix,
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    agent = asyncio.create_task(
        run_node_agent(
            config,
            redis=client,
            signaller=LocalProcessSignaller(pods),
            suspender=LocalJobSuspender(client, prefix=redis_prefix),
            gpus=FixedGpuCounter(8),
            stop=stop,
            ready=ready,
        )
    )
    await asyncio.wait_for(ready.wait(), 60)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    beats = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=5)
    acks = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=5)
    await beats.start()
    await acks.start()
    await beats.topics()
    beats.assign(
        [
            TopicPartition(topics.heartbeats, p)
            for p in beats.partitions_for_topic(topics.heartbeats) or {0}
        ]
    )
    acks.assign([TopicPartition(topics.acks, 0)])
    results: list[tuple[float, float]] = []
    try:
        for r in range(rounds):
            job, pod = f"bench/job-{r}", f"job-{r}-worker-0"
            trainer = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "examples" / "train_tiny.py"),
                    "--checkpoint-dir",
                    str(tmp / f"ck-{r}"),
                    "--steps",
                    "1000000",
                    "--job",
                    job,
                    "--pod",
                    pod,
                    "--kafka-bootstrap",
                    bootstrap,
                    "--kafka-topic",
                    topics.heartbeats,
                    "--heartbeat-every-steps",
                    "10",
                    "--checkpoint-every",
                    "50",
                    "--step-sleep",
                    "0.01",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await pods.register(PodRef("bench", pod), trainer.pid)
            await asyncio.wait_for(first_checkpoint(beats, job), 120)
            now = time.time()
            command = YieldCommand(
                command_id=f"bench-{secrets.token_hex(6)}",
                decision_id="bench",
                action=CommandAction.YIELD,
                node=NODE,
                job=job,
                pods=(pod,),
                grace_s=120.0,
                issued_at=now,
                deadline=now + 120.0,
            )
            sent = time.perf_counter()
            await producer.send_and_wait(topics.commands, encode(command), key=NODE.encode())
            ack = await asyncio.wait_for(ack_of(acks, command.command_id), 180)
            results.append((time.perf_counter() - sent, ack.seconds_taken))
            trainer.wait(30)
    finally:
        stop.set()
        await asyncio.wait_for(agent, 60)
        await producer.stop()
        await beats.stop()
        await acks.stop()
        keys = [k async for k in client.scan_iter(match=f"{redis_prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        broker = stack.enter_context(EmbeddedBroker(log_path=tmp / "tansu.log"))
        url = "redis://127.0.0.1:6379/0"
        try:
            redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
        except (redis.RedisError, OSError):
            url = stack.enter_context(EmbeddedRedis(tmp / "valkey")).url
        results = await run(broker.bootstrap, url, args.rounds, tmp)
    total = [r[0] for r in results]
    taken = [r[1] for r in results]
    print(f"Machine: {machine()}; embedded Tansu broker; tiny torch trainer\n")
    print("| measure | median | max |")
    print("|---|---:|---:|")
    print(
        f"| command on Kafka -> ack on Kafka ({len(results)} yields) | "
        f"{statistics.median(total):.2f} s | {max(total):.2f} s |"
    )
    print(
        f"| ack's seconds_taken (signal -> released) | "
        f"{statistics.median(taken):.2f} s | {max(taken):.2f} s |"
    )


if __name__ == "__main__":
    asyncio.run(main())
