"""Heartbeats to Kafka, from a training script, with kafka-python's synchronous producer.

The sink runs on the heartbeat publisher's thread (``heartbeats.py``), never
on the training thread: a step only appends to the publisher's bounded
buffer. What this module adds is that a broker that is slow, down or gone
costs that thread a bounded time and the process nothing that lasts:

- nothing is tried while the broker is known to be unreachable: a plain TCP
  connect to the bootstrap servers (``connect_timeout_s``) comes first, and a
  refusal or any failed send closes the producer and waits ``retry_after_s``
  before the next try; heartbeats in between fail at once
  (``SinkUnavailable``), counted as failed by the publisher;
- every call is bounded: ``max_block_s`` for metadata and buffer space in
  ``send``, ``send_timeout_s`` for the broker's acknowledgement,
  ``close_timeout_s`` to close the producer;
- one heartbeat is in flight at a time and each waits for its
  acknowledgement, so one job's heartbeats reach its partition in order;
- no socket is left open. kafka-python 3.0.12 does not close a socket whose
  connect failed (a broker that went away is retried every
  ``reconnect_backoff_ms``, one socket each) until the garbage collector
  finds it; ``_ClosingSocket`` connects the same way and closes it. It is
  plugged in through kafka-python's own extension point, the registry of
  ``proxy_url`` schemes, and only when no ``proxy_url`` is given.

The outage is logged once when it starts and once when it ends, not per
heartbeat.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

from kafka import KafkaProducer
from kafka.net import KafkaNetSocket

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Heartbeat

logger = logging.getLogger(__name__)

TOPIC = "gpuyield.heartbeats"
_DIRECT = "gpuyield-direct"


class SinkUnavailable(RuntimeError):
    """The broker was unreachable recently; this heartbeat is not even tried."""


class _ClosingSocket(KafkaNetSocket):  # type: ignore[misc]
    """kafka-python's direct connection, closing the socket when the connect fails."""

    SCHEMES = (_DIRECT,)

    async def connect(
        self, net: Any, addrinfo: Any, socket_options: Any = (), timeout_at: Any = None
    ) -> socket.socket:
        family, sock_type, proto, _name, sockaddr = addrinfo
        sock = self.socket(family, sock_type, proto)
        try:
            sock.setblocking(False)
            for option in socket_options:
                sock.setsockopt(*option)
            connected: socket.socket = await self.sock_connect(
                net, sock, sockaddr, timeout_at=timeout_at
            )
        except BaseException:
            sock.close()
            raise
        return connected


def bootstrap_addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    """``host:port,[v6]:port`` as (host, port) pairs; a clear error for a malformed one."""
    found = []
    for server in bootstrap_servers.split(","):
        server = server.strip()
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {server!r} is not HOST:PORT")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise ValueError("no bootstrap server given")
    return found


def reachable(addresses: list[tuple[str, int]], timeout_s: float) -> bool:
    """Whether any bootstrap server accepts a TCP connection (closed at once)."""
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return True
        except OSError:
            continue
    return False


class KafkaHeartbeatSink:
    """Produces each heartbeat to ``gpuyield.heartbeats``, keyed by job.

    The key keeps one job's heartbeats on one partition, in order, for the
    controller's progress table. Idempotence and transactions stay off: the
    controller folds heartbeats idempotently, and the embedded broker (Tansu)
    supports neither. ``producer_options`` go to kafka-python's
    ``KafkaProducer`` (TLS, SASL, ``acks``...).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = TOPIC,
        client_id: str = "gpuyield-trainer",
        send_timeout_s: float = 10.0,
        max_block_s: float = 1.0,
        connect_timeout_s: float = 1.0,
        close_timeout_s: float = 2.0,
        retry_after_s: float = 30.0,
        **producer_options: Any,
    ) -> None:
        for name, value in (
            ("send_timeout_s", send_timeout_s),
            ("max_block_s", max_block_s),
            ("connect_timeout_s", connect_timeout_s),
            ("close_timeout_s", close_timeout_s),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be > 0, not {value}")
        if retry_after_s < 0:
            raise ValueError(f"retry_after_s must be >= 0, not {retry_after_s}")
        self.bootstrap_servers = bootstrap_servers
        self._addresses = bootstrap_addresses(bootstrap_servers)
        self.topic = topic
        self._client_id = client_id
        self._send_timeout_s = send_timeout_s
        self._max_block_s = max_block_s
        self._connect_timeout_s = connect_timeout_s
        self._close_timeout_s = close_timeout_s
        self._retry_after_s = retry_after_s
        self._options = producer_options
        self._producer: KafkaProducer | None = None
        self._retry_at = 0.0
        self._down = False

    def send(self, heartbeat: Heartbeat) -> None:
        producer = self._connected()
        try:
            future = producer.send(self.topic, value=encode(heartbeat), key=heartbeat.job.encode())
            future.get(timeout=self._send_timeout_s)
        except Exception as exc:
            self._lost(f"{type(exc).__name__}: {exc}")
            raise
        if self._down:
            self._down = False
            logger.info("Kafka at %s reachable again; heartbeats resumed", self.bootstrap_servers)

    def close(self) -> None:
        self._close_producer()

    def _connected(self) -> KafkaProducer:
        if self._producer is not None:
            return self._producer
        if time.monotonic() < self._retry_at:
            raise SinkUnavailable(f"Kafka at {self.bootstrap_servers} was unreachable")
        if not reachable(self._addresses, self._connect_timeout_s):
            self._lost("no bootstrap server accepts connections")
            raise SinkUnavailable(f"Kafka at {self.bootstrap_servers} is unreachable")
        options: dict[str, Any] = {
            "client_id": self._client_id,
            "acks": 1,
            "enable_idempotence": False,
            "retries": 0,  # a lost heartbeat is replaced by the next one; a retry could reorder
            "max_in_flight_requests_per_connection": 1,
            "max_block_ms": int(self._max_block_s * 1000),
            "request_timeout_ms": int(self._send_timeout_s * 1000),
            "delivery_timeout_ms": int(self._send_timeout_s * 1000),
            "bootstrap_timeout_ms": int(self._send_timeout_s * 1000),
            "reconnect_backoff_ms": 500,
            **self._options,
        }
        options.setdefault("proxy_url", f"{_DIRECT}://")
        try:
            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, **options)
        except Exception as exc:
            self._lost(f"{type(exc).__name__}: {exc}")
            raise
        return self._producer

    def _lost(self, why: str) -> None:
        self._close_producer()
        self._retry_at = time.monotonic() + self._retry_after_s
        if not self._down:
            self._down = True
            logger.warning(
                "Kafka at %s unreachable (%s); heartbeats dropped, retrying every %.0f s",
                self.bootstrap_servers,
                why,
                self._retry_after_s,
            )

    def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.close(timeout=self._close_timeout_s)
        except Exception:
            logger.debug("closing the Kafka producer failed", exc_info=True)
