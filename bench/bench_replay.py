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
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuyield.agents.controller.replay import compare, derive
from gpuyield.replay_command import _from_archive
from gpuyield.schemas.config import ControllerConfig

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{model}, {os.cpu_count()} cores, {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="Archive here (kept).")
    args = parser.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="gpuyield-replay-bench-")) / "archive"
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
