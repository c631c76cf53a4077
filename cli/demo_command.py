"""``gpuyield demo``: the whole system on this machine, then the comparison with stock preemption.

Starts its own embedded broker and Redis (never the configured ones: it
publishes a made-up cluster), the worker, a node agent per simulated node and
the simulated Volcano cluster with real trainer processes, plays the story of
``gpuyield.agents.demo.scenario``, and prints what happened: decisions,
yields by outcome, work lost, where each suspended job started again, and
what the simulator says stock Volcano preemption would have done with the
same workload. Its files (logs, checkpoints) live in a temporary directory,
under ``$GPUYIELD_STATE_DIR`` when that is set (in the environment or the
settings file), removed afterwards unless ``--keep`` (or an error: then the
error line names it). The settings are checked at start like every
command's; the demo runs its own deployment (``timing.demo_settings``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from aiokafka.errors import KafkaError
from redis.exceptions import RedisError
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpuyield.agents.demo.comparison import PRIOR_H, compare
from gpuyield.agents.demo.drill import (
    DEFAULT_NODES,
    EXIT_GRACE_S,
    GRACE_S,
    MIN_NODES,
    PEAK_S,
    describe_drill,
    drill_node_agent,
    drill_scenario,
)
from gpuyield.agents.demo.drill_run import Drill
from gpuyield.agents.demo.pods import find_train_tiny
from gpuyield.agents.demo.run import Demo, DemoError, DemoOptions, DemoResult, DemoView
from gpuyield.agents.demo.scenario import SPEED, DemoScenario, demo_scenario, describe
from gpuyield.agents.demo.tally import LOG_LINES
from gpuyield.cli_io import fail
from gpuyield.drill_output import drill_document, print_drill
from gpuyield.schemas.simulation import PolicyMetrics
from gpuyield.service_io import traced_settings_or_fail
from gpuyield.streams.archive import Archive
from gpuyield.streams.embedded import EmbeddedServiceError

REFRESH_S = 0.25


def demo_command(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print only the figures as JSON (no live view).")
    ] = False,
    duration_s: Annotated[
        float,
        typer.Option(
            min=10.0,
            max=600.0,
            help="About how long the demo runs; the production fine-tunes take half of it.",
        ),
    ] = 60.0,
    seed: Annotated[int, typer.Option(help="Seed of the workload (progress, run times).")] = 0,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the working directory (logs, checkpoints).")
    ] = False,
    archive: Annotated[
        str | None,
        typer.Option(
            "--archive",
            help="Keep the run's archive in DIR (or an fsspec URL), for gpuyield audit and replay.",
        ),
    ] = None,
    drill: Annotated[
        bool,
        typer.Option(
            "--drill",
            help="Run seed 001's pre-peak drill instead: an online burst of 64 GPUs reclaimed "
            "from offline research; prints the timeline and each budget; exit 1 if one is missed.",
        ),
    ] = False,
    nodes: Annotated[
        int, typer.Option(min=MIN_NODES, max=1024, help="--drill: nodes of 8 GPUs in the cluster.")
    ] = DEFAULT_NODES,
    grace_s: Annotated[
        float,
        typer.Option(
            "--grace", min=1.0, max=60.0, help="--drill: the yields' checkpoint grace, seconds."
        ),
    ] = GRACE_S,
    peak_s: Annotated[
        float,
        typer.Option("--peak", min=5.0, max=600.0, help="--drill: how long the burst serves."),
    ] = PEAK_S,
    exit_grace_s: Annotated[
        float,
        typer.Option(
            "--exit-grace",
            min=0.0,
            max=60.0,
            help="--drill: from a victim's checkpoint to its kill if it has not exited, seconds.",
        ),
    ] = EXIT_GRACE_S,
) -> None:
    """Run gpuyield end to end on this machine: a simulated Volcano cluster, real yields."""
    if drill:
        scenario = drill_scenario(nodes, seed=seed, peak_s=peak_s, grace_s=grace_s)
        lines = describe_drill(scenario, exit_grace_s)
    else:
        rng = random.Random(seed)  # noqa: S311 -- a seeded workload, not security
        scenario = demo_scenario(rng, seed=seed, duration_s=duration_s)
        lines = describe(scenario)
    train_tiny, note = find_train_tiny()
    # The settings are checked like every command's (a bad value: exit 2, one line), but the
    # demo uses only the state directory of them; it runs its own deployment
    # (agents/demo/timing.py: demo_settings).
    loaded = traced_settings_or_fail()
    explicit = loaded.sources["GPUYIELD_STATE_DIR"] != "default"
    base = str(loaded.settings.state_dir) if explicit else None
    try:
        if base is not None:
            Path(base).mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="gpuyield-demo-", dir=base))
    except OSError as exc:
        fail(f"cannot create the demo's working directory: {exc}")
    _log_to(workdir / "demo.log")
    console = Console(stderr=True)
    if note:
        console.print(
            f"note: {note}", style="yellow", markup=False, highlight=False, soft_wrap=True
        )
    if not as_json:
        for line in lines:
            console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)
    if archive is not None:
        try:
            Archive(archive)
        except (ValueError, ImportError, OSError) as exc:
            fail(f"--archive {archive}: {exc}")
    node_agent = drill_node_agent(exit_grace_s) if drill else None
    options = DemoOptions(scenario, workdir, train_tiny, archive, node_agent)
    demo = Drill(options) if drill else Demo(options)
    error: str | None = None
    result: DemoResult | None = None
    try:
        result = asyncio.run(_play(demo, console, quiet=as_json))
    except KeyboardInterrupt:
        sys.stderr.write("gpuyield: demo interrupted; every process it started is stopped\n")
        shutil.rmtree(workdir, ignore_errors=True)
        raise typer.Exit(130) from None
    except DemoError as exc:
        if not isinstance(demo, Drill):
            fail(f"demo: {exc} (logs in {workdir})")
        error = f"{exc} (logs in {workdir})"  # the drill still reports what it measured
    except (EmbeddedServiceError, KafkaError, RedisError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(f"demo: {first} (logs in {workdir})")
    if isinstance(demo, Drill):
        _finish_drill(demo, console, as_json=as_json, error=error, archive=archive)
        if error is None and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif keep:
            console.print(f"kept {workdir}", style="dim")
        if error is not None or not demo.report().passed:
            raise typer.Exit(1)
        return
    assert result is not None
    simulated, metrics = compare(scenario)
    days = simulated.days
    if as_json:
        document = {
            "decisions": result.tally.decisions,
            "yields": result.tally.yields(),
            "lost_gpu_seconds": round(result.tally.lost_gpu_seconds, 3),
            "policies": {name: m.model_dump(mode="json") for name, m in metrics.items()},
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        _summary(Console(), scenario, result, metrics, days)
    if archive is not None:
        console.print(f"the run's archive is in {archive} (gpuyield replay --archive)", style="dim")
    if keep:
        console.print(f"kept {workdir}", style="dim")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def _finish_drill(
    drill: Drill, console: Console, *, as_json: bool, error: str | None, archive: str | None
) -> None:
    """The drill's timeline and budgets (also after a failed run: what it measured)."""
    report = drill.report()
    scenario = drill.options.scenario
    wall_s = drill.view().elapsed_s
    if as_json:
        document = drill_document(scenario, report, drill.tally, wall_s, error)
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        print_drill(Console(), scenario, report)
    if error is not None:
        sys.stderr.write(f"gpuyield: drill: {error}\n")
    if archive is not None and error is None:
        console.print(f"the run's archive is in {archive} (gpuyield replay --archive)", style="dim")


