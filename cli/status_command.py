"""``gpuyield status``: the controller's live view, as tables.

Reads the view the worker keeps in Redis (``GPUYIELD_REDIS_URL``, or the
embedded Redis a local worker recorded in its state directory). A view older
than a few ticks is said to be stale: the worker may be down.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import redis
import typer
from rich.console import Console
from rich.table import Table

from gpuyield.cli_io import fail
from gpuyield.cli_options import SettingsFile
from gpuyield.endpoints import read_endpoints
from gpuyield.service_io import settings_or_fail
from gpuyield.streams.live_view_store import read_agents, read_view

STALE_AFTER_S = 30.0


def _when(at: float | None, now: float) -> str:
    if at is None:
        return "-"
    delta = at - now
    if abs(delta) < 1:
        return "now"
    return f"in {delta:.0f} s" if delta > 0 else f"{-delta:.0f} s ago"


def status_command(
    config: SettingsFile = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the view as JSON.")] = False,
) -> None:
    """Show jobs with their weights and cooldowns, pending demand, and yields in flight."""
    settings = settings_or_fail(config)
    endpoints = read_endpoints(settings)
    url = settings.redis_url or (endpoints.redis_url if endpoints else None)
    if url is None:
        fail(
            "no Redis to read: set GPUYIELD_REDIS_URL, or start `gpuyield worker` "
            f"with state directory {settings.state_dir}"
        )
    try:
        view = read_view(url, settings.cluster_id)
        agents = read_agents(url, settings.cluster_id)
    except (redis.RedisError, OSError) as exc:
        fail(f"{url}: cannot read the live view: {exc}")
    if view is None:
        if agents is not None and not as_json:  # a worker runs, but its decider publishes nothing
            render_agents(Console(), agents["agents"], time.time() - agents["updated_at"])
            fail(f"no live view for cluster '{settings.cluster_id}' in {url}: see the agents above")
        fail(f"no live view for cluster '{settings.cluster_id}' in {url}: is a worker running?")
    if agents is not None:  # the agents' health is stored beside the view (issue 11)
        view = {**view, "agents": agents["agents"], "agents_checked_at": agents["updated_at"]}
    if as_json:
        sys.stdout.write(json.dumps(view, indent=2, sort_keys=True) + "\n")
        return
    render(Console(), view, time.time())


def render(console: Console, view: dict[str, Any], now: float) -> None:
    updated = view["updated_at"]
    age = now - updated
    stamp = datetime.fromtimestamp(updated, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    console.print(
        f"[bold]gpuyield[/bold] live view at {stamp}"
        + (f" [red](stale: {age:.0f} s old)[/red]" if age > STALE_AFTER_S else "")
    )
    jobs = Table(title="Jobs", title_justify="left")
    for column in ("job", "queue", "state", "GPUs", "W_eff", "progress", "evictions", "cooldown"):
        jobs.add_column(column, justify="right" if column in ("GPUs", "W_eff") else "left")
    for job in sorted(view["jobs"], key=lambda j: (-j["w_eff"], j["job"])):
        state = job["state"] + (" (leaving)" if job["leaving_gpus"] else "")
        jobs.add_row(
            job["job"],
            job["queue"],
            state,
            f"{job['gpus']}/{job['wanted_gpus']}",
            f"{job['w_eff']:.1f}",
            f"{job['progress']:.0%}",
            str(job["evictions"]),
            _when(job["cooldown_until"], now),
        )
    console.print(jobs)
    if view.get("agents"):
        render_agents(console, view["agents"], now - view["agents_checked_at"])
    demands = Table(title="Pending demand", title_justify="left")
    for column in ("preemptor", "waiting on", "yield deadline", "last round"):
        demands.add_column(column)
    for demand in view["demands"]:
        demands.add_row(
            demand["job"],
            ", ".join(demand["victims"]) or "-",
            _when(demand["deadline"], now),
            _when(demand["last_round"], now),
        )
    console.print(demands)
    yields = Table(title="Yields in flight", title_justify="left")
    for column in ("job", "node", "pods", "for", "deadline"):
        yields.add_column(column)
    for command in view["yields_in_flight"]:
        yields.add_row(
            command["job"],
            command["node"],
            ", ".join(command["pods"]),
            command["preemptor"] or "-",
            _when(command["deadline"], now),
        )
    console.print(yields)
    if view.get("aborted_outside"):  # issue 9; older views lack the key
        outside = Table(title="Aborted outside gpuyield", title_justify="left")
        for column in ("job", "queue", "phase", "gpuyield"):
            outside.add_column(column)
        for job in view["aborted_outside"]:
            outside.add_row(
                job["job"],
                job["queue"],
                job["phase"],
                "adopted: resumes when it fits"
                if job["adopted"]
                else "left alone (setting adopt_aborted_jobs adopts it)",
            )
        console.print(outside)
    if view["recent_alerts"]:
        alerts = Table(title="Recent alerts", title_justify="left")
        for column in ("kind", "job", "raised"):
            alerts.add_column(column)
        for alert in view["recent_alerts"]:
            alerts.add_row(alert["kind"], alert["job"] or "-", _when(alert["raised_at"], now))
        console.print(alerts)


def render_agents(console: Console, agents: list[dict[str, Any]], age_s: float) -> None:
    """The worker agents: ok, or stalled with input waiting (``streams/agent_stalls.py``)."""
    table = Table(
        title="Agents" + (f" (checked {age_s:.0f} s ago)" if age_s > STALE_AFTER_S else ""),
        title_justify="left",
    )
    for column in ("agent", "state", "waiting", "stalled for", "stalled at"):
        table.add_column(column, justify="right" if column == "waiting" else "left")
    for agent in agents:
        stalled = agent["state"] == "stalled"
        table.add_row(
            agent["agent"],
            "[red]stalled[/red]" if stalled else agent["state"],
            str(agent["waiting"]),
            f"{agent['stalled_for_s']:.0f} s" if stalled else "-",
            ", ".join(agent["stalled_partitions"]) or "-",
        )
    console.print(table)
