"""Replaying a real job trace (``gpuyield simulate --trace FILE``) as the workload.

The trace is a CSV with at least the columns ``job_id,submit_s,duration_s,
num_gpus,queue`` (others, such as Philly's ``submit_time``, are ignored).
What a trace row gives and what the replay makes of it:

- ``job_id`` becomes the job's name (it must be unique and non-empty);
- ``submit_s`` is re-based so that the measured window starts at 0. By
  default the window starts at the trace's first submission, and with
  ``days`` only jobs submitted less than ``days x 86400`` seconds after it are
  kept (``outside_days`` counts the rest): the issue's "first D days".
  ``start_days`` (``--trace-start``) moves the window's start that many days
  after the first submission, for traces whose first days are not
  representative (Philly's first two weeks hold 22 jobs); the jobs of the
  ``warmup_s`` before the start are replayed too, at negative times, as the
  warm-up that fills the cluster (``Scenario.warmup_h``), and older ones are
  left out (``before_start``);
- ``duration_s`` is the work at full width (seconds > 0), kept as given;
- ``num_gpus`` N becomes pods the way distributed training is placed: N up to
  ``gpus_per_node`` is one pod of N GPUs; a larger N is ``ceil(N /
  gpus_per_node)`` pods of ``gpus_per_node`` GPUs, rounded *up* to whole nodes
  (a 12-GPU Philly job holds two 8-GPU nodes: a gang rank never spans nodes,
  and its NVLink peers are inside one node). A job with more pods than the
  cluster has nodes can never run: it is dropped and counted
  (``dropped_too_large``);
- ``queue`` is mapped onto the scenario's queues with ``--queue-map``
  (``parse_queue_map``): an explicit entry first, then the queue itself when it
  already names a scenario queue, then the ``*`` entry; anything else is an
  error.

A trace has no kind, priority, elasticity, checkpoints, SLA or restart
policy. The job's kind and rules come from its mapped queue
(``workload.rules_for_queue``: the scenario's first mix for that queue, or
production-core -> production, research-elastic -> research, else shared, with
the default workload's rules), and the rest is drawn by the same documented,
seeded rules as generated jobs (``workload.assign_missing``), in trace order.

Errors are ``TraceError`` with one line naming the row and the field, e.g.
``row 17: num_gpus: must be a positive integer, got '-2'``. Rows are counted
from 1 after the header, so row N is line N + 1 of a file without quoted line
breaks; blank lines are skipped and not counted. Every row is checked, also
those outside the ``days`` window (the window is measured from the first
submission of the whole file, so every row must be read anyway).
"""

from __future__ import annotations

import csv
import io
import math
import random  # noqa: TID251 -- the type only: every draw comes from the rng passed in
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuyield.agents.simulator.defaults import DEFAULT_WORKLOAD
from gpuyield.agents.simulator.jobs import JobSpec
from gpuyield.agents.simulator.workload import SECONDS_PER_DAY, assign_missing, rules_for_queue
from gpuyield.schemas.errors import InputError
from gpuyield.schemas.scenario import WorkloadMix

REQUIRED_COLUMNS = ("job_id", "submit_s", "duration_s", "num_gpus", "queue")
WILDCARD = "*"
_POSITIVE_SECONDS = "must be a positive number of seconds"
_POSITIVE_INTEGER = "must be a positive integer"


class TraceError(InputError, ValueError):
    """A trace or a queue map could not be read; the message names the row and the field.

    An ``InputError`` (the CLI's one-line, exit-status-2 error) and a ``ValueError``.
    """


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """What a trace replay submits, and what it had to leave out."""

    jobs: list[JobSpec]
    dropped_too_large: int  # more pods than the cluster has nodes: could never run
    rows: int  # data rows read (all of them, inside the days window or not)
    outside_days: int = 0  # submitted after the ``days`` window
    before_start: int = 0  # submitted before the window's start and its warm-up


