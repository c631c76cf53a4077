"""``gpuyield topics``: the topic registry, for people (a table) or tools (``--json``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuyield.service_io import settings_or_fail
from gpuyield.streams.topics import DAY_MS, HOUR_MS, TopicSpec, registry


def retention_text(retention_ms: int | None) -> str:
    """``7 days`` rather than ``604800000``; other values stay in milliseconds."""
    if retention_ms is None:
        return "broker default"
    if retention_ms % DAY_MS == 0:
        days = retention_ms // DAY_MS
        return f"{days} day{'s' if days != 1 else ''}"
    if retention_ms % HOUR_MS == 0:
        hours = retention_ms // HOUR_MS
        return f"{hours} hour{'s' if hours != 1 else ''}"
    return f"{retention_ms} ms"


def topics_table(specs: tuple[TopicSpec, ...]) -> Table:
    table = Table(title="gpuyield topics", show_lines=True)
    for header, justify in (
        ("topic", "left"),
        ("key", "left"),
        ("schema", "left"),
        ("partitions", "right"),
        ("cleanup", "left"),
        ("retention", "right"),
        ("why", "left"),
    ):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for spec in specs:
        table.add_row(
            spec.name,
            spec.key,
            spec.schema,
            str(spec.partitions),
            spec.cleanup_policy,
            retention_text(spec.retention_ms),
            spec.why,
        )
    return table


def topics_command(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the registry as JSON instead of a table.")
    ] = False,
) -> None:
    """List the controller's topics: key, schema, partitions, cleanup and retention."""
    settings = settings_or_fail()
    specs = registry(settings.topic_partitions, max_message_bytes=settings.kafka_max_message_bytes)
    if as_json:
        sys.stdout.write(json.dumps([spec.describe() for spec in specs], indent=2) + "\n")
    else:
        Console(width=max(Console().width, 160)).print(topics_table(specs))
