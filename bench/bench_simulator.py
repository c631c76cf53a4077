"""Simulator benchmark: wall time to simulate the default scenario, per policy, and its growth.

Not a test. ``python bench/bench_simulator.py [--days D] [--sizes 64 256 1000]``
prints a markdown table: seconds of wall time per policy for ``--days`` of the
default scenario scaled to each cluster size (queues and job rates grow with
the number of nodes, so every size is equally busy), with the machine named.
Each run also plays the scenario's warm-up (24 hours before the measured
days), which the job count includes. The issue's target is under 60 s per
policy for 14 days of the default scenario (64 nodes).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import time

from gpuyield.agents.simulator import POLICIES, run_policy
from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.workload import generate
from gpuyield.schemas import Queue
from gpuyield.schemas.scenario import Scenario, WorkloadMix
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit


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


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64])
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
    print("| nodes | days (+ warm-up) | jobs | " + " | ".join(f"{p} s" for p in POLICIES) + " |")
    print("|---:|---:|---:|" + "---:|" * len(POLICIES))
    for nodes in args.sizes:
        scenario = scaled(nodes, args.days)
        jobs = generate(scenario, random.Random(scenario.seed))
        times = []
        for policy in POLICIES:
            start = time.perf_counter()
            run_policy(scenario, jobs, policy)
            times.append(time.perf_counter() - start)
        cells = " | ".join(f"{t:.1f}" for t in times)
        days = f"{args.days:g} (+ {scenario.warmup_h:g} h)"
        print(f"| {nodes} | {days} | {len(jobs)} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