def _log_to(path: Path) -> None:
    """The library's logs go to a file: the terminal shows the live view only."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


async def _play(demo: Demo, console: Console, *, quiet: bool) -> DemoResult:
    """Run the demo with a live view on a terminal, plain event lines elsewhere."""
    live_view = not quiet and console.is_terminal
    if not quiet and not live_view:
        demo.tally.on_line = lambda text: console.print(
            text, markup=False, highlight=False, soft_wrap=True
        )
    task = asyncio.create_task(demo.run())
    try:
        if not live_view:
            return await asyncio.shield(task)
        with Live(
            _render(demo.view()), console=console, refresh_per_second=4, transient=True
        ) as live:
            while not task.done():
                await asyncio.wait({task}, timeout=REFRESH_S)
                live.update(_render(demo.view()))
    except asyncio.CancelledError:  # Ctrl-C: the demo stops everything it started, then we go
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise
    for line in demo.tally.recent(LOG_LINES):
        console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)
    return task.result()


def _render(view: DemoView) -> Group:
    jobs = Table(title=f"{view.phase}  ({view.elapsed_s:.0f} s)", title_justify="left")
    for column in (
        "job",
        "runs",
        "state",
        "pods",
        "GPUs",
        "nodes",
        "step",
        "checkpoint",
        "yielded/resumed",
    ):
        jobs.add_column(
            column, justify="right" if column in ("GPUs", "step", "checkpoint") else "left"
        )
    for row in view.rows:
        step, checkpoint = view.steps.get(row.job, (None, None))
        jobs.add_row(
            row.job,
            row.runner,
            row.phase,
            f"{row.placed}/{row.pods}",
            str(row.gpus),
            ",".join(row.nodes) or "-",
            "-" if step is None else str(step),
            "-" if checkpoint is None else str(checkpoint),
            f"{row.suspensions}/{row.resumes}" if row.suspensions else "",
        )
    tally = view.tally
    counts = Text(
        f"decisions {tally.decisions}   yield commands {tally.yield_commands}   "
        + "   ".join(f"{k} {v}" for k, v in tally.yields().items() if k != "commands")
        + f"   resumes {tally.outcomes.get('resumed', 0)}"
        + f"   GPU-seconds lost {tally.lost_gpu_seconds:.0f}"
    )
    recent = Text("\n".join(tally.recent(8)), style="dim")
    return Group(jobs, counts, recent)


def _summary(
    console: Console,
    scenario: DemoScenario,
    result: DemoResult,
    metrics: dict[str, PolicyMetrics],
    days: float,
) -> None:
    tally = result.tally
    yields = tally.yields()
    table = Table(title=f"gpuyield demo: {result.wall_s:.0f} s, seed {scenario.seed}")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row(
        "decisions (yield / resume)",
        f"{tally.decisions} ({tally.yield_decisions} / {tally.resume_decisions})",
    )
    table.add_row("yield commands", str(yields["commands"]))
    for outcome in ("checkpointed", "exited", "hard_killed"):
        table.add_row(f"  {outcome}", str(yields[outcome]))
    table.add_row("resumes", str(tally.outcomes.get("resumed", 0)))
    table.add_row("work lost (GPU-seconds, from the acks)", f"{tally.lost_gpu_seconds:.1f}")
    table.add_row(
        "pods run by torch / by stand-ins", f"{result.torch_pods} / {result.standin_pods}"
    )
    table.add_row("alerts", str(len(tally.alerts)))
    console.print(table)
    resumptions = tally.resumptions()
    if resumptions:
        resumed = Table(title="Suspended and resumed")
        for column in ("job", "checkpoint saved by the yield", "first step after the resume"):
            resumed.add_column(column, justify="left" if column == "job" else "right")
        for r in resumptions:
            resumed.add_row(
                r.job,
                "-" if r.yielded_at_step is None else str(r.yielded_at_step),
                "-" if r.resumed_at_step is None else str(r.resumed_at_step),
            )
        console.print(resumed)
    compared = Table(
        title=f"The same workload in the simulator ({days * 24:.1f} simulated hours, "
        f"1 wall second = {SPEED / 60:g} minute)",
        caption=f"research has run {PRIOR_H:g} h when the burst comes; stock policy timers; "
        "a kill loses the work since the last checkpoint",
    )
    compared.add_column("metric")
    for name in metrics:
        compared.add_column(name, justify="right")
    rows: tuple[tuple[str, Callable[[PolicyMetrics], str]], ...] = (
        ("evictions", lambda m: str(m.evictions)),
        ("GPU-hours lost", lambda m: f"{m.lost_gpu_hours_per_day * days:.1f}"),
        ("dangling gangs", lambda m: f"{m.dangling_gangs_per_week * days / 7:.0f}"),
        ("production wait p50 (min)", lambda m: f"{m.production_wait_p50_s / 60:.0f}"),
        ("SLA attainment (production)", lambda m: f"{m.sla_attainment:.0%}"),
        ("GPU utilization (useful)", lambda m: f"{m.gpu_utilization:.0%}"),
        ("jobs Failed (retries spent)", lambda m: str(m.jobs_failed)),
    )
    for label, show in rows:
        compared.add_row(label, *(show(m) for m in metrics.values()))
    console.print(compared)
