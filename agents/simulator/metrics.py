"""The figures a platform team compares policies by, from one finished simulation.

Everything is measured over the window ``[0, days)``: jobs submitted during
the warm-up before it are played (they keep the cluster busy from the first
minute) but not judged, and what happens before 0 is not counted.

- ``sla_attainment``: production jobs that finished within their SLA budget,
  over the production jobs that could be judged (finished, or whose deadline
  fell inside the run); a Failed job missed it.
- ``lost_gpu_hours_per_day``: GPU-hours of work rolled back to a checkpoint
  because of preemption (a kill, or a gang broken by one), per simulated day.
- ``dangling_gangs_per_week``: times a gang was left running some, but fewer
  than ``min_available``, of its pods, per simulated week.
- ``gpu_utilization``: GPU-seconds of work done inside the window that
  counted (finished jobs' work, and the kept progress of unfinished ones;
  never work later rolled back, nor a Failed job's) over all GPU-seconds of
  the window.
- ``evictions``: victims, one per job per round; ``livelock_incidents``: jobs
  caught in a repeat / mutual / preempt-after-resume cycle (``LivelockGuard``).
- production waits: submission to first start, p50 and p99 (jobs that never
  started count with the time they waited until the end of the run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuyield.agents.simulator.engine import HOUR, Simulation
from gpuyield.agents.simulator.jobs import JobKind
from gpuyield.agents.simulator.state import Phase
from gpuyield.schemas.simulation import PolicyMetrics, PolicyResult, Series


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values): reproducible, no interpolation."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def measure(sim: Simulation) -> PolicyResult:
    days = sim.horizon / 86400.0
    judged = met = 0
    waits: list[float] = []
    completed = failed = 0
    for job in sim.order:
        ended_inside = job.finished_at is not None and job.finished_at >= 0
        if job.phase is Phase.DONE and ended_inside:
            completed += 1
        elif job.phase is Phase.FAILED and ended_inside:
            failed += 1
        if job.spec.kind is not JobKind.PRODUCTION or job.spec.submit_s < 0:
            continue
        started = job.first_started_at
        waits.append((started if started is not None else sim.horizon) - job.spec.submit_s)
        deadline = job.spec.submit_s + (job.spec.sla_s or math.inf)
        if job.phase is Phase.DONE:
            judged += 1
            met += job.finished_at is not None and job.finished_at <= deadline
        elif job.phase is Phase.FAILED or deadline <= sim.horizon:
            judged += 1
    tally = sim.tally
    metrics = PolicyMetrics(
        sla_attainment=met / judged if judged else 1.0,
        lost_gpu_hours_per_day=tally.lost_gpu_s / HOUR / days,
        dangling_gangs_per_week=tally.dangling / (days / 7.0),
        gpu_utilization=tally.useful_gpu_s / (sim.cluster.total * sim.horizon),
        evictions=tally.evictions,
        livelock_incidents=tally.livelocks,
        production_wait_p50_s=percentile(waits, 50),
        production_wait_p99_s=percentile(waits, 99),
        production_jobs=judged,
        jobs_completed=completed,
        jobs_failed=failed,
    )
    series = Series(
        t_h=tuple(tally.samples_t),
        used_gpus=tuple(tally.samples_used),
        useful_gpus=tuple(tally.samples_useful),
        queue_gpus={q: tuple(v) for q, v in tally.samples_queues.items()},
        evictions=tuple(tally.samples_evictions),
        lost_gpu_hours=tuple(tally.samples_lost),
    )
    return PolicyResult(policy=sim.policy.name, metrics=metrics, series=series)
