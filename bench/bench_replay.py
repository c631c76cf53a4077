"""Benchmark: replay a real demo run's archive, check it is identical, and time the replay.

Runs ``gpuyield demo --archive DIR --json`` (about 70 s: the whole system, real
trainer processes), then replays that archive as ``gpuyield replay --archive``
does, and reports:

- the replay's verdict: the number of differences (expected: 0), the inputs
  replayed, the decisions and commands compared;
- its speed: inputs and decisions per second of the pure replay (the steps
  alone, the archive already read), and the time to read the archive;
- the archive's size: bytes, and bytes per hour of the run.

    .venv/bin/python bench/bench_replay.py [--seed 0] [--keep DIR]

This is the demo-based replay check of issue 12 ("replaying the archive of a
gpuyield demo run gives zero differences"): too slow for the default test
run, which replays a shorter real worker run instead
(tests/worker/test_replay_live.py). It exits 1 when the replay differs.

With ``--simulated``, the input is instead the default scenario's 14 days
(64 nodes, gpuyield's policy) written by ``gpuyield simulate --archive``:
nothing recorded, so the replay derives every decision; reported are the
inputs and decisions per second (wall and CPU: the machine may be shared),
the archive's bytes per simulated day, by topic, and the alerts raised.
``--replay-days D`` replays only the first D days after the warm-up (the
steps before the cut all run; none after), for a machine too slow for all::

    .venv/bin/python bench/bench_replay.py --simulated [--days 14] [--replay-days D]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine

from gpuyield.agents.controller.replay import Window, compare, derive
from gpuyield.agents.simulator.snapshots import EPOCH
from gpuyield.replay_command import _from_archive
from gpuyield.schemas.config import ControllerConfig

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")


def simulated(args: argparse.Namespace, out: Path) -> int:
    """The default scenario written by ``gpuyield simulate --archive``, replayed (derived)."""
    load_before = os.getloadavg()
    started = time.monotonic()
    command = [GPUYIELD, "simulate", "--policies", "gpuyield", "--json", "--archive", str(out)]
    command += ["--days", str(args.days), "--seed", str(args.seed)]
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    simulate_s = time.monotonic() - started
    if run.returncode != 0:
        print(f"the simulation failed ({run.returncode}): {run.stderr.strip()}")
        return 2
    scenario = json.loads(run.stdout)["scenario"]
    archive = out / "gpuyield"
    simulated_days = scenario["days"] + scenario["warmup_h"] / 24
    by_topic = {
        topic.name: sum(p.stat().st_size for p in topic.rglob("*.parquet"))
        for topic in sorted(archive.iterdir())
    }
    t0 = time.perf_counter()
    record = _from_archive(str(archive), "")
    read_s = time.perf_counter() - t0
    window = Window(until=EPOCH + args.replay_days * 86400) if args.replay_days else None
    t0, c0 = time.perf_counter(), time.process_time()
    derivation = derive(record, window=window, config=ControllerConfig())
    derive_s, derive_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    decisions = len(derivation.decisions)
    outcomes: dict[str, int] = {}
    for decision in derivation.decisions.values():
        key = decision.outcome.value if decision.outcome else "none"
        outcomes[key] = outcomes.get(key, 0) + 1
    figures = {
        "machine": machine(),
        "load_average_before": [round(x, 1) for x in load_before],
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
        "simulated_days": simulated_days,
        "replayed": f"first {args.replay_days} days after the warm-up"
        if args.replay_days
        else "all of it",
        "simulate_archive_wall_s": round(simulate_s, 1),
        "inputs_in_archive": len(record.inputs),
        "inputs_replayed": derivation.steps,
        "rejected_inputs": derivation.rejected,
        "decisions_derived": decisions,
        "decision_outcomes": dict(sorted(outcomes.items())),
        "commands_derived": len(derivation.commands),
        "alerts": dict(sorted(derivation.alerts.items())),
        "read_archive_s": round(read_s, 2),
        "replay_wall_s": round(derive_s, 1),
        "replay_cpu_s": round(derive_cpu_s, 1),
        "inputs_per_s_wall": round(derivation.steps / derive_s),
        "inputs_per_cpu_s": round(derivation.steps / derive_cpu_s),
        "decisions_per_s_wall": round(decisions / derive_s, 1),
        "decisions_per_cpu_s": round(decisions / derive_cpu_s, 1),
        "archive_bytes": sum(by_topic.values()),
        "archive_bytes_per_simulated_day": round(sum(by_topic.values()) / simulated_days),
        "archive_bytes_by_topic": by_topic,
        "archive": str(archive),
    }
    print(json.dumps(figures, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="Archive here (kept).")
    parser.add_argument(
        "--simulated", action="store_true", help="Replay the simulated default scenario."
    )
    parser.add_argument("--days", type=float, default=14.0, help="With --simulated.")
    parser.add_argument(
        "--replay-days", type=float, default=None, help="With --simulated: replay a prefix."
    )
    args = parser.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="gpuyield-replay-bench-")) / "archive"
    if args.simulated:
        return simulated(args, out)
    started = time.monotonic()
    demo = subprocess.run(
        [GPUYIELD, "demo", "--json", "--seed", str(args.seed), "--archive", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    demo_s = time.monotonic() - started
    if demo.returncode != 0:
        print(f"the demo failed ({demo.returncode}): {demo.stderr.strip()}")
        return 2
    size = sum(p.stat().st_size for p in out.rglob("*.parquet"))
    t0 = time.perf_counter()
    record = _from_archive(str(out), "")
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    derivation = derive(record, config=ControllerConfig())
    derive_s = time.perf_counter() - t0
    report = compare(record, derivation)
    decisions = sum(1 for i in report.items if i.kind == "decision")
    commands = sum(1 for i in report.items if i.kind == "command")
    figures = {
        "machine": machine(),
        "demo_wall_s": round(demo_s, 1),
        "demo_decisions": json.loads(demo.stdout)["decisions"],
        "differences": report.differences,
        "statuses": sorted({i.status for i in report.items}),
        "inputs_replayed": report.steps,
        "decisions_compared": decisions,
        "commands_compared": commands,
        "read_archive_s": round(read_s, 3),
        "replay_s": round(derive_s, 3),
        "inputs_per_s": round(report.steps / derive_s),
        "decisions_per_s": round(decisions / derive_s),
        "archive_bytes": size,
        "archive_bytes_per_hour_of_run": round(size / demo_s * 3600),
        "archive": str(out),
    }
    print(json.dumps(figures, indent=2))
    return 1 if report.differences else 0


if __name__ == "__main__":
    sys.exit(main())
