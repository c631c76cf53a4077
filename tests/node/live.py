"""Helpers for the node agent's tests against the real broker, real Redis and real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import BaseModel
from redis.asyncio import Redis

from gpuyield.agents.node.executor import ExecutorSettings
from gpuyield.agents.node.gpus import FixedGpuCounter
from gpuyield.agents.node.local_signaller import LocalPodRegistry, LocalProcessSignaller
from gpuyield.agents.node.metrics import NodeMetrics
from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.service import AgentTopics, NodeAgentConfig, run_node_agent
from gpuyield.agents.node.signalling import Signaller
from gpuyield.agents.node.suspenders import LocalJobSuspender
from gpuyield.schemas.decoding import decode, encode
from gpuyield.streams.topics import YIELD_COMMANDS

M = TypeVar("M", bound=BaseModel)

ROOT = Path(__file__).resolve().parents[2]
TOY_TRAINER = Path(__file__).with_name("toy_trainer.py")
NODE = "node-a"

# Shorter than Tansu's measured 6 s: the first join waits half of it, and a killed agent's
# successor waits all of it. Heartbeats every second keep it from expiring in a test.
SESSION_TIMEOUT_S = 3.0

FAST = ExecutorSettings(settle_s=1.0, poll_s=0.1, exit_grace_s=5.0, kill_timeout_s=10.0)


@dataclass
class Counting:
    """Wraps a signaller and counts the signals it sends."""

    inner: Signaller
    signals: list[tuple[PodRef, ...]] = field(default_factory=list)

    async def signal(self, pods: Sequence[PodRef], grace_s: float) -> None:
        self.signals.append(tuple(pods))
        await self.inner.signal(pods, grace_s)

    async def alive(self, pods: Sequence[PodRef]) -> bool:
        return await self.inner.alive(pods)

    async def kill(self, pods: Sequence[PodRef]) -> None:
        await self.inner.kill(pods)


@dataclass
class Live:
    bootstrap: str
    topics: AgentTopics
    redis: Redis
    redis_prefix: str
    tmp: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def registry(self) -> LocalPodRegistry:
        return LocalPodRegistry(self.redis, prefix=self.redis_prefix)

    @property
    def suspender(self) -> LocalJobSuspender:
        return LocalJobSuspender(self.redis, prefix=self.redis_prefix)

    def local_signaller(self) -> Counting:
        return Counting(LocalProcessSignaller(self.registry))

    @contextlib.asynccontextmanager
    async def agent(
        self, signaller: Signaller | None = None, metrics: NodeMetrics | None = None
    ) -> AsyncIterator[None]:
        """A node agent on ``node-a`` for the block, ready to consume when the block starts."""
        config = NodeAgentConfig(
            node=NODE,
            kafka={"bootstrap_servers": self.bootstrap},
            topics=self.topics,
            session_timeout_s=SESSION_TIMEOUT_S,
            producer_max_batch_size=1,
            redis_prefix=self.redis_prefix,
            executor=FAST,
            group_prefix=self.topics.commands.removesuffix(YIELD_COMMANDS),
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_node_agent(
                config,
                redis=self.redis,
                signaller=signaller or self.local_signaller(),
                suspender=self.suspender,
                gpus=FixedGpuCounter(2),
                stop=stop,
                ready=ready,
                metrics=metrics,
            )
        )
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # raises what stopped it
        assert ready.is_set(), "node agent not ready after 30 s"
        try:
            yield
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

    async def send(self, topic: str, value: bytes | BaseModel, key: str = NODE) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, max_batch_size=1)
        await producer.start()
        try:
            raw = value if isinstance(value, bytes) else encode(value)
            await producer.send_and_wait(topic, raw, key=key.encode())
        finally:
            await producer.stop()

    def start(
        self, args: list[str], name: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        log.close()
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    async def toy_trainer(
        self, pod: PodRef, job: str, *extra: str, name: str = "trainer"
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """Start a toy trainer, wait until it has sent a heartbeat, register it as ``pod``."""
        ready = self.tmp / f"{name}.ready"
        checkpoint = self.tmp / f"{name}.ckpt.json"
        process = self.start(
            [
                str(TOY_TRAINER),
                "--bootstrap", self.bootstrap,
                "--topic", self.topics.heartbeats,
                "--job", job,
                "--pod", pod.name,
                "--ready", str(ready),
                "--checkpoint", str(checkpoint),
                *extra,
            ],
            name,
        )  # fmt: skip
        await until(lambda: ready.exists() or process.poll() is not None, 30, "trainer ready")
        assert process.poll() is None, self.log(name)
        await self.registry.register(pod, process.pid)
        return process, checkpoint

    def cleanup(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()


async def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


class TopicReader:
    """Everything on one topic from the beginning, decoded, as it arrives."""

    def __init__(self, bootstrap: str, topic: str, model: type[M]) -> None:
        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
        )
        self._model = model
        self.items: list[Any] = []

    async def __aenter__(self) -> TopicReader:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def wait_for(self, predicate: Callable[[Any], bool], timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            for item in self.items:
                if predicate(item):
                    return item
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"timed out after {timeout_s} s waiting for {what}: {self.items}"
                )
            batches = await self._consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000))
            for records in batches.values():
                self.items.extend(decode(self._model, r.value) for r in records)
