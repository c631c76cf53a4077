"""Simulator benchmark: wall time to simulate the default scenario, per policy, and its growth.

Not a test. ``python bench/bench_simulator.py [--days D] [--sizes 64 256 1000]``
prints a markdown table: seconds of wall time per policy for ``--days`` of the
default scenario scaled to each cluster size (queues and job rates grow with
the number of nodes, so every size is equally busy), with the machine named.
Each run also plays the scenario's warm-up (24 hours before the measured
days), which the job count includes. The issue's target is under 60 s per
policy for 14 days of the default scenario (64 nodes).

Each cell is ``CPU s (wall s)``: the process's CPU time is the figure that
carries over from a machine shared with other work, where wall time is
inflated by whatever else runs. ``--overload TRACE`` times the README's
overloaded replay instead (``examples/scenario-overload.json``: the Philly
fortnight from day 28 on 32 nodes) for each policy; issue 14's target is the
three policies in under 10 minutes.

``--parallel N`` runs up to N policies at once, each in its own process, as
``gpuyield simulate`` does by default (``gpuyield.simulate_pool``): each cell
is still that policy's own CPU and wall seconds, and a last line gives the
wall time of the whole row. ``--parallel 1`` (the default here) runs them one
after another, so no run's wall time includes another's.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from machine import machine

from gpuyield.agents.simulator import POLICIES
from gpuyield.agents.simulator.defaults import DEFAULT_CONTROLLER, default_scenario
from gpuyield.agents.simulator.jobs import JobSpec
from gpuyield.agents.simulator.scenario_file import read_scenario_file
from gpuyield.agents.simulator.trace import parse_queue_map, parse_trace, read_trace_text
from gpuyield.agents.simulator.workload import generate
from gpuyield.schemas import Queue
from gpuyield.schemas.scenario import Scenario, WorkloadMix
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit
from gpuyield.simulate_pool import run_side_by_side


def scaled(nodes: int, days: float) -> Scenario:
    """The default scenario on ``nodes`` nodes: capacities and arrival rates scale alike."""
    base = default_scenario()
    k = nodes / base.nodes

    def queue(q: Queue) -> Queue:
        cap = q.capability.gpu
        return q.model_copy(
            update={
                "guarantee": GpuAmount(gpu=round(q.guarantee.gpu * k)),
                "capability": GpuLimit(gpu=None if cap is None else round(cap * k)),
            }
        )

    def mix(m: WorkloadMix) -> WorkloadMix:
        return m.model_copy(
            update={
                "jobs_per_day": m.jobs_per_day * k,
                "burst_size": max(1, round(m.burst_size * k)),
            }
        )

    return base.model_copy(
        update={
            "nodes": nodes,
            "days": days,
            "queues": tuple(queue(q) for q in base.queues),
            "workload": tuple(mix(m) for m in base.workload),
        }
    )


OVERLOAD = Path(__file__).resolve().parent.parent / "examples" / "scenario-overload.json"
OVERLOAD_MAP = "7f04ca=production-core,ee9e8c=research-elastic,*=shared"


def overload(trace: Path, days: float) -> tuple[Scenario, list[JobSpec]]:
    """The README's overloaded replay: the trace from day 28 on the overload scenario."""
    scenario = read_scenario_file(OVERLOAD, default_scenario()).model_copy(update={"days": days})
    load = parse_trace(
        read_trace_text(trace),
        queue_map=parse_queue_map(OVERLOAD_MAP),
        known_queues={q.name for q in scenario.queues},
        days=scenario.days,
        nodes=scenario.nodes,
        gpus_per_node=scenario.gpus_per_node,
        rng=random.Random(scenario.seed),
        workload=scenario.workload,
        restart_job_share=scenario.restart_job_share,
        start_days=28.0,
        warmup_s=scenario.warmup_h * 3600.0,
    )
    return scenario, load.jobs


def timed(
    scenario: Scenario, jobs: list[JobSpec], policies: list[str], workers: int
) -> tuple[str, str]:
    """The row's cells, ``CPU s (wall s)`` per policy as the process that ran it measured
    them, and a line with the row's CPU seconds in all and its wall seconds."""
    wall = time.perf_counter()
    runs = run_side_by_side(scenario, jobs, policies, config=DEFAULT_CONTROLLER, workers=workers)
    cells = " | ".join(f"{cpu:.1f} ({seconds:.1f})" for _, cpu, seconds in runs.values())
    total_cpu = sum(cpu for _, cpu, _ in runs.values())
    total_wall = time.perf_counter() - wall
    return (
        cells,
        f"({total_cpu:.1f} CPU s in all, {total_wall:.1f} s wall with --parallel {workers})",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64])
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--overload", type=Path, default=None, metavar="TRACE")
    parser.add_argument("--parallel", type=int, default=1, metavar="N")
    args = parser.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    print(f"Machine: {machine()}, load average {os.getloadavg()[0]:.1f} at start\n")
    head = " | ".join(f"{p} CPU s (wall s)" for p in policies)
    if args.overload is not None:
        scenario, jobs = overload(args.overload, args.days)
        print(f"| scenario | days (+ warm-up) | jobs | {head} |")
        print("|---|---:|---:|" + "---:|" * len(policies))
        cells, total = timed(scenario, jobs, policies, args.parallel)
        days = f"{args.days:g} (+ {scenario.warmup_h:g} h)"
        print(f"| overload | {days} | {len(jobs)} | {cells} |\n\n{total}", flush=True)
        return
    totals: list[str] = []
    print(f"| nodes | days (+ warm-up) | jobs | {head} |")
    print("|---:|---:|---:|" + "---:|" * len(policies))
    for nodes in args.sizes:
        scenario = scaled(nodes, args.days)
        jobs = generate(scenario, random.Random(scenario.seed))
        cells, total = timed(scenario, jobs, policies, args.parallel)
        days = f"{args.days:g} (+ {scenario.warmup_h:g} h)"
        print(f"| {nodes} | {days} | {len(jobs)} | {cells} |", flush=True)
        totals.append(f"{nodes} nodes: {total}")
    print("\n" + "\n".join(totals))


if __name__ == "__main__":
    main()
