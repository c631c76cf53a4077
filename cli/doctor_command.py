"""``gpuyield doctor``: seed 003's configuration mistakes, found in a cluster dump.

    kubectl get nodes,pods,queues,podgroups,vcjob -A -o json | gpuyield doctor -
    kubectl get nodes,pods,queues,podgroups,vcjob -A -o json > dump.json
    kubectl -n volcano-system get configmap volcano-scheduler-configmap -o json >> ...

The checks are pure (``gpuyield.agents.controller.doctor``); this command reads
the dump, prints a table (or JSON lines with ``--json``) and exits 0 when
nothing is wrong, 1 when something is, 2 when the input cannot be read.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpuyield.agents.controller.doctor import DoctorFinding, diagnose
from gpuyield.cli_io import fail, read_source
from gpuyield.service_io import settings_or_fail


def dump_objects(text: str, name: str) -> list[dict[str, Any]]:
    """The objects of a ``kubectl get ... -o json`` dump (a List, a list, or one object)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{name}: not JSON ({exc.msg} at line {exc.lineno}); use kubectl get ... -o json")
    if isinstance(document, dict) and isinstance(document.get("items"), list):
        items = document["items"]
    elif isinstance(document, list):
        items = document
    elif isinstance(document, dict) and "kind" in document:
        items = [document]
    else:
        fail(f"{name}: not a Kubernetes object list (no items)")
    objects = [item for item in items if isinstance(item, dict)]
    if len(objects) != len(items):
        fail(f"{name}: an item of the list is not an object")
    return objects


def doctor_command(
    dump: Annotated[
        str,
        typer.Argument(
            help="The dump: kubectl get nodes,pods,queues,podgroups,vcjob -A -o json (- for stdin)."
        ),
    ],
    scheduler_conf: Annotated[
        Path | None,
        typer.Option(
            help="Volcano's scheduler configuration (volcano-scheduler.conf), if the dump "
            "holds no scheduler ConfigMap."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per finding.")] = False,
    config: Annotated[
        Path | None, typer.Option("--config", help="Settings file (GPUYIELD_NAME=value lines).")
    ] = None,
) -> None:
    """Check a cluster dump for the mistakes that break graceful preemption."""
    settings = settings_or_fail(config)
    text, name = read_source(dump, "a JSON dump")
    objects = dump_objects(text, name)
    conf_text = None
    if scheduler_conf is not None:
        conf_text, _ = read_source(str(scheduler_conf), "volcano-scheduler.conf")
    findings = diagnose(objects, settings.controller, time.time(), conf_text)
    if as_json:
        for finding in findings:
            typer.echo(finding.model_dump_json())
    else:
        _table(findings, len(objects))
    raise typer.Exit(1 if findings else 0)


def _table(findings: list[DoctorFinding], objects: int) -> None:
    console = Console()
    if not findings:
        console.print(f"{objects} objects checked: nothing wrong.")
        return
    table = Table(title=f"{len(findings)} finding(s) in {objects} objects")
    for column in ("check", "severity", "object"):
        table.add_column(column, no_wrap=True)
    for column in ("message", "fix"):
        table.add_column(column, overflow="fold", min_width=20)
    for f in findings:
        table.add_row(f.check, f.severity, f.object, f.message, f.fix)
    console.print(table)
