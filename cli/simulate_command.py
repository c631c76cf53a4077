"""``gpuyield simulate``: gpuyield against stock Volcano preemption on one workload.

The composition root for the simulator: it reads the settings, the scenario
and the trace (the only I/O), seeds the workload, runs each policy with a
progress bar and renders the comparison.

gpuyield's knobs, lowest precedence first: the simulator's defaults
(``defaults.DEFAULT_CONTROLLER``, the default scenario's policy), then each
knob the settings set explicitly (``GPUYIELD_<KNOB>`` in the environment, or
the settings file of ``--config`` / ``GPUYIELD_CONFIG``: the same values a
deployment runs with), then the scenario file's ``policy`` block (what one
experiment varies), then the flags. Knobs left at their defaults in the
settings do not replace the simulator's own (its planner budget and retry
delays suit a simulated cluster), so a plain run is the documented one.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuyield.agents.controller.progress import ForwardRule
from gpuyield.agents.simulator import DEFAULT_POLICIES, POLICIES, run_policy
from gpuyield.agents.simulator.defaults import DEFAULT_CONTROLLER, default_scenario
from gpuyield.agents.simulator.event_log import TOPICS as LOG_TOPICS
from gpuyield.agents.simulator.event_log import EventLog, LogMessage, LogOptions
from gpuyield.agents.simulator.jobs import JobSpec
from gpuyield.agents.simulator.recorded import NothingRecorded, RecordedWorkload, recorded_workload
from gpuyield.agents.simulator.scenario_file import read_scenario_file
from gpuyield.agents.simulator.targets import BASELINE, check_targets
from gpuyield.agents.simulator.trace import parse_queue_map, parse_trace, read_trace_text
from gpuyield.agents.simulator.workload import generate
from gpuyield.cli_io import fail
from gpuyield.report import METRIC_ROWS, queue_rows, target_rows, write_report
from gpuyield.schemas import InputError
from gpuyield.schemas.config import ControllerConfig, with_knobs
from gpuyield.schemas.decoding import MessageError, decode
from gpuyield.schemas.messages import JobProgress, JobProgressBatch, KubeEvent
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.simulation import PolicyResult
from gpuyield.service_io import traced_settings_or_fail
from gpuyield.simulate_pool import default_workers, run_side_by_side
from gpuyield.streams.archive import Archive, ArchiveWriter
from gpuyield.streams.settings import knob_error_line
from gpuyield.streams.topics import JOB_PROGRESS, KUBE_EVENTS, registry


def simulate_command(
    scenario: Annotated[
        Path | None, typer.Option(help="Scenario file (JSON or YAML) over the default scenario.")
    ] = None,
    nodes: Annotated[int | None, typer.Option(min=1, help="Nodes in the cluster.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(min=1, help="GPUs per node.")] = None,
    days: Annotated[
        float | None,
        typer.Option(min=0.01, help="Measured days (the scenario's warmup_h is played before)."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the workload and tie-breaks.")] = None,
    trace: Annotated[
        Path | None, typer.Option(help="CSV trace: job_id,submit_s,duration_s,num_gpus,queue.")
    ] = None,
    queue_map: Annotated[
        str | None, typer.Option(help="Trace queues onto scenario queues: SRC=DST,...,*=DST.")
    ] = None,
    trace_start: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="Start the replayed window this many days after the trace's first submission "
            "(default 0); the warm-up before it is replayed too.",
        ),
    ] = None,
    policies: Annotated[
        str,
        typer.Option(help=f"Comma-separated policies to compare (of {', '.join(POLICIES)})."),
    ] = ",".join(DEFAULT_POLICIES),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print only the figures as JSON.")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option(help="Directory to write the plots (PNG) and an HTML page into."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Settings file (GPUYIELD_NAME=value lines): its policy knobs, like the "
            "environment's, apply under the scenario file's.",
        ),
    ] = None,
    from_archive: Annotated[
        str | None,
        typer.Option(
            "--from-archive",
            help="Simulate the jobs and the cluster of a recorded run (gpuyield archive's DIR): "
            "the closed-loop counterpart of gpuyield replay --policy.",
        ),
    ] = None,
    archive: Annotated[
        str | None,
        typer.Option(
            "--archive",
            help="Write each policy's run as the controller's input messages, in gpuyield "
            "archive's format, to DIR/<policy> (a new directory each).",
        ),
    ] = None,
    heartbeat_s: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            help="With --archive: a running job's heartbeat period, plus one per checkpoint "
            "(default 600).",
        ),
    ] = None,
    tick_s: Annotated[
        float | None,
        typer.Option(min=0.1, help="With --archive: the workers' tick period (default 60)."),
    ] = None,
    parallel: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Policies simulated at once, each in its own process (default: the CPUs); "
            "1 runs them one after another. The figures are the same either way. "
            "With --archive they run one after another.",
        ),
    ] = None,
) -> None:
    """Simulate a GPU cluster under gpuyield and stock Volcano preemption, same workload."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        fail(
            f"--policies: unknown policy '{unknown[0] if unknown else ''}' "
            f"(choose from {', '.join(POLICIES)})"
        )
    knobs = _knobs(config)
    try:
        chosen = _scenario(scenario, nodes, gpus_per_node, days, seed, knobs)
        if from_archive is not None:
            if trace is not None:
                raise InputError("--from-archive and --trace: choose one workload")
            recorded = _recorded(from_archive, chosen, config)
            chosen, jobs, dropped = recorded.scenario, recorded.jobs, 0
        else:
            jobs, dropped = _jobs(chosen, trace, queue_map, trace_start)
    except InputError as exc:
        fail(str(exc))
    if report is not None:
        try:  # before the runs: a bad directory should not cost a long simulation
            report.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            fail(f"--report {report}: cannot create the directory: {exc}")
    if archive is None and (heartbeat_s is not None or tick_s is not None):
        fail("--heartbeat-s and --tick-s: only meaningful with --archive")
    defaults = LogOptions()
    options = LogOptions(
        heartbeat_s=defaults.heartbeat_s if heartbeat_s is None else heartbeat_s,
        tick_s=defaults.tick_s if tick_s is None else tick_s,
        forward=ForwardRule.of(knobs),
    )
    logs = _archives(archive, names, config, options)
    console = Console(stderr=True)
    results: dict[str, PolicyResult] = {}
    with Progress(
        TextColumn("{task.description:<15}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}% of {task.fields[days]:g} days"),
        TimeElapsedColumn(),
        console=console,
        disable=as_json or not console.is_terminal,
    ) as progress:
        workers = default_workers() if parallel is None else parallel
        if not logs and workers > 1 and len(names) > 1:
            tasks = {name: progress.add_task(name, total=1.0, days=chosen.days) for name in names}

            def told(name: str, done: float) -> None:
                progress.update(tasks[name], completed=done)

            runs = run_side_by_side(
                chosen, jobs, names, config=knobs, workers=workers, on_progress=told
            )
            results = {name: result for name, (result, _, _) in runs.items()}
        else:
            for name in names:
                task = progress.add_task(name, total=1.0, days=chosen.days)

                def advance(done: float, task: TaskID = task) -> None:
                    progress.update(task, completed=done)

                log = logs.get(name)
                try:
                    results[name] = run_policy(
                        chosen,
                        jobs,
                        name,
                        advance,
                        config=knobs,
                        observer=log.events if log else None,
                    )
                finally:
                    if log is not None:
                        log.close()
                if log is not None and not as_json:
                    sys.stderr.write(f"{log.summary()}\n")
    if report is not None:
        try:
            written = write_report(report, chosen, results)
        except OSError as exc:
            fail(f"--report {report}: cannot write the report: {exc}")
        if not as_json:
            for path in written:
                sys.stderr.write(f"{path}\n")
    if as_json:
        checks = check_targets({n: r.metrics for n, r in results.items()})
        document = {
            "scenario": chosen.model_dump(mode="json"),
            "policies": {n: r.metrics.model_dump(mode="json") for n, r in results.items()},
            "targets": [
                {
                    "policy": c.policy,
                    "target": c.target,
                    "rule": c.rule,
                    "value": c.value,
                    BASELINE: c.baseline,
                    "met": c.met,
                }
                for c in checks
            ],
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    warmup = sum(1 for job in jobs if job.submit_s < 0)
    _table(Console(), chosen, results, len(jobs) - warmup, warmup, dropped)


class _ArchiveLog:
    """One policy's event log written to its archive directory."""

    def __init__(self, url: str, writer: ArchiveWriter, options: LogOptions, prefix: str) -> None:
        self.url = url
        self.writer = writer
        self.prefix = prefix
        self.events = EventLog(self._add, options)

    def _add(self, message: LogMessage) -> None:
        self.writer.add(
            self.prefix + message.topic, message.key, message.value, round(message.at * 1000)
        )

    def close(self) -> None:
        self.writer.close()

    def summary(self) -> str:
        counts = ", ".join(
            f"{n:,} {t.removeprefix('gpuyield.')}" for t, n in self.events.counts.items()
        )
        return (
            f"{self.url}: {sum(self.events.counts.values()):,} messages ({counts}), "
            f"{self.writer.bytes_written:,} bytes in {len(self.writer.written)} files"
        )


def _archives(
    url: str | None, names: list[str], config: Path | None, options: LogOptions
) -> dict[str, _ArchiveLog]:
    """A writer per policy at ``url/<policy>``; exit 2 when one cannot be written there."""
    if url is None:
        return {}
    from gpuyield.streams.partitioning import partition_for

    settings = traced_settings_or_fail(config).settings
    layout = {spec.name: spec.partitions for spec in registry(settings.topic_partitions)}
    logs: dict[str, _ArchiveLog] = {}
    for name in names:
        where = f"{url.rstrip('/')}/{name}"
        try:
            writer = ArchiveWriter(
                Archive(where),
                {settings.topic_prefix + topic: layout[topic] for topic in LOG_TOPICS},
                lambda key, count: partition_for(key, range(count)),
            )
        except (OSError, ValueError) as exc:
            fail(f"--archive {where}: {exc}")
        logs[name] = _ArchiveLog(where, writer, options, settings.topic_prefix)
    return logs


def _knobs(config: Path | None) -> ControllerConfig:
    """The simulator's knobs with those the settings set explicitly (exit 2 on a bad one)."""
    explicit = traced_settings_or_fail(config).explicit_knobs()
    try:
        return with_knobs(DEFAULT_CONTROLLER, explicit)
    except ValidationError as exc:  # valid alone, not with the simulator's other defaults
        fail(f"{knob_error_line(exc)} (with the simulator's defaults)")


def _scenario(
    path: Path | None,
    nodes: int | None,
    gpus: int | None,
    days: float | None,
    seed: int | None,
    knobs: ControllerConfig,
) -> Scenario:
    settled = default_scenario().model_copy(update={"policy": knobs.policy})
    base = read_scenario_file(path, settled) if path is not None else settled
    overrides = {
        k: v
        for k, v in {"nodes": nodes, "gpus_per_node": gpus, "days": days, "seed": seed}.items()
        if v is not None
    }
    return Scenario.model_validate({**base.model_dump(), **overrides}) if overrides else base


def _recorded(url: str, base: Scenario, config: Path | None) -> RecordedWorkload:
    """The workload of the archive at ``url`` (its watch events and job progress)."""
    prefix = traced_settings_or_fail(config).settings.topic_prefix
    events_topic, progress_topic = prefix + KUBE_EVENTS, prefix + JOB_PROGRESS
    try:
        columns = Archive(url).read([events_topic, progress_topic]).to_pydict()
    except (OSError, ValueError) as exc:
        raise InputError(f"--from-archive {url}: {exc}") from None
    events: list[KubeEvent] = []
    progress: list[JobProgress] = []
    for topic, value in zip(columns["topic"], columns["value"], strict=True):
        try:
            if topic == events_topic:
                events.append(decode(KubeEvent, value))
            else:  # a batch, or a bare summary (read as a batch of one)
                progress.extend(decode(JobProgressBatch, value).summaries)
        except MessageError:
            continue  # the decider dead-lettered it too
    try:
        return recorded_workload(events, progress, base)
    except NothingRecorded as exc:
        raise InputError(f"--from-archive {url}: {exc}") from None


def _jobs(
    scenario: Scenario, trace: Path | None, queue_map: str | None, trace_start: float | None
) -> tuple[list[JobSpec], int]:
    rng = random.Random(scenario.seed)  # noqa: S311 -- a seeded workload, not security
    if trace is None:
        if queue_map is not None:
            raise InputError("--queue-map: only meaningful with --trace")
        if trace_start is not None:
            raise InputError("--trace-start: only meaningful with --trace")
        return generate(scenario, rng), 0
    load = parse_trace(
        read_trace_text(trace),
        queue_map=parse_queue_map(queue_map or ""),
        known_queues={q.name for q in scenario.queues},
        days=scenario.days,
        nodes=scenario.nodes,
        gpus_per_node=scenario.gpus_per_node,
        rng=rng,
        workload=scenario.workload,
        restart_job_share=scenario.restart_job_share,
        start_days=trace_start or 0.0,
        warmup_s=scenario.warmup_h * 3600.0,
    )
    return load.jobs, load.dropped_too_large


def _table(
    console: Console,
    scenario: Scenario,
    results: dict[str, PolicyResult],
    jobs: int,
    warmup: int,
    dropped: int,
) -> None:
    title = (
        f"{scenario.nodes} nodes x {scenario.gpus_per_node} GPUs, {scenario.days:g} days, "
        f"seed {scenario.seed}, {jobs} jobs"
        + (f" (+{warmup} in the {scenario.warmup_h:g} h warm-up)" if warmup else "")
        + (f" ({dropped} dropped: larger than the cluster)" if dropped else "")
    )
    table = Table(title=title)
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")
    for key, label, fmt in METRIC_ROWS:
        table.add_row(label, *(fmt.format(getattr(r.metrics, key)) for r in results.values()))
    console.print(table)
    queues = Table(title="Per queue")
    queues.add_column("queue")
    queues.add_column("figure")
    for name in results:
        queues.add_column(name, justify="right")
    for row in queue_rows(results):
        queues.add_row(*row)
    console.print(queues)
    checks = check_targets({n: r.metrics for n, r in results.items()})
    if checks:
        targets = Table(title=f"Against {BASELINE}")
        for column in ("policy", "target", "figure", BASELINE, "verdict"):
            targets.add_column(
                column, justify="left" if column in ("policy", "target") else "right"
            )
        for row in target_rows(checks):
            targets.add_row(*row, style=None if row[-1] == "met" else "bold red")
        console.print(targets)
