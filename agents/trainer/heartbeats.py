"""Heartbeats that can never slow a training step.

A step may run on hundreds of GPUs; a broker that is slow, down or unreachable
must cost it nothing. ``publish`` appends to a bounded buffer and returns;
a daemon thread drains the buffer into the sink. When the buffer is full the
oldest heartbeat is dropped (the newest says more about progress) and counted,
so an operator can see how many were lost (``stats``); the first drop of a run
of drops is logged (once, until a heartbeat gets through again).

Sinks run only on that thread, one heartbeat at a time, so a sink needs no
locking and may block (the Kafka sink waits for the broker's acknowledgement).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Heartbeat

logger = logging.getLogger(__name__)


class HeartbeatSink(Protocol):
    """Where heartbeats go. ``send`` may block or raise: the publisher counts failures.

    A sink may also have a ``close()``; the publisher calls it from its thread
    after the last heartbeat.
    """

    def send(self, heartbeat: Heartbeat) -> None: ...


@dataclass(frozen=True, slots=True)
class PublisherStats:
    published: int  # handed to publish()
    sent: int  # accepted by the sink
    dropped: int  # pushed out of a full buffer, or still buffered when the publisher closed
    failed: int  # the sink raised (e.g. the broker is unreachable)


class HeartbeatPublisher:
    """A bounded buffer drained by a daemon thread into a sink."""

    def __init__(self, sink: HeartbeatSink, *, buffer: int = 64) -> None:
        if buffer < 1:
            raise ValueError("buffer must hold at least one heartbeat")
        self._sink = sink
        self._buffer: collections.deque[Heartbeat] = collections.deque()
        self._capacity = buffer
        self._lock = threading.Lock()  # held for a deque operation only, never across send()
        self._wake = threading.Event()
        self._stopping = False
        self._published = 0
        self._sent = 0
        self._dropped = 0
        self._failed = 0
        self._dropping = False  # a drop was logged and no heartbeat got through since
        self._thread = threading.Thread(target=self._drain, name="gpuyield-heartbeats", daemon=True)
        self._thread.start()

    def publish(self, heartbeat: Heartbeat) -> None:
        """Buffer one heartbeat; never waits for the sink."""
        with self._lock:
            if self._stopping:
                self._dropped += 1
                return
            self._published += 1
            dropped_first = False
            if len(self._buffer) >= self._capacity:
                self._buffer.popleft()
                self._dropped += 1
                dropped_first, self._dropping = not self._dropping, True
            self._buffer.append(heartbeat)
        self._wake.set()
        if dropped_first:
            logger.warning(
                "heartbeat buffer full (%d): the sink is slow or failing; dropping the oldest",
                self._capacity,
            )

    @property
    def stats(self) -> PublisherStats:
        with self._lock:
            return PublisherStats(self._published, self._sent, self._dropped, self._failed)

    def close(self, timeout_s: float = 5.0) -> PublisherStats:
        """Send what is buffered, waiting at most ``timeout_s``; a stuck sink is abandoned.

        The thread is a daemon, so a sink blocked forever cannot keep the
        process (and the pod) alive past a yield.
        """
        with self._lock:
            self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            with self._lock:
                left = len(self._buffer)
                self._dropped += left
                self._buffer.clear()
            logger.warning(
                "heartbeat sink did not finish within %.1f s; %d heartbeats dropped",
                timeout_s,
                left,
            )
        stats = self.stats
        if stats.dropped or stats.failed:
            logger.info(
                "heartbeats: %d published, %d sent, %d dropped, %d failed",
                stats.published,
                stats.sent,
                stats.dropped,
                stats.failed,
            )
        return stats

    def _next(self) -> Heartbeat | None:
        with self._lock:
            return self._buffer.popleft() if self._buffer else None

    def _drain(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while (heartbeat := self._next()) is not None:
                try:
                    self._sink.send(heartbeat)
                except Exception as exc:
                    with self._lock:
                        self._failed += 1
                    logger.debug("heartbeat not sent: %s", exc)
                else:
                    with self._lock:
                        self._sent += 1
                        self._dropping = False
            with self._lock:
                if self._stopping and not self._buffer:
                    break
        close = getattr(self._sink, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                logger.warning("closing the heartbeat sink failed", exc_info=True)


class MemorySink:
    """Keeps heartbeats in a list (tests, and scripts that report progress themselves)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heartbeats: list[Heartbeat] = []

    def send(self, heartbeat: Heartbeat) -> None:
        with self._lock:
            self._heartbeats.append(heartbeat)

    @property
    def heartbeats(self) -> list[Heartbeat]:
        with self._lock:
            return list(self._heartbeats)


class JsonLinesSink:
    """Appends one JSON document per line to a file.

    Each line is one ``write`` on an ``O_APPEND`` descriptor, so the ranks of a
    job can share one file without interleaving lines, and a reader (a test, a
    sidecar shipping logs) can follow it while training runs.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def send(self, heartbeat: Heartbeat) -> None:
        if self._fd is None:
            raise RuntimeError(f"{self.path}: sink closed")
        os.write(self._fd, encode(heartbeat) + b"\n")

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class NullSink:
    """Discards heartbeats: for runs outside a gpuyield cluster."""

    def send(self, heartbeat: Heartbeat) -> None:
        return None
