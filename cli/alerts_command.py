"""``gpuyield alerts``: the alert stream, printed or forwarded.

- ``gpuyield alerts [--since T] [--kind K] [--json]`` prints the alerts on
  the topic now (a table, or JSON lines) and exits;
- ``--follow`` keeps printing new ones until Ctrl-C;
- ``--webhook URL`` / ``--alertmanager URL`` forward them (at least once, in
  order, deduplicated by id; see ``gpuyield.streams.alert_delivery``) until
  Ctrl-C or SIGTERM, resuming after the last delivered alert when restarted.
"""

from __future__ import annotations

import hashlib
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpuyield.audit_command import parse_time
from gpuyield.cli_io import fail
from gpuyield.cli_options import SettingsFile
from gpuyield.endpoints import recorded_bootstrap
from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import Alert, AlertKind
from gpuyield.service_io import configure_logging, settings_or_fail
from gpuyield.streams.alert_delivery import (
    AlertmanagerDelivery,
    Delivery,
    Forwarder,
    WebhookDelivery,
)
from gpuyield.streams.kafka_client import kafka_python_kwargs
from gpuyield.streams.kafka_python_close import close_consumer
from gpuyield.streams.shutdown import ShutdownDeadline
from gpuyield.streams.topic_reader import read_topics
from gpuyield.streams.topics import ALERTS


def _row(alert: Alert) -> list[str]:
    when = datetime.fromtimestamp(alert.raised_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return [
        when,
        alert.state.value,
        alert.severity,
        alert.kind.value,
        alert.job or "-",
        alert.message,
    ]


def _follow(consumer: Any, stop: threading.Event) -> Iterator[tuple[int, bytes | None]]:
    while not stop.is_set():
        for records in consumer.poll(timeout_ms=500).values():
            for record in records:
                yield record.offset, record.value


def alerts_command(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new alerts.")
    ] = False,
    since: Annotated[
        str | None, typer.Option(help="Only alerts raised from this time (Unix s or ISO 8601).")
    ] = None,
    kind: Annotated[
        list[str] | None, typer.Option("--kind", help="Only this kind (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines, one alert each.")] = False,
    webhook: Annotated[
        str | None, typer.Option("--webhook", help="Forward every alert to this URL (POST).")
    ] = None,
    alertmanager: Annotated[
        str | None, typer.Option("--alertmanager", help="Forward to Alertmanager at this URL.")
    ] = None,
    config: SettingsFile = None,
    loglevel: Annotated[str, typer.Option(help="Log level (forwarding).")] = "info",
) -> None:
    """Print the alert stream, or forward it to a webhook or Alertmanager."""
    settings = settings_or_fail(config)
    known = {k.value for k in AlertKind}
    for name in kind or ():
        if name not in known:
            fail(f"--kind: unknown alert kind {name!r} (one of {', '.join(sorted(known))})")
    kinds = frozenset(kind) if kind else None
    start = parse_time(since, "--since")
    if webhook and alertmanager:
        fail("--webhook and --alertmanager: choose one receiver")
    servers = recorded_bootstrap(settings)
    if not servers:
        fail("no Kafka to read: set GPUYIELD_KAFKA_BOOTSTRAP or start gpuyield worker")
    topic = settings.topic_prefix + ALERTS
    kwargs = kafka_python_kwargs(settings, servers)
    if webhook or alertmanager:
        configure_logging(loglevel)
        delivery: Delivery = (
            WebhookDelivery(webhook) if webhook else AlertmanagerDelivery(str(alertmanager))
        )
        _forward(
            kwargs,
            topic,
            delivery,
            str(webhook or alertmanager),
            settings.app_id,
            kinds,
            settings.shutdown_timeout_s,
        )
        return
    console = Console()
    table = Table()
    for column in ("raised", "state", "severity", "kind", "job", "message"):
        table.add_column(column)

    def show(value: bytes | None) -> None:
        try:
            alert = decode(Alert, value)
        except MessageError:
            return
        if kinds is not None and alert.kind.value not in kinds:
            return
        if start is not None and alert.raised_at < start:
            return
        if as_json:
            sys.stdout.write(encode(alert).decode() + "\n")
            sys.stdout.flush()
        elif follow:
            console.print("  ".join(_row(alert)))
        else:
            table.add_row(*_row(alert))

    for message in read_topics(kwargs, [topic]):
        show(message.value)
    if not follow:
        if not as_json:
            console.print(table)
        return
    from kafka import KafkaConsumer, TopicPartition

    stop = _stop_on_signals(settings.shutdown_timeout_s)
    consumer = KafkaConsumer(**kwargs, enable_auto_commit=False, group_id=None)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_end(partition)
        for _, value in _follow(consumer, stop):
            show(value)
    finally:
        close_consumer(consumer)


def _stop_on_signals(bound_s: float) -> threading.Event:
    """Set on SIGINT or SIGTERM; the process ends within ``bound_s`` of it whatever happens."""
    stop = threading.Event()
    deadline = ShutdownDeadline("gpuyield alerts", bound_s)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, deadline.then(stop.set))
    return stop


def _forward(
    kwargs: dict[str, Any],
    topic: str,
    delivery: Delivery,
    receiver: str,
    app_id: str,
    kinds: frozenset[str] | None,
    shutdown_timeout_s: float,
) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    stop = _stop_on_signals(shutdown_timeout_s)
    # One group per receiver: two receivers each get every alert.
    group = f"{app_id}-alerts-{hashlib.sha256(receiver.encode()).hexdigest()[:12]}"
    consumer = KafkaConsumer(
        **kwargs, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    partition = TopicPartition(topic, 0)

    def commit(offset: int) -> None:
        consumer.commit({partition: OffsetAndMetadata(offset, "", -1)})

    try:
        if topic not in consumer.topics():
            fail(f"no topic {topic} on this Kafka: is the worker running?")
        consumer.assign([partition])
        committed = consumer.committed(partition)
        if committed is None:
            consumer.seek_to_beginning(partition)
        else:
            consumer.seek(partition, committed)
        forwarder = Forwarder(delivery, commit, kinds=kinds, should_stop=stop.is_set)
        typer.echo(f"gpuyield alerts: forwarding {topic} to {receiver}", err=True)
        forwarder.handle_all(_follow(consumer, stop))
    finally:
        close_consumer(consumer)
