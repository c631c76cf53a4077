"""``gpuyield archive``: every gpuyield topic, followed and written to Parquet files.

A subscriber like any other: it reads, it never writes to Kafka (beyond its
consumer group's committed offsets), and any number of them can run beside
the controller. ``deploy/`` runs one; ``gpuyield demo --archive DIR`` keeps
one for its run. The format and the guarantees are in
``gpuyield.streams.archive``.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Annotated

import typer

from gpuyield.cli_io import fail
from gpuyield.cli_options import SettingsFile
from gpuyield.endpoints import recorded_bootstrap
from gpuyield.service_io import MetricsPort, configure_logging, metrics_served, settings_or_fail
from gpuyield.streams.archive import Archive, Archiver
from gpuyield.streams.kafka_client import kafka_python_kwargs
from gpuyield.streams.metrics import ArchiveMetrics
from gpuyield.streams.shutdown import ShutdownDeadline
from gpuyield.streams.topics import registry

REFRESH_TOPICS_S = 30.0
"""How often the archiver looks for topics created after it started."""


def archive_command(
    out: Annotated[
        str, typer.Option("--out", help="Directory or fsspec URL (s3://..., gs://...) to write.")
    ],
    flush_records: Annotated[
        int, typer.Option(min=1, help="Messages per file (a partition's batch is written then).")
    ] = 5000,
    flush_s: Annotated[
        float, typer.Option(min=0.1, help="Seconds a partial batch waits before it is written.")
    ] = 10.0,
    config: SettingsFile = None,
    loglevel: Annotated[str, typer.Option(help="Log level.")] = "info",
    metrics_port: MetricsPort = None,
) -> None:
    """Follow every gpuyield topic and write it to Parquet, until Ctrl-C or SIGTERM."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    settings = settings_or_fail(config)
    configure_logging(loglevel)
    bootstrap = recorded_bootstrap(settings)
    if not bootstrap:
        fail("no Kafka to archive: set GPUYIELD_KAFKA_BOOTSTRAP or start gpuyield worker")
    try:
        archive = Archive(out)
    except (ValueError, ImportError, OSError) as exc:
        fail(f"--out {out}: {exc}")
    stop = threading.Event()
    deadline = ShutdownDeadline("gpuyield archive", settings.shutdown_timeout_s)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, deadline.then(stop.set))
    topics = [spec.name for spec in registry(settings.topic_partitions, settings.topic_prefix)]
    try:
        consumer = KafkaConsumer(
            **kafka_python_kwargs(settings, bootstrap),
            group_id=f"{settings.app_id}-archive",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            client_id="gpuyield-archive",
        )
    except (KafkaError, OSError) as exc:
        fail(f"cannot reach Kafka at {','.join(bootstrap)}: {exc}")
    metrics = ArchiveMetrics(prefix=settings.topic_prefix)
    with metrics_served(metrics_port, settings, metrics.registry) as served:
        archiver = Archiver(
            consumer,
            archive,
            topics,
            flush_records=flush_records,
            flush_s=flush_s,
            metrics=metrics if served is not None else None,
        )
        typer.echo(f"gpuyield archive: {','.join(bootstrap)} -> {out}", err=True)
        try:
            refreshed = 0.0
            while not stop.is_set():
                if time.monotonic() - refreshed >= REFRESH_TOPICS_S:
                    archiver.assign()
                    refreshed = time.monotonic()
                archiver.poll(timeout_ms=500)
        finally:
            archiver.close()
