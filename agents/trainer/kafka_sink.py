"""Heartbeats to Kafka, from a training script that knows nothing of asyncio.

aiokafka needs a running event loop; a training script has none, and must not
get one on its main thread. The sink owns a loop on a daemon thread of its own
and hands it one send at a time (from the publisher's thread, which may wait:
training never does).

A broker that is down must not matter to training: a failed start or send
raises (the publisher counts it as failed, the heartbeat is lost), and the next
attempt to connect waits ``retry_after_s``, so an unreachable broker costs one
quick refusal per interval instead of a timeout per heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped, unused-ignore]

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Heartbeat

logger = logging.getLogger(__name__)

TOPIC = "gpuyield.heartbeats"
T = TypeVar("T")


class SinkUnavailable(RuntimeError):
    """The broker was unreachable recently; this heartbeat is not even tried."""


class KafkaHeartbeatSink:
    """Produces each heartbeat to ``gpuyield.heartbeats``, keyed by job.

    The key keeps one job's heartbeats on one partition, in order, for the
    controller's progress table. Idempotence and transactions stay off: the
    controller folds heartbeats idempotently, and the embedded broker (Tansu)
    supports neither. ``producer_options`` go to ``AIOKafkaProducer`` (TLS,
    SASL, ``acks``...).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = TOPIC,
        client_id: str = "gpuyield-trainer",
        send_timeout_s: float = 10.0,
        retry_after_s: float = 30.0,
        **producer_options: Any,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self._client_id = client_id
        self._send_timeout_s = send_timeout_s
        self._retry_after_s = retry_after_s
        self._options = producer_options
        self._producer: AIOKafkaProducer | None = None
        self._retry_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def send(self, heartbeat: Heartbeat) -> None:
        producer = self._connected()
        self._run(
            producer.send_and_wait(self.topic, value=encode(heartbeat), key=heartbeat.job.encode()),
            self._send_timeout_s,
        )

    def close(self) -> None:
        if self._loop is None:
            return
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._run(self._producer.stop(), self._send_timeout_s)
            self._producer = None
        self._stop_loop()

    def _connected(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        now = time.monotonic()
        if now < self._retry_at:
            raise SinkUnavailable(f"Kafka at {self.bootstrap_servers} was unreachable")
        self._retry_at = now + self._retry_after_s
        producer = self._run(self._start(), self._send_timeout_s)
        self._producer = producer
        return producer

    async def _start(self) -> AIOKafkaProducer:
        options: dict[str, Any] = {
            "client_id": self._client_id,
            "acks": 1,
            "enable_idempotence": False,
            "request_timeout_ms": int(self._send_timeout_s * 1000),
            **self._options,
        }
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, **options)
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            logger.warning(
                "Kafka at %s unreachable; heartbeats dropped, retrying in %.0f s",
                self.bootstrap_servers,
                self._retry_after_s,
            )
            raise
        return producer

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=loop.run_forever, name="gpuyield-kafka", daemon=True
            )
            self._thread.start()
            self._loop = loop
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout_s), self._loop)
        return future.result()

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(self._send_timeout_s)
        if not thread.is_alive():
            loop.close()
        self._loop = None
        self._thread = None
