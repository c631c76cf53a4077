"""``gpuyield doctor``: seed 003's configuration mistakes, found in the cluster or in a dump.

    gpuyield doctor                      # the live cluster (in-cluster, then the kubeconfig)
    gpuyield doctor --context prod       # another kubeconfig context
    kubectl get nodes,pods,queues,podgroups,vcjob -A -o json | gpuyield doctor -
    kubectl get nodes,pods,queues,podgroups,vcjob -A -o json > dump.json

Live, it lists what ``gpuyield watch`` watches through the Kubernetes API
(``streams/kube_cluster``) and GETs Volcano's scheduler ConfigMap as the
worker's start-up check does; the objects then go through the same pure checks
as a dump's (``gpuyield.agents.controller.doctor``). The controller's own live
view (Redis) is not used: it holds the decider's records, not the Volcano Jobs'
policies, pod grace periods and scheduler names the checks read. Prints a table
(or JSON lines with ``--json``) and exits 0 when nothing is wrong, 1 when
something is, 2 when the input cannot be read (one line, no traceback).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpuyield.agents.controller.doctor import DoctorFinding, diagnose
from gpuyield.cli_io import fail, read_source
from gpuyield.cli_options import SettingsFile
from gpuyield.service_io import settings_or_fail
from gpuyield.streams.settings import Settings


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
        str | None,
        typer.Argument(
            help="A dump: kubectl get nodes,pods,queues,podgroups,vcjob -A -o json (- for "
            "stdin). Without it, the live cluster is read."
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            help="Kubeconfig file for the live cluster (default: GPUYIELD_KUBECONFIG, "
            "in-cluster, then $KUBECONFIG / ~/.kube)."
        ),
    ] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context (live).")] = None,
    scheduler_conf: Annotated[
        Path | None,
        typer.Option(
            help="Volcano's scheduler configuration (volcano-scheduler.conf), if the dump "
            "holds no scheduler ConfigMap (live: instead of the cluster's)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per finding.")] = False,
    config: SettingsFile = None,
) -> None:
    """Check the cluster (or a dump of it) for the mistakes that break graceful preemption."""
    settings = settings_or_fail(config)
    conf_text, conf_from = None, "--scheduler-conf"
    if scheduler_conf is not None:
        conf_text, _ = read_source(str(scheduler_conf), "volcano-scheduler.conf")
    if dump is None:
        objects, name = _live_objects(settings, kubeconfig, context)
        if conf_text is None:
            conf_text, conf_from = _live_scheduler_conf(settings, kubeconfig, context)
    else:
        if kubeconfig is not None or context is not None:
            fail("--kubeconfig and --context are for the live cluster: give them or a dump")
        text, name = read_source(dump, "a JSON dump")
        objects = dump_objects(text, name)
    findings = diagnose(objects, settings.controller, time.time(), conf_text, conf_from)
    if as_json:
        for finding in findings:
            typer.echo(finding.model_dump_json())
    else:
        _table(findings, len(objects), name)
    raise typer.Exit(1 if findings else 0)


def _kube(settings: Settings, kubeconfig: str | None, context: str | None) -> Any:
    from gpuyield.streams.volcano_config import kube_configuration

    if kubeconfig is None and context is None:
        kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
        context = settings.kube_context
    configuration = kube_configuration(kubeconfig, context)
    if isinstance(configuration, str):
        fail(f"cannot load the Kubernetes configuration: {configuration}")
    return configuration


def _live_objects(
    settings: Settings, kubeconfig: str | None, context: str | None
) -> tuple[list[dict[str, Any]], str]:
    from gpuyield.streams.kube_cluster import ClusterUnreadable, read_cluster

    configuration = _kube(settings, kubeconfig, context)
    try:
        return read_cluster(configuration), str(configuration.host)
    except ClusterUnreadable as exc:
        fail(str(exc))


def _live_scheduler_conf(
    settings: Settings, kubeconfig: str | None, context: str | None
) -> tuple[str | None, str]:
    """Volcano's scheduler configuration from its ConfigMap, or None (said on stderr) when
    it cannot be read: the other checks still stand."""
    from gpuyield.streams.volcano_config import (
        ConfigMapKey,
        ConfigMapUnreadable,
        read_config_map_key,
    )

    where = ConfigMapKey(
        settings.volcano_conf_namespace,
        settings.volcano_conf_configmap,
        settings.volcano_conf_key,
    )
    read = read_config_map_key(where, _kube(settings, kubeconfig, context))
    if isinstance(read, ConfigMapUnreadable):
        sys.stderr.write(
            f"gpuyield: volcano-preempt-enabled not checked: cannot read {read.where} "
            f"({read.why.value}): {read.detail}\n"
        )
        return None, str(where)
    return read.text, f"ConfigMap/{where.configmap}"


def _table(findings: list[DoctorFinding], objects: int, name: str) -> None:
    console = Console()
    if not findings:
        console.print(f"{objects} objects checked ({name}): nothing wrong.")
        return
    table = Table(title=f"{len(findings)} finding(s) in {objects} objects ({name})")
    for column in ("check", "severity", "object"):
        table.add_column(column, no_wrap=True)
    for column in ("message", "fix"):
        table.add_column(column, overflow="fold", min_width=20)
    for f in findings:
        table.add_row(f.check, f.severity, f.object, f.message, f.fix)
    console.print(table)
