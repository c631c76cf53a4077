"""Benchmark: does ``gpuyield demo`` pass every time, also on a busy machine?

Runs ``gpuyield demo --json`` ``--runs`` times in a row (default 10, at the
default seed 0 and duration), each as a user would (a fresh process, its own
state directory), optionally while ``--busy-cores`` processes spin on the CPU
(``python -c 'while True: pass'``, what "one core kept busy by another
process" means in issue 9). It reports each run's verdict, wall time and
yields, then the passes, the failures with their one-line error, and the
median wall time, with the machine named:

    .venv/bin/python bench/bench_demo_reliability.py [--runs 10] [--busy-cores 1]

A run passes when the demo exits 0 (every fine-tune placed and finished,
every suspended job running again from its checkpoint) and leaves no process
behind; each process the demo starts inherits a marker variable, found in
``/proc`` afterwards as the demo's test does. A failed run's working directory
(logs of the worker, the node agents, the simulated cluster and every pod) is
kept under ``--keep-dir`` (a temporary directory by default) and named in the
report. The runs are sequential: the demo is one machine's whole workload,
and running two at once would measure the contention between them. Started in
the background from a script (``nohup ... &``), a process ignores SIGINT; stop
the bench with SIGTERM.
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
from dataclasses import dataclass
from pathlib import Path

from machine import machine

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")
MARK = "GPUYIELD_DEMO_BENCH_MARK"
HOG = "while True: pass"


def load() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def marked(mark: str) -> list[int]:
    """PIDs of live processes whose environment carries ``MARK=mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


@dataclass(frozen=True, slots=True)
class Verdict:
    run: int
    passed: bool
    wall_s: float
    load_before: str
    detail: str


def one_run(run: int, args: argparse.Namespace, keep_dir: Path) -> Verdict:
    mark = secrets.token_hex(8)
    state = keep_dir / f"run-{run:02d}"
    state.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYIELD_")}
    env.update({"GPUYIELD_STATE_DIR": str(state), MARK: mark})
    argv = [GPUYIELD, "demo", "--json", "--seed", str(args.seed)]
    argv += ["--duration-s", str(args.duration_s)] + (["--keep"] if args.keep_all else [])
    before = load()
    started = time.monotonic()
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=args.timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return Verdict(run, False, time.monotonic() - started, before, "timed out (bench limit)")
    wall_s = time.monotonic() - started
    time.sleep(1.0)  # children reaped by then, or left behind for real
    left = marked(mark)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        return Verdict(
            run, False, wall_s, before, lines[-1] if lines else f"exit {result.returncode}"
        )
    if left:
        return Verdict(run, False, wall_s, before, f"processes left behind: {left}")
    document = json.loads(result.stdout)
    yields = document["yields"]
    detail = (
        f"decisions {document['decisions']}, yields {yields['commands']} "
        f"(checkpointed {yields['checkpointed']}, exited {yields['exited']}, "
        f"hard-killed {yields['hard_killed']}), lost {document['lost_gpu_seconds']} GPU-s"
    )
    if not args.keep_all:
        with contextlib.suppress(OSError):
            state.rmdir()  # a passing run's working directory is already removed
    return Verdict(run, True, wall_s, before, detail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy-cores", type=int, default=0, help="CPU hog processes to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per run, a safety net")
    parser.add_argument("--keep-dir", type=Path, default=None, help="failed runs' logs go here")
    parser.add_argument(
        "--keep-all",
        action="store_true",
        help="keep every run's logs (demo --keep), not only failures'",
    )
    args = parser.parse_args()
    keep_dir = args.keep_dir or Path(tempfile.mkdtemp(prefix="gpuyield-demo-bench-"))
    print(f"machine: {machine()}; load average at start {load()}", flush=True)
    print(
        f"gpuyield demo --seed {args.seed} --duration-s {args.duration_s:g}, {args.runs} runs, "
        f"{args.busy_cores} core(s) kept busy",
        flush=True,
    )
    # A SIGTERM (``kill``, ``timeout``) ends the bench through ``finally``: the hogs are killed
    # and ``subprocess.run`` kills the running demo, whose children die with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.busy_cores)]
    verdicts: list[Verdict] = []
    try:
        for run in range(1, args.runs + 1):
            verdict = one_run(run, args, keep_dir)
            verdicts.append(verdict)
            print(
                f"run {run:2d}: {'pass' if verdict.passed else 'FAIL'} in {verdict.wall_s:5.0f} s "
                f"(load before {verdict.load_before}): {verdict.detail}",
                flush=True,
            )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    passes = sum(v.passed for v in verdicts)
    walls = [v.wall_s for v in verdicts]
    print(
        f"passed {passes} of {len(verdicts)}; median wall time {statistics.median(walls):.0f} s "
        f"(min {min(walls):.0f}, max {max(walls):.0f}); load average at end {load()}"
    )
    if passes < len(verdicts):
        print(f"failed runs' logs: {keep_dir}/run-NN/gpuyield-demo-*")
    return 0 if passes == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