@dataclass(frozen=True, slots=True)
class _Row:
    index: int
    job_id: str
    submit_s: float
    duration_s: float
    num_gpus: int
    queue: str  # the scenario queue it maps to


def parse_queue_map(text: str) -> dict[str, str]:
    """``"SRC=DST,SRC2=DST2,*=DST3"`` as a dict; ``*`` is the entry for every other queue.

    Spaces around names are ignored; an empty text is an empty map. Raises
    TraceError for an entry that is not ``SRC=DST``, an empty name, or a source
    given twice.
    """
    mapping: dict[str, str] = {}
    if not text.strip():
        return mapping
    for raw in text.split(","):
        entry = raw.strip()
        if entry.count("=") != 1:
            raise TraceError(f"--queue-map: entry '{entry}' is not SRC=DST (e.g. '6214e9=shared')")
        source, target = (part.strip() for part in entry.split("="))
        if not source or not target:
            raise TraceError(f"--queue-map: entry '{entry}' needs a queue on both sides of '='")
        if source in mapping:
            raise TraceError(f"--queue-map: queue '{source}' is mapped twice")
        mapping[source] = target
    return mapping


def read_trace_text(path: Path) -> str:
    """The text of a trace file, or TraceError when it cannot be read as text (the edge)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"trace: cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TraceError(f"trace: not a CSV file ({path} is not UTF-8 text)") from None


def parse_trace(
    text: str,
    *,
    queue_map: Mapping[str, str],
    known_queues: set[str],
    days: float | None,
    nodes: int,
    gpus_per_node: int,
    rng: random.Random,
    workload: Sequence[WorkloadMix] = DEFAULT_WORKLOAD,
    restart_job_share: float = 0.5,
    start_days: float = 0.0,
    warmup_s: float = 0.0,
) -> TraceLoad:
    """The trace's jobs as the simulator's workload, sorted by ``(submit_s, name)``.

    ``workload`` gives the rules for each queue's jobs (pass the scenario's),
    ``restart_job_share`` the scenario's share of RestartJob policies,
    ``start_days`` and ``warmup_s`` where the window starts and how much of the
    trace before it is replayed as warm-up (module docstring). Pure:
    the same text, arguments and ``rng`` state give the same jobs. Raises
    TraceError for anything the module docstring calls an error.
    """
    _check_targets(queue_map, known_queues)
    rows = list(_read_rows(text, queue_map, known_queues))
    if not rows:
        raise TraceError("trace: no job rows after the header")
    first_s = min(row.submit_s for row in rows) + start_days * SECONDS_PER_DAY
    window_s = math.inf if days is None else days * SECONDS_PER_DAY
    jobs: list[JobSpec] = []
    too_large = outside = before = 0
    for row in rows:
        submit_s = row.submit_s - first_s
        if submit_s >= window_s:
            outside += 1
            continue
        if submit_s < -warmup_s:
            before += 1
            continue
        pods, gpus_per_pod = pods_for(row.num_gpus, gpus_per_node)
        if pods > nodes:
            too_large += 1
            continue
        kind, rules = rules_for_queue(row.queue, workload)
        jobs.append(
            assign_missing(
                name=row.job_id,
                queue=row.queue,
                kind=kind,
                submit_s=submit_s,
                pods=pods,
                gpus_per_pod=gpus_per_pod,
                duration_s=row.duration_s,
                rules=rules,
                restart_job_share=restart_job_share,
                rng=rng,
            )
        )
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    return TraceLoad(
        jobs=jobs,
        dropped_too_large=too_large,
        rows=len(rows),
        outside_days=outside,
        before_start=before,
    )


def pods_for(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """``(pods, gpus_per_pod)`` for a job of ``num_gpus``: one pod, or whole nodes rounded up."""
    if num_gpus <= gpus_per_node:
        return 1, num_gpus
    return math.ceil(num_gpus / gpus_per_node), gpus_per_node


def _check_targets(queue_map: Mapping[str, str], known_queues: set[str]) -> None:
    for source, target in queue_map.items():
        if target not in known_queues:
            raise TraceError(
                f"--queue-map: '{source}={target}': '{target}' is not a queue of the scenario "
                f"(queues: {', '.join(sorted(known_queues))})"
            )


def _read_rows(text: str, queue_map: Mapping[str, str], known_queues: set[str]) -> list[_Row]:
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise TraceError("trace: not a CSV file (it is empty)")
    if "\x00" in text:
        raise TraceError("trace: not a CSV file (it holds NUL bytes: binary data?)")
    reader = csv.reader(io.StringIO(text))
    try:
        header = [name.strip() for name in next(reader)]
        missing = [name for name in REQUIRED_COLUMNS if name not in header]
        if len(header) < 2 or len(missing) == len(REQUIRED_COLUMNS):
            raise TraceError(
                f"trace: not a CSV file (its first line {_clip(','.join(header))} is not a "
                f"comma-separated header with the columns {','.join(REQUIRED_COLUMNS)})"
            )
        if missing:
            names = ", ".join(f"'{name}'" for name in missing)
            plural = "s" if len(missing) > 1 else ""
            raise TraceError(
                f"trace: missing column{plural} {names} (the header is {_clip(','.join(header))})"
            )
        at = {name: header.index(name) for name in REQUIRED_COLUMNS}
        rows: list[_Row] = []
        seen: dict[str, int] = {}
        for record in reader:
            if not any(cell.strip() for cell in record):
                continue
            row = _parse_row(len(rows) + 1, record, at, queue_map, known_queues)
            if row.job_id in seen:
                raise TraceError(
                    f"row {row.index}: job_id: '{row.job_id}' is already used by row "
                    f"{seen[row.job_id]}"
                )
            seen[row.job_id] = row.index
            rows.append(row)
    except csv.Error as exc:
        raise TraceError(f"trace: not a CSV file (line {reader.line_num}: {exc})") from None
    return rows


def _parse_row(
    index: int,
    record: list[str],
    at: Mapping[str, int],
    queue_map: Mapping[str, str],
    known_queues: set[str],
) -> _Row:
    def cell(name: str) -> str:
        position = at[name]
        if position >= len(record):
            raise TraceError(f"row {index}: {name}: missing (the row has {len(record)} fields)")
        return record[position].strip()

    job_id = cell("job_id")
    if not job_id:
        raise TraceError(f"row {index}: job_id: must not be empty")
    submit_s = _number(index, "submit_s", cell("submit_s"), "must be a number of seconds")
    raw_duration = cell("duration_s")
    duration_s = _number(index, "duration_s", raw_duration, _POSITIVE_SECONDS)
    if duration_s <= 0:
        raise TraceError(f"row {index}: duration_s: {_POSITIVE_SECONDS}, got {_clip(raw_duration)}")
    raw_gpus = cell("num_gpus")
    gpus = _number(index, "num_gpus", raw_gpus, _POSITIVE_INTEGER)
    if gpus < 1 or not gpus.is_integer():
        raise TraceError(f"row {index}: num_gpus: {_POSITIVE_INTEGER}, got {_clip(raw_gpus)}")
    source = cell("queue")
    if not source:
        raise TraceError(f"row {index}: queue: must not be empty")
    target = queue_map.get(source)
    if target is None:
        target = source if source in known_queues else queue_map.get(WILDCARD)
    if target is None:
        raise TraceError(
            f"row {index}: queue: '{source}' is not mapped "
            f"(add it to --queue-map or use '{WILDCARD}=QUEUE')"
        )
    return _Row(index, job_id, submit_s, duration_s, int(gpus), target)


def _number(index: int, name: str, raw: str, requirement: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceError(f"row {index}: {name}: {requirement}, got {_clip(raw)}")
    return value


def _clip(raw: str, limit: int = 60) -> str:
    """``raw`` quoted for a message, cut so one bad cell cannot flood the terminal."""
    shown = raw if len(raw) <= limit else raw[: limit - 3] + "..."
    return f"'{shown}'"
