"""Benchmark: seed 001's pre-peak drill at 64 and 128 nodes, several runs each.

Runs ``gpuyield demo --drill --json --nodes N`` ``--runs`` times for each
``--nodes`` (default 64 and 128), one after another, each as a user would (a
fresh process, its own state directory), and reports for each run the
budgets' figures (reclaim and evictions; online pods placed and ready), the
timeline's main steps (decision, last ack, GPUs free), the victims and the
load average before it; then, per cluster size, the passes and the median
(min-max) of each figure, with the machine named:

    .venv/bin/python bench/bench_drill.py [--nodes 64 128] [--runs 5] [--busy-cores 0]

A run passes when the drill exits 0 (every budget met: reclaim and evictions
within 15 s, the 8 online pods placed and ready within 30 s, every evicted
job Suspended and resumed from its checkpoint) and leaves no process behind
(the marker variable of ``bench_demo_reliability``, looked for in ``/proc``).
The figures are the drill's own, taken from the messages' timestamps
(``agents/demo/drill_timeline.py``), not timed here. A failed run's working
directory is kept under ``--keep-dir`` and named. Stop it with SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_demo_reliability import HOG, MARK, load, machine, marked

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")
FIGURES = ("decision", "last ack", "GPUs free", "reclaim", "ready")


@dataclass(frozen=True, slots=True)
class Run:
    nodes: int
    run: int
    passed: bool
    wall_s: float
    load_before: str
    figures: dict[str, float] = field(default_factory=dict)
    detail: str = ""


def figures(document: dict[str, Any]) -> dict[str, float]:
    """The drill's own figures, in seconds after the burst's watch event."""
    steps = {s["what"].split(" (")[0]: s for s in document["timeline"]}
    budgets = {b["what"]: b for b in document["budgets"]}
    out: dict[str, float] = {}
    for name, value in (
        ("decision", steps.get("decision", {}).get("first_s")),
        ("last ack", steps.get("acks", {}).get("last_s")),
        ("GPUs free", steps.get("GPUs free", {}).get("last_s")),
        ("reclaim", budgets["reclaim and evictions"]["took_s"]),
        ("ready", budgets["online pods placed and ready"]["took_s"]),
    ):
        if value is not None:
            out[name] = float(value)
    return out


def one_run(nodes: int, run: int, args: argparse.Namespace, keep_dir: Path) -> Run:
    mark = secrets.token_hex(8)
    state = keep_dir / f"nodes-{nodes}-run-{run:02d}"
    state.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYIELD_")}
    env.update({"GPUYIELD_STATE_DIR": str(state), MARK: mark})
    argv = [GPUYIELD, "demo", "--drill", "--json", "--nodes", str(nodes)]
    before = load()
    started = time.monotonic()
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=args.timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return Run(nodes, run, False, time.monotonic() - started, before, {}, "timed out")
    wall_s = time.monotonic() - started
    time.sleep(1.0)  # children reaped by then, or left behind for real
    left = marked(mark)
    try:
        document = json.loads(result.stdout)
    except ValueError:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        return Run(nodes, run, False, wall_s, before, {}, lines[-1] if lines else "no output")
    found = figures(document)
    yields = document["yields"]
    detail = (
        f"victims {', '.join(v.split('/')[-1] for v in document['victims'])}; "
        f"checkpointed {yields['checkpointed']}, hard-killed {yields['hard_killed']}"
    )
    if result.returncode != 0:
        missed = [b["what"] for b in document["budgets"] if not b["met"]]
        detail = f"exit {result.returncode}; missed: {', '.join(missed)}; {document['error'] or ''}"
        return Run(nodes, run, False, wall_s, before, found, detail)
    if left:
        return Run(nodes, run, False, wall_s, before, found, f"processes left behind: {left}")
    with contextlib.suppress(OSError):
        state.rmdir()  # a passing run's working directory is already removed
    return Run(nodes, run, True, wall_s, before, found, detail)


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy-cores", type=int, default=0, help="CPU hog processes to run")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per run, a safety net")
    parser.add_argument("--keep-dir", type=Path, default=None, help="failed runs' logs go here")
    args = parser.parse_args()
    keep_dir = args.keep_dir or Path(tempfile.mkdtemp(prefix="gpuyield-drill-bench-"))
    print(f"machine: {machine()}; load average at start {load()}", flush=True)
    print(
        f"gpuyield demo --drill at {', '.join(map(str, args.nodes))} nodes, {args.runs} runs "
        f"each, {args.busy_cores} core(s) kept busy; seconds after the burst's watch event",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.busy_cores)]
    runs: list[Run] = []
    try:
        for nodes in args.nodes:
            for number in range(1, args.runs + 1):
                run = one_run(nodes, number, args, keep_dir)
                runs.append(run)
                shown = "  ".join(f"{k} {v:.1f}" for k, v in run.figures.items())
                print(
                    f"{nodes} nodes, run {number}: {'pass' if run.passed else 'FAIL'} in "
                    f"{run.wall_s:.0f} s (load before {run.load_before}): {shown}; {run.detail}",
                    flush=True,
                )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"load average at end {load()}")
    print("| nodes | passed | " + " | ".join(FIGURES) + " | wall time |")
    print("|---:|---:|" + "---:|" * (len(FIGURES) + 1))
    for nodes in args.nodes:
        mine = [r for r in runs if r.nodes == nodes]
        cells = [spread([r.figures[f] for r in mine if f in r.figures]) for f in FIGURES]
        passes = sum(r.passed for r in mine)
        walls = spread([r.wall_s for r in mine])
        print(f"| {nodes} | {passes} of {len(mine)} | " + " | ".join(cells) + f" | {walls} |")
    failed = [r for r in runs if not r.passed]
    if failed:
        print(f"failed runs' logs: {keep_dir}/nodes-N-run-NN/gpuyield-demo-*")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
