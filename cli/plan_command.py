"""``gpuyield plan``: the planner on one snapshot file, plan JSON (or a table) out."""

from __future__ import annotations

import gc
import sys
from typing import Annotated

import typer

from gpuyield.agents.planner import UnknownPreemptor, cycle_collection_paused, plan
from gpuyield.cli_io import fail, read_snapshot


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
    # Reading a big snapshot allocates as much as planning it: the same pause covers both.
    with cycle_collection_paused():
        snap = read_snapshot(snapshot)
        # The snapshot lives until this one-shot process exits and holds no garbage:
        # frozen, no later collection (the one after the pause, the one at exit) walks
        # its objects again, which at 10,000 nodes cost more than writing the plan.
        gc.freeze()
        try:
            result = plan(snap, preemptor, budget=budget, explain=explain)
        except UnknownPreemptor as exc:
            fail(str(exc))
    if explain:
        # rich's tables only when asked for: the JSON path does not import them.
        from rich.console import Console

        from gpuyield.cli_render import explain_table

        explain_table(Console(width=max(Console().width, 140)), snap, result)
    else:
        sys.stdout.write(result.model_dump_json(exclude={"candidates"}, indent=2) + "\n")
