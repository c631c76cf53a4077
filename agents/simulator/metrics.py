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
- ``queues``: per queue, jobs completed and Failed, waits and completion
  times (``QueueMetrics``): under overload a policy can raise utilization by
  serving big jobs while another queue's small ones wait, and only these
  show it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuyield.agents.simulator.engine import HOUR, Simulation
from gpuyield.agents.simulator.jobs import JobKind
from gpuyield.agents.simulator.state import Phase, SimJob
from gpuyield.schemas.simulation import PolicyMetrics, PolicyResult, QueueMetrics, Series


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
        queues=queue_metrics(sim.order, [q.name for q in sim.scenario.queues], sim.horizon),
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


def queue_metrics(
    jobs: Sequence[SimJob], queues: Sequence[str], horizon: float
) -> dict[str, QueueMetrics]:
    """Each queue's jobs completed and Failed, waits and completion times (``QueueMetrics``)."""
    out: dict[str, QueueMetrics] = {}
    for queue in queues:
        mine = [job for job in jobs if job.spec.queue == queue]
        ended = [job for job in mine if job.finished_at is not None and job.finished_at >= 0]
        submitted = [job for job in mine if job.spec.submit_s >= 0]
        waits = [
            (job.first_started_at if job.first_started_at is not None else horizon)
            - job.spec.submit_s
            for job in submitted
        ]
        turnarounds = [
            job.finished_at - job.spec.submit_s
            for job in submitted
            if job.phase is Phase.DONE and job.finished_at is not None
        ]
        out[queue] = QueueMetrics(
            jobs_submitted=len(submitted),
            jobs_completed=sum(1 for job in ended if job.phase is Phase.DONE),
            jobs_failed=sum(1 for job in ended if job.phase is Phase.FAILED),
            wait_p50_s=percentile(waits, 50),
            wait_p99_s=percentile(waits, 99),
            completion_p50_s=percentile(turnarounds, 50) if turnarounds else None,
            completion_p99_s=percentile(turnarounds, 99) if turnarounds else None,
        )
    return out
