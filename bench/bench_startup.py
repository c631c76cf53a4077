"""Start-up benchmark: what a command costs before it does any work, against ``python -c pass``.

Not a test. ``python bench/bench_startup.py [--rounds N]`` runs each command
below as a fresh process, round-robin (so a busy spell of a shared machine
hits every command alike), and prints a markdown table of medians with the
ratio to ``python -c pass`` measured in the same run, and the machine named.

- ``python -c pass``: the interpreter alone, the reference;
- ``gpuyield --help``: typer, rich for the help panel, no command module;
- ``gpuyield plan`` on ``examples/fragmented.json`` (4 nodes): the planner,
  pydantic and the snapshot models, plus a real (small) plan;
- ``gpuyield config --help``: one lazily loaded command's own help;
- every command module imported, which is what each command paid before
  the CLI loaded them lazily (Faust, aiokafka, Kubernetes, Redis, torch-free).

The issue's target: a command's start-up within 3x ``python -c pass``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import machine

from gpuyield.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "fragmented.json"
EVERY_MODULE = "import " + ", ".join(
    ["gpuyield.cli", *(lazy.target.partition(":")[0] for lazy in COMMANDS.values())]
)


def commands() -> dict[str, list[str]]:
    python = sys.executable
    gpuyield = Path(python).parent / "gpuyield"
    cli = [str(gpuyield)] if gpuyield.exists() else [python, "-m", "gpuyield"]
    return {
        "`python -c pass`": [python, "-c", "pass"],
        "`gpuyield --help`": [*cli, "--help"],
        "`gpuyield plan` (4 nodes)": [*cli, "plan", str(SNAPSHOT)],
        "`gpuyield config --help`": [*cli, "config", "--help"],
        "`import typer` alone (floor of any typer CLI)": [python, "-c", "import typer"],
        "`import gpuyield.agents.planner` alone (floor of `plan`)": [
            python,
            "-c",
            "import gpuyield.agents.planner",
        ],
        "every command module (before: each command)": [python, "-c", EVERY_MODULE],
    }


# A user's interpreter writes each module's bytecode on its first import and reads it
# after. Where PYTHONDONTWRITEBYTECODE is set (some sandboxes and CI images set it), every
# module edited since the install was compiled again on every run: 18 ms for the
# planner's search alone, measured as start-up. The commands here run without it.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CHILD_ENV
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    table = commands()
    for argv in table.values():
        run_once(argv)  # warm the page cache and write the .pyc files, not recorded
    times: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, argv in table.items():
            times[name].append(run_once(argv))
    reference = statistics.median(times["`python -c pass`"])
    unset = " (PYTHONDONTWRITEBYTECODE unset for them)" if len(CHILD_ENV) < len(os.environ) else ""
    print(f"Machine: {machine()}; {args.rounds} rounds, round-robin{unset}\n")
    print("| command | median | ratio to `python -c pass` | target |")
    print("|---|---:|---:|---|")
    for name, measured in times.items():
        median = statistics.median(measured)
        ratio = median / reference
        target = "" if "`gpuyield" not in name else ("met" if ratio <= 3 else "not met")
        print(f"| {name} | {median * 1000:.0f} ms | {ratio:.1f}x | {target} |")


if __name__ == "__main__":
    main()
