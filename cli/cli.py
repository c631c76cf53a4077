"""The ``gpuyield`` command: one sub-command per capability.

Every command turns bad input into exit status 2 and one line on stderr that
names what is wrong; a Python traceback reaching a user is a bug.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpuyield.agents.planner import UnknownPreemptor, plan
from gpuyield.alerts_command import alerts_command
from gpuyield.archive_command import archive_command
from gpuyield.audit_command import audit_command
from gpuyield.broker_command import broker_command
from gpuyield.cli_io import fail, read_snapshot
from gpuyield.cli_render import explain_table
from gpuyield.config_command import config_command
from gpuyield.demo_command import demo_command
from gpuyield.doctor_command import doctor_command
from gpuyield.node_agent_command import node_agent_command
from gpuyield.replay_command import replay_command
from gpuyield.schemas.export import write_schemas
from gpuyield.simulate_command import simulate_command
from gpuyield.status_command import status_command
from gpuyield.topics_command import topics_command
from gpuyield.watch_command import watch_command
from gpuyield.worker_command import worker_command

app = typer.Typer(
    name="gpuyield",
    help="Graceful, gang- and checkpoint-aware preemption for shared GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command("plan")
def plan_command(
    snapshot: Annotated[str, typer.Argument(help="Snapshot JSON file, or - for standard input.")],
    preemptor: Annotated[
        str | None,
        typer.Option(help="The job to make room for (default: highest-priority pending job)."),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Print a readable table instead of the plan JSON.")
    ] = False,
    budget: Annotated[
        int | None, typer.Option(min=1, help="Search steps (default: the planner's).")
    ] = None,
) -> None:
    """Plan which pods to evict so the preemptor fits (format v1, byte-identical per input)."""
    snap = read_snapshot(snapshot)
    try:
        result = plan(snap, preemptor, budget=budget, explain=explain)
    except UnknownPreemptor as exc:
        fail(str(exc))
    if explain:
        explain_table(Console(width=max(Console().width, 140)), snap, result)
    else:
        sys.stdout.write(result.model_dump_json(exclude={"candidates"}, indent=2) + "\n")


@app.command("schemas")
def schemas_command(
    out: Annotated[Path, typer.Option(help="Directory to write the JSON Schemas into.")],
) -> None:
    """Write the JSON Schema of every wire model (snapshot, plan, ...)."""
    try:
        written = write_schemas(out)
    except OSError as exc:
        fail(f"{out}: cannot write schemas: {exc}")
    for path in written:
        typer.echo(str(path))


app.command("simulate")(simulate_command)
app.command("broker")(broker_command)
app.command("topics")(topics_command)
app.command("worker")(worker_command)
app.command("status")(status_command)
app.command("watch")(watch_command)
app.command("node-agent")(node_agent_command)
app.command("demo")(demo_command)
app.command("archive")(archive_command)
app.command("audit")(audit_command)
app.command("replay")(replay_command)
app.command("alerts")(alerts_command)
app.command("config")(config_command)
app.command("doctor")(doctor_command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: usage errors are one line too, never a boxed help.

    Click's exceptions are matched by shape (``format_message``, ``exit_code``)
    rather than by class: recent typer releases vendor their own copy of click.
    """
    try:
        code = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        sys.stderr.write("gpuyield: aborted\n")
        code = 130
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            app(args=["--help"], standalone_mode=False)
            raise SystemExit(2) from None
        describe = getattr(exc, "format_message", None)
        if describe is None:
            raise
        sys.stderr.write(f"gpuyield: {describe()} (see `gpuyield --help`)\n")
        code = getattr(exc, "exit_code", 2)
    raise SystemExit(code if isinstance(code, int) else 0)
