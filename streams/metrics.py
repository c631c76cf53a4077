"""Prometheus exposition for gpuyield's processes, and what the edge itself measures.

Each process (worker, node agent, archiver) builds its families on its own
``CollectorRegistry`` (never the global one: two apps in one test process
must not share counters) and serves them on ``--metrics-port`` /
``GPUYIELD_METRICS_PORT`` with prometheus-client's own HTTP server, in a
thread beside the event loop. The port is off by default; ``deploy/`` turns
it on and scrapes it with a ServiceMonitor.

Label values stay bounded: topics are named without the deployment's prefix
(``gpuyield.heartbeats``, ten of them), never a job, pod or command id.

This module holds what every process shares: serving, the topic label, the
consumer lag, and the archiver's families (the archiver lives in
``streams``). The worker's families, derived from the decider's outcomes,
are in ``agents/worker/metrics.py``; the node agent's in
``agents/node/metrics.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    ProcessCollector,
    start_http_server,
)

from gpuyield.streams.topics import registry

NAMESPACE = "gpuyield"
KNOWN_TOPICS: frozenset[str] = frozenset(spec.name for spec in registry())


def topic_label(topic: str, prefix: str = "") -> str:
    """A topic as a label value: without the deployment's prefix; ``other`` if not ours.

    ``other`` keeps the label bounded when something unexpected (a changelog,
    a test's stray topic) turns up.
    """
    name = topic[len(prefix) :] if prefix and topic.startswith(prefix) else topic
    return name if name in KNOWN_TOPICS else "other"


def lag(highwater: int | None, next_offset: int) -> int | None:
    """Messages behind the partition's end: its high watermark less the next offset to read.

    None when the consumer does not know the high watermark yet.
    """
    if highwater is None:
        return None
    return max(0, highwater - next_offset)


@dataclass
class MetricsServer:
    """The running exposition server; ``close`` stops it (the thread is a daemon anyway)."""

    port: int
    _server: Any
    _thread: Any

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(port: int, registry: CollectorRegistry, addr: str = "0.0.0.0") -> MetricsServer:  # noqa: S104
    """Serve ``registry`` on ``addr:port`` at ``/metrics`` (port 0: any free port).

    Listens on every interface by default, as a scraped container must.
    Raises OSError when the port is taken.
    """
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server.server_port, server, thread)


def process_families(registry: CollectorRegistry) -> None:
    """The process's own families on ``registry``: its resident memory, CPU and open files
    (``process_*``) and Python's collections per generation (``python_gc_*``).

    prometheus-client puts these on its global registry only, which no gpuyield
    process serves. They show whether a worker's memory stays bounded over weeks,
    and whether full collections (0.7-0.9 s each at 10,000 nodes) still run
    while its heap is frozen (``agents/worker/frozen_heap.py``).
    """
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)


class ConsumerLag:
    """``gpuyield_consumer_lag_messages{topic}``: the largest lag over a topic's partitions."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.gauge = Gauge(
            "consumer_lag_messages",
            "Messages on a topic not yet read by this process (the largest over its partitions).",
            ["topic"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self._by_partition: dict[tuple[str, int], int] = {}

    def observe(self, topic: str, partition: int, behind: int | None) -> None:
        """Record one partition's lag (``topic`` already a label value)."""
        if behind is None:
            return
        self._by_partition[(topic, partition)] = behind
        self._set(topic)

    def forget(self, topic: str, partition: int) -> None:
        """The partition is read no more (a node agent's heartbeat feed let it go): its last
        lag no longer counts; a topic with no partition read left shows 0."""
        if self._by_partition.pop((topic, partition), None) is not None:
            self._set(topic)

    def partitions(self, topic: str) -> frozenset[int]:
        """The partitions of ``topic`` (a label value) whose lag counts now."""
        return frozenset(p for t, p in self._by_partition if t == topic)

    def _set(self, topic: str) -> None:
        values = [v for (t, _), v in self._by_partition.items() if t == topic]
        self.gauge.labels(topic=topic).set(max(values, default=0))


class ArchiveMetrics:
    """The archiver's families: what it wrote, and how far behind the topics it is."""

    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = "") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.prefix = prefix
        process_families(self.registry)
        self.messages = Counter(
            "archived_messages_total",
            "Messages written to the archive's Parquet files.",
            ["topic"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.files = Counter(
            "archive_files_total",
            "Parquet files the archiver wrote.",
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.lag = ConsumerLag(self.registry)

    def written(self, topic: str, count: int) -> None:
        """One file of ``count`` messages of ``topic`` is durable."""
        self.messages.labels(topic=topic_label(topic, self.prefix)).inc(count)
        self.files.inc()

    def positions(self, behind: Iterable[tuple[str, int, int | None]]) -> None:
        """Each assigned partition's lag, as ``(topic, partition, lag)``."""
        for topic, partition, value in behind:
            self.lag.observe(topic_label(topic, self.prefix), partition, value)
