"""``gpuyield broker``: the embedded Kafka broker in the foreground, with the topics made.

For a laptop or a demo: it prints the line to paste into the other
processes' environment and runs until Ctrl-C or SIGTERM, then stops the
broker (whose memory-only storage goes with it).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import Annotated

import typer
from aiokafka.errors import KafkaError

from gpuyield.cli_io import fail
from gpuyield.service_io import settings_or_fail
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedServiceError
from gpuyield.streams.shutdown import ShutdownDeadline
from gpuyield.streams.topics import TopicCreationError, changelogs, ensure_topics, registry


def broker_command(
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="Loopback port to listen on (default: a free one)."),
    ] = None,
) -> None:
    """Run the embedded Tansu broker with the controller's topics until Ctrl-C or SIGTERM."""
    settings = settings_or_fail()
    stop = threading.Event()
    on_signal = ShutdownDeadline("gpuyield broker", settings.shutdown_timeout_s).then(stop.set)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = EmbeddedBroker(port)
    try:
        try:
            broker.start()
            # Every topic, the worker's changelogs included: a client that meets a
            # missing topic makes Tansu create it with 4 partitions.
            specs = registry(
                settings.topic_partitions, settings.topic_prefix, settings.kafka_max_message_bytes
            ) + changelogs(settings.app_id, settings.topic_partitions)
            asyncio.run(ensure_topics({"bootstrap_servers": broker.bootstrap}, specs, 1))
        except (EmbeddedServiceError, TopicCreationError, KafkaError, OSError) as exc:
            fail(_one_line(exc))
        sys.stdout.write(f"GPUYIELD_KAFKA_BOOTSTRAP={broker.bootstrap}\n")
        sys.stdout.write("GPUYIELD_KAFKA_PROFILE=tansu\n")
        sys.stdout.flush()
        sys.stderr.write(
            f"gpuyield: broker pid {broker.pid} ready with {len(specs)} topics; "
            "Ctrl-C or SIGTERM stops it (its data is in memory only)\n"
        )
        while not stop.wait(0.5):
            if not broker.is_running():
                fail("the broker exited on its own")
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _one_line(exc: BaseException) -> str:
    """The error's first line, and the last line of a log tail when it carries one."""
    lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1].strip()}"
