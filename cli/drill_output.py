"""What ``gpuyield demo --drill`` prints: the timeline, each budget met or missed, the resumes.

The same facts in two forms: rich tables for a person, one JSON document for
a machine (``--json``; the bench reads it). Both are built from the
``DrillReport`` alone, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuyield.agents.demo.drill_timeline import DrillReport
from gpuyield.agents.demo.scenario import DemoScenario
from gpuyield.agents.demo.tally import Tally


def drill_document(
    scenario: DemoScenario, report: DrillReport, tally: Tally, wall_s: float, error: str | None
) -> dict[str, Any]:
    return {
        "passed": report.passed and error is None,
        "nodes": len(scenario.nodes),
        "grace_s": scenario.grace_s,
        "peak_s": scenario.duration_s,
        "timeline": [asdict(s) for s in report.steps],
        "budgets": [asdict(b) for b in report.budgets],
        "victims": list(report.victims),
        "resumptions": [
            {
                "job": r.job,
                "checkpoint_step": r.yielded_at_step,
                "resumed_at_step": r.resumed_at_step,
            }
            for r in report.resumptions
        ],
        "decisions": tally.decisions,
        "yields": tally.yields(),
        "lost_gpu_seconds": round(tally.lost_gpu_seconds, 3),
        "wall_s": round(wall_s, 1),
        "error": error,
    }


def _s(value: float | None) -> str:
    return "-" if value is None else f"+{value:.2f} s"


def print_drill(console: Console, scenario: DemoScenario, report: DrillReport) -> None:
    timeline = Table(
        title=f"Drill timeline ({len(scenario.nodes)} nodes, grace {scenario.grace_s:g} s), "
        "from the burst's watch event",
        title_justify="left",
    )
    for column in ("step", "first", "last", "count", "detail"):
        timeline.add_column(
            column, justify="right" if column in ("first", "last", "count") else "left"
        )
    for step in report.steps:
        timeline.add_row(step.what, _s(step.first_s), _s(step.last_s), str(step.count), step.detail)
    console.print(timeline)
    budgets = Table(title="Budgets", title_justify="left")
    for column in ("budget", "limit", "took", "verdict", "detail"):
        budgets.add_column(column, justify="right" if column in ("limit", "took") else "left")
    for budget in report.budgets:
        budgets.add_row(
            budget.what,
            "-" if budget.limit_s is None else f"{budget.limit_s:g} s",
            "-" if budget.took_s is None else f"{budget.took_s:.2f} s",
            "[green]met[/green]" if budget.met else "[red]missed[/red]",
            budget.detail,
        )
    console.print(budgets)
    if report.resumptions:
        resumed = Table(title="Evicted and resumed", title_justify="left")
        for column in ("job", "checkpoint saved by the yield", "first step after the resume"):
            resumed.add_column(column, justify="left" if column == "job" else "right")
        for r in report.resumptions:
            resumed.add_row(
                r.job,
                "-" if r.yielded_at_step is None else str(r.yielded_at_step),
                "-" if r.resumed_at_step is None else str(r.resumed_at_step),
            )
        console.print(resumed)
    verdict = "passed: every budget met" if report.passed else "failed: a budget was missed"
    console.print(f"drill {verdict}", style="bold green" if report.passed else "bold red")
