"""``gpuyield replay``: re-derive every decision from the record, or under another policy.

Reads the decider's journal, its inputs and the published decisions and
commands from Kafka (``--bootstrap``) or the archive (``--archive DIR``) and
hands them to ``gpuyield.agents.controller.replay``. Exit status: 0 when
every derived decision and command is identical to the recorded one (or,
with nothing recorded, when it could derive them), 1 when anything differs,
2 on bad input (no record, a record that cannot be replayed, a bad option).
A what-if (``--policy FILE`` or ``--set NAME=VALUE``) exits 0 unless the
input is bad.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from gpuyield.agents.controller.decider import INPUT_MODELS
from gpuyield.agents.controller.replay import (
    Compared,
    Position,
    ReplayError,
    ReplayReport,
    RunRecord,
    WhatIf,
    Window,
    compare,
    derive,
    what_if,
)
from gpuyield.audit_command import parse_time
from gpuyield.cli_io import fail
from gpuyield.cli_options import ArchiveSource, KafkaSource, SettingsFile
from gpuyield.endpoints import recorded_bootstrap
from gpuyield.schemas.config import KNOBS, ControllerConfig, with_knobs
from gpuyield.schemas.errors import explain_validation_error
from gpuyield.service_io import settings_or_fail
from gpuyield.streams.archive import Archive
from gpuyield.streams.kafka_client import kafka_python_kwargs
from gpuyield.streams.topic_reader import read_topics
from gpuyield.streams.topics import DECIDER_JOURNAL, DECISIONS, YIELD_COMMANDS


def read_record(messages: Iterable[tuple[str, int, int, bytes | None]], prefix: str) -> RunRecord:
    """A ``RunRecord`` from (topic, partition, offset, value) messages of the recorded topics."""
    journal: list[tuple[int, bytes | None]] = []
    inputs: dict[Position, bytes | None] = {}
    decisions: list[tuple[int, bytes | None]] = []
    commands: list[tuple[int, int, bytes | None]] = []
    inputs_wanted = {prefix + name for name in INPUT_MODELS}
    for topic, partition, offset, value in messages:
        if topic == prefix + DECIDER_JOURNAL:
            journal.append((offset, value))
        elif topic in inputs_wanted:
            inputs[(topic, partition, offset)] = value
        elif topic == prefix + DECISIONS:
            decisions.append((offset, value))
        elif topic == prefix + YIELD_COMMANDS:
            commands.append((partition, offset, value))
    return RunRecord(
        journal=sorted(journal, key=lambda j: j[0]),
        inputs=inputs,
        decisions=[v for _, v in sorted(decisions, key=lambda d: d[0])],
        commands=[v for _, _, v in sorted(commands, key=lambda c: (c[0], c[1]))],
        prefix=prefix,
    )


def recorded_topics(prefix: str) -> list[str]:
    return [prefix + t for t in (DECIDER_JOURNAL, *INPUT_MODELS, DECISIONS, YIELD_COMMANDS)]


def _from_archive(url: str, prefix: str) -> RunRecord:
    try:
        columns = Archive(url).read(recorded_topics(prefix)).to_pydict()
    except (OSError, ValueError) as exc:
        fail(f"--archive {url}: {exc}")
    return read_record(
        zip(
            columns["topic"],
            columns["partition"],
            columns["offset"],
            columns["value"],
            strict=True,
        ),
        prefix,
    )


def _from_kafka(kwargs: dict[str, Any], prefix: str) -> RunRecord:
    return read_record(
        (
            (m.topic, m.partition, m.offset, m.value)
            for m in read_topics(kwargs, recorded_topics(prefix))
        ),
        prefix,
    )


def knob_values(policy: Path | None, settings: list[str]) -> dict[str, Any]:
    """The knobs a what-if changes: a JSON or YAML file of knob values, then each --set."""
    values: dict[str, Any] = {}
    if policy is not None:
        try:
            loaded = yaml.safe_load(policy.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            fail(f"--policy {policy}: cannot be read: {exc}")
        if not isinstance(loaded, dict):
            fail(f"--policy {policy}: expected a mapping of knob names to values")
        values.update(loaded)
    for item in settings:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            fail(f"--set {item!r}: expected NAME=VALUE (e.g. --set cooldown_s=1800)")
        values[name.strip().lower()] = value.strip()
    unknown = sorted(name for name in values if name not in KNOBS)
    if unknown:
        fail(
            f"unknown setting {', '.join(unknown)} (the decider's settings: "
            f"{', '.join(KNOBS)}; see gpuyield config)"
        )
    try:
        with_knobs(ControllerConfig(), values)
    except ValidationError as exc:
        fail(f"the what-if's settings: {explain_validation_error(exc)}")
    return values


def replay_command(
    archive: ArchiveSource = None,
    bootstrap: KafkaSource = None,
    since: Annotated[
        str | None, typer.Option(help="Compare from this time (Unix seconds or ISO 8601).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Compare up to this time (Unix seconds or ISO 8601).")
    ] = None,
    from_offset: Annotated[
        int | None, typer.Option(min=0, help="Compare from this offset of the decider's journal.")
    ] = None,
    to_offset: Annotated[
        int | None, typer.Option(min=0, help="Compare up to this offset of the decider's journal.")
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="What-if: a JSON or YAML file of setting values."),
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", help="What-if: NAME=VALUE, a setting of gpuyield config."),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="List identical decisions and commands too.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    config: SettingsFile = None,
) -> None:
    """Re-run the decider over the recorded inputs and compare with what it decided then."""
    loaded = settings_or_fail(config)
    changes = knob_values(policy, settings or [])
    window = Window(
        from_offset=from_offset,
        to_offset=to_offset,
        since=parse_time(since, "--since"),
        until=parse_time(until, "--until"),
    )
    if archive is not None and bootstrap is not None:
        fail("--archive and --bootstrap: choose one source")
    prefix = loaded.topic_prefix
    if archive is not None:
        record = _from_archive(archive, prefix)
    else:
        servers = bootstrap.split(",") if bootstrap else recorded_bootstrap(loaded)
        if not servers:
            fail("nothing to read: pass --archive DIR or --bootstrap (or GPUYIELD_KAFKA_BOOTSTRAP)")
        from kafka.errors import KafkaError

        try:
            record = _from_kafka(kafka_python_kwargs(loaded, servers), prefix)
        except (KafkaError, OSError) as exc:
            fail(f"cannot read Kafka at {','.join(servers)}: {exc}")
    if not record.journal and not record.inputs:
        fail("nothing to replay: the record holds neither a decider journal nor its inputs")
    try:
        baseline = derive(record, window=window, config=loaded.controller)
        if changes or policy is not None:
            changed = derive(
                record,
                window=window,
                config=loaded.controller,
                adjust=lambda c: with_knobs(c, changes),
            )
            report = what_if(record, baseline, changed)
            _print_what_if(report, changes, as_json)
            return
    except ReplayError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(f"the what-if's settings: {explain_validation_error(exc)}")
    result = compare(record, baseline)
    _print_report(result, as_json, show_all)
    if result.differences:
        raise typer.Exit(1)


def _print_report(report: ReplayReport, as_json: bool, show_all: bool) -> None:
    if as_json:
        doc = report.model_dump(mode="json")
        doc["differences"] = report.differences
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    console = Console(width=max(Console().width, 120))
    order = "in the journal's order" if report.journalled else "no journal: by their own times"
    console.print(
        f"replayed {report.steps} inputs ({order}), compared {report.compared_steps}; "
        f"{report.rejected_inputs} rejected as the decider rejected them; "
        f"{report.state_checks} restarts checked"
    )
    for mismatch in report.state_mismatches:
        console.print(f"[red]state differs[/red]: {mismatch}")
    if report.alerts:
        raised = ", ".join(f"{n} {kind}" for kind, n in report.alerts.items())
        console.print(f"alerts the replayed steps raised: {raised}")
    shown = [i for i in report.items if show_all or i.status != "identical"]
    if shown:
        table = Table()
        for column in ("kind", "at", "job", "outcome", "status", "id"):
            table.add_column(column)
        for item in shown:
            table.add_row(
                item.kind,
                f"{item.at:.3f}",
                item.job,
                item.outcome,
                _status(item),
                item.id[:8],
            )
        console.print(table)
    for item in report.items:
        if item.diff:
            console.print(f"{item.kind} {item.id} ({item.job}) differs:")
            for line in item.diff:
                console.print(f"  {line}", markup=False)
    counts: dict[str, int] = {}
    for item in report.items:
        counts[item.status] = counts.get(item.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing"
    if not report.recorded:
        console.print(f"{summary}: nothing was recorded to compare with, so each was derived only")
    elif report.differences:
        console.print(f"{summary}: {report.differences} differences")
    else:
        console.print(f"{summary}: identical to the record")


def _status(item: Compared) -> str:
    return {
        "identical": "identical",
        "different": "[red]different[/red]",
        "derived-only": "[red]derived, not recorded[/red]",
        "recorded-only": "[red]recorded, not derived[/red]",
        "derived": "derived (nothing recorded)",
    }[item.status]


def _print_what_if(report: WhatIf, changes: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(
            json.dumps({"settings": changes, **report.model_dump(mode="json")}, indent=2) + "\n"
        )
        return
    console = Console(width=max(Console().width, 120))
    settings = ", ".join(f"{k}={v}" for k, v in changes.items()) or "the same settings"
    against = "the record" if report.against == "record" else "a replay under the recorded policy"
    console.print(f"what-if ({settings}) against {against}", markup=False)
    console.print(report.open_loop, markup=False, soft_wrap=True)
    console.print(
        f"evictions: {report.baseline_evictions} recorded, {report.what_if_evictions} under "
        "the what-if"
    )
    for title, rows in (
        ("would not have happened", report.spared),
        ("would have happened instead", report.instead),
    ):
        table = Table(title=f"evictions that {title}")
        for column in ("at", "job", "preemptor", "lost GPU-s", "rule"):
            table.add_column(column)
        for e in rows:
            table.add_row(f"{e.at:.3f}", e.job, e.preemptor, f"{e.lost_gpu_seconds:.0f}", e.rule)
        console.print(table if rows else f"no evictions that {title}")
    console.print(
        f"work lost: {report.lost_gpu_seconds_spared:.0f} GPU-s spared, "
        f"{report.lost_gpu_seconds_instead:.0f} GPU-s lost instead"
    )
