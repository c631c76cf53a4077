"""``gpuyield audit JOB``: one job's history, from Kafka or from the archive.

Exit status: 0 with the history, 1 when no recorded message names the job, 2
on bad input (an unreadable archive, a bad time, no Kafka to read).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuyield.agents.controller.audit import TOPIC_MODELS, JobHistory, Recorded, history
from gpuyield.cli_io import fail
from gpuyield.cli_options import ArchiveSource, KafkaSource, SettingsFile
from gpuyield.endpoints import recorded_bootstrap
from gpuyield.service_io import settings_or_fail
from gpuyield.streams.archive import Archive
from gpuyield.streams.kafka_client import kafka_python_kwargs
from gpuyield.streams.topic_reader import read_topics


def parse_time(value: str | None, option: str) -> float | None:
    """Unix seconds, or an ISO 8601 time (UTC when it names no zone)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        fail(f"{option}: not a time (Unix seconds or ISO 8601): {value!r}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _from_archive(
    url: str, prefix: str, since: float | None, until: float | None
) -> Iterable[Recorded]:
    try:
        table = Archive(url).read([prefix + name for name in TOPIC_MODELS])
    except (OSError, ValueError) as exc:
        fail(f"--archive {url}: {exc}")
    columns = table.to_pydict()
    for topic, partition, offset, stamp, value in zip(
        columns["topic"],
        columns["partition"],
        columns["offset"],
        columns["timestamp_ms"],
        columns["value"],
        strict=True,
    ):
        if not _within(stamp, since, until):
            continue
        yield Recorded(topic.removeprefix(prefix), partition, offset, stamp, value)


def _within(stamp_ms: int | None, since: float | None, until: float | None) -> bool:
    if stamp_ms is None:
        return since is None and until is None
    if since is not None and stamp_ms < since * 1000:
        return False
    return not (until is not None and stamp_ms > until * 1000)


def _from_kafka(
    kwargs: dict[str, object], prefix: str, since: float | None, until: float | None
) -> Iterable[Recorded]:
    for m in read_topics(
        dict(kwargs),
        [prefix + name for name in TOPIC_MODELS],
        since_ms=None if since is None else int(since * 1000),
        until_ms=None if until is None else int(until * 1000),
    ):
        yield Recorded(m.topic.removeprefix(prefix), m.partition, m.offset, m.timestamp_ms, m.value)


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def render(found: JobHistory, console: Console) -> None:
    console.print(f"[bold]{found.job}[/bold]: {found.messages} recorded messages")
    facts = Table(show_header=False)
    facts.add_row("submitted", _when(found.submitted_at))
    facts.add_row("started", _when(found.started_at))
    p = found.progress
    facts.add_row(
        "progress",
        f"{p.heartbeats} heartbeats, steps {p.first_step}..{p.last_step}, "
        f"{p.checkpoints} checkpoints (last at step {p.last_checkpoint_step}, "
        f"{_when(p.last_checkpoint_at)})",
    )
    facts.add_row("suspended", ", ".join(_when(t) for t in found.suspended_at) or "never")
    facts.add_row(
        "resumed",
        ", ".join(f"{_when(r.issued_at)} on {r.node}" for r in found.resumed) or "never",
    )
    if found.resumed_from_step is not None:
        facts.add_row("resumed from step", str(found.resumed_from_step))
    facts.add_row("finished", f"{_when(found.finished_at)} {found.final_phase or ''}".strip())
    console.print(facts)
    if found.considered:
        table = Table(title="decisions that considered it")
        for column in ("at", "preemptor", "role", "rule", "W_eff", "lost GPU-s"):
            table.add_column(column)
        for c in found.considered:
            table.add_row(
                _when(c.at),
                c.preemptor,
                c.role,
                c.rule,
                "-" if c.w_eff is None else f"{c.w_eff:.3f}",
                "-" if c.lost_gpu_seconds is None else f"{c.lost_gpu_seconds:.0f}",
            )
        console.print(table)
    if found.yields:
        table = Table(title="yields")
        for column in ("issued", "node", "pods", "outcome", "seconds", "GPU-s lost", "step"):
            table.add_column(column)
        for y in found.yields:
            table.add_row(
                _when(y.issued_at),
                y.node,
                ", ".join(y.pods),
                y.outcome or "no ack",
                "-" if y.seconds_taken is None else f"{y.seconds_taken:.1f}",
                "-" if y.gpu_seconds_lost is None else f"{y.gpu_seconds_lost:.0f}",
                "-" if y.checkpoint_step is None else str(y.checkpoint_step),
            )
        console.print(table)
    for alert in found.alerts:
        console.print(f"alert: {alert}")
    if found.unreadable:
        console.print(f"({found.unreadable} unreadable messages were skipped)")


def audit_command(
    job: Annotated[str, typer.Argument(help="The job, namespace/name.")],
    archive: ArchiveSource = None,
    bootstrap: KafkaSource = None,
    since: Annotated[
        str | None, typer.Option(help="From this time (Unix seconds or ISO 8601).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Up to this time (Unix seconds or ISO 8601).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON.")] = False,
    config: SettingsFile = None,
) -> None:
    """Print one job's history: progress, the decisions that weighed it, its yields."""
    settings = settings_or_fail(config)
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    if archive is not None and bootstrap is not None:
        fail("--archive and --bootstrap: choose one source")
    prefix = settings.topic_prefix
    if archive is not None:
        recorded = list(_from_archive(archive, prefix, start, end))
    else:
        servers = bootstrap.split(",") if bootstrap else recorded_bootstrap(settings)
        if not servers:
            fail("nothing to read: pass --archive DIR or --bootstrap (or GPUYIELD_KAFKA_BOOTSTRAP)")
        from kafka.errors import KafkaError

        try:
            recorded = list(_from_kafka(kafka_python_kwargs(settings, servers), prefix, start, end))
        except (KafkaError, OSError) as exc:
            fail(f"cannot read Kafka at {','.join(servers)}: {exc}")
    found = history(job, recorded)
    if found is None:
        sys.stderr.write(f"gpuyield: no recorded message names {job}\n")
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(json.dumps(found.model_dump(mode="json"), indent=2) + "\n")
        return
    render(found, Console())
