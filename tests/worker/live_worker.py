"""A real ``gpuyield worker`` process against the test broker, and a reader of its topics."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import BaseModel

from gpuyield.schemas.decoding import encode

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")


@dataclass
class LiveWorker:
    """One worker process; ``name`` tells its log apart from another's.

    ``start()`` again after it exited starts it anew (a supervisor's restart),
    logging to the same file.
    """

    READY = b"Worker ready"

    bootstrap: str
    redis_url: str
    prefix: str
    app_id: str
    cluster_id: str
    state_dir: Path
    name: str = "worker"
    env: dict[str, str] = field(default_factory=dict)
    """More GPUYIELD_ variables for this worker (e.g. its Kubernetes access)."""
    process: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.state_dir / f"{self.name}.log"

    def start(self) -> LiveWorker:
        env = {
            **os.environ,
            "GPUYIELD_KAFKA_BOOTSTRAP": self.bootstrap,
            "GPUYIELD_KAFKA_PROFILE": "tansu",
            "GPUYIELD_REDIS_URL": self.redis_url,
            "GPUYIELD_TOPIC_PREFIX": self.prefix,
            "GPUYIELD_APP_ID": self.app_id,
            "GPUYIELD_CLUSTER_ID": self.cluster_id,
            "GPUYIELD_STATE_DIR": str(self.state_dir / self.name),
            **self.env,
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        return self

    def command(self) -> list[str]:
        return [GPUYIELD, "worker", "--tick-s", "0.5"]

    def wait_ready(self, timeout_s: float = 60.0, times: int = 1) -> None:
        """Until the log says ready ``times`` times (a restarted process says it again)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None and times == 1:
                raise AssertionError(f"{self.name} exited early:\n{self.tail()}")
            if self.log.read_bytes().count(self.READY) >= times:
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.name} not ready after {timeout_s} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


async def publish(
    bootstrap: str, topic: str, messages: Sequence[tuple[str, BaseModel | bytes]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, message in messages:
            value = message if isinstance(message, bytes) else encode(message)
            await producer.send_and_wait(topic, value=value, key=key.encode())
    finally:
        await producer.stop()


async def read_until(
    bootstrap: str,
    topics: Sequence[str],
    done: Callable[[dict[str, list[bytes]]], bool],
    *,
    timeout_s: float = 60.0,
    settle_s: float = 0.0,
) -> dict[str, list[bytes]]:
    """Everything on ``topics`` from the start, read until ``done`` holds (then ``settle_s`` more).

    Partitions are assigned by hand, so no consumer-group join is waited for.
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    seen: dict[str, list[bytes]] = {t: [] for t in topics}
    try:
        await consumer.topics()  # fetch the metadata, so partitions are known
        partitions = [
            TopicPartition(t, p)
            for t in topics
            for p in sorted(consumer.partitions_for_topic(t) or {0})
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        settled_at: float | None = None
        while loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for tp, records in batch.items():
                seen[tp.topic].extend(r.value for r in records if r.value is not None)
            if done(seen):
                settled_at = settled_at or loop.time()
                if loop.time() - settled_at >= settle_s:
                    return seen
        return seen
    finally:
        await consumer.stop()


def decoded(raw: list[bytes], model: type[Any]) -> list[Any]:
    return [model.model_validate_json(r) for r in raw]


@dataclass
class LiveNodeAgent(LiveWorker):
    """One ``gpuyield node-agent`` process (local signaller) of the same deployment."""

    READY = b" ready (group "

    node: str = "gpu-02"
    redis_prefix: str = "gpuyield"

    def command(self) -> list[str]:
        return [GPUYIELD, "node-agent", "--node", self.node, "--redis-prefix", self.redis_prefix]


class Supervisor:
    """Restarts a process that exits with status 75 (a lost broker state), as Kubernetes would.

    Any other exit ends the supervision; ``exits`` lists every status seen.
    """

    def __init__(self, process: LiveWorker, restart_on: int = 75) -> None:
        self.process = process
        self.restart_on = restart_on
        self.exits: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            running = self.process.process
            status = None if running is None else running.poll()
            if status is None:
                continue
            self.exits.append(status)
            if status != self.restart_on:
                return
            self.process.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
