"""The workload generator: documented distributions, seeded, no clock.

``generate(scenario, rng)`` turns each ``WorkloadMix`` of the scenario into
jobs over ``scenario.days``. The rules, in the order the draws are made:

Arrivals
    A mix without ``burst_every_h`` is a Poisson stream of ``jobs_per_day``
    (exponential gaps). A mix with it arrives in bursts of ``burst_size`` jobs:
    the first burst starts at U(0, every), each later one U(2/3, 4/3) x every
    after the previous (12-24 h for every = 18 h: bursts are regular but not
    clockwork), and the jobs of a burst are submitted within
    ``BURST_SPREAD_S`` of its start (a team launching a batch by script).
    ``jobs_per_day`` of a burst mix is only the record of the mean rate.
    Submission times are whole seconds in ``[-warmup, days x 86400)``: the
    arrivals start ``scenario.warmup_h`` before the measured window (time 0),
    so the window opens on a cluster already as busy as the workload keeps
    it; jobs submitted before 0 are played but never judged.
Shape
    ``gpus_per_pod`` and ``pods`` are drawn uniformly from the mix's tuples
    (the tuples *are* the distribution: repeat a value to weight it).
Duration
    Lognormal with median ``duration_h_median`` and ``duration_sigma``,
    clipped to ``[MIN_DURATION_S, duration_h_max]``, whole seconds. It is the
    work at full width (``JobSpec.duration_s``).
Everything a trace lacks (``assign_missing``, shared with the trace replay)
    elastic with probability ``elastic_share``: then ``min_available =
    ceil(pods / 2)`` (half the gang keeps it running, half may yield; a
    one-pod job is rigid whatever the draw), else ``min_available = pods``;
    checkpoint interval U(``checkpoint_interval_min``) minutes; for production
    jobs an SLA of duration x U(``sla_factor``) after submission (the default
    (1.5, 3) when the mix gives none, so every production job is judged), but
    never less than the duration plus ``sla_min_slack_min`` minutes (15 by
    default: a 42-second trace job would otherwise have to be delivered 30
    seconds after its submission, shorter than any preemption round takes);
    ``restart_job`` with probability ``scenario.restart_job_share``; priority
    and ``preemptable`` from the mix.

Each mix draws from its own ``random.Random`` seeded from ``rng`` in mix
order, so editing one mix does not reshuffle the jobs of the others. Jobs are
named ``f"{queue}-{i:05d}"``, numbered per queue from 0 in submission order,
and returned sorted by ``(submit_s, name)``.
"""

from __future__ import annotations

import math
import random  # noqa: TID251 -- the type, and sub-streams seeded from the rng passed in
from collections.abc import Iterator, Sequence
from dataclasses import replace

from gpuyield.agents.simulator.defaults import FALLBACK_RULES, PRODUCTION_SLA_FACTOR
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.schemas.scenario import Scenario, WorkloadMix

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0

BURST_GAP_SPREAD = (2.0 / 3.0, 4.0 / 3.0)
"""Gap between bursts = U(2/3, 4/3) x ``burst_every_h``: mean ``burst_every_h``."""

BURST_SPREAD_S = 900.0
"""The jobs of one burst are submitted within 15 minutes of its start."""

MIN_DURATION_S = 60.0
"""No job is shorter than a minute (a scheduling cycle); the lognormal rarely goes there."""

QUEUE_KINDS: dict[str, JobKind] = {
    "production-core": JobKind.PRODUCTION,
    "research-elastic": JobKind.RESEARCH,
}
"""How a queue's jobs behave when the scenario has no mix for it; any other queue is shared."""


def generate(scenario: Scenario, rng: random.Random) -> list[JobSpec]:
    """The scenario's workload over ``scenario.days``, sorted by ``(submit_s, name)``.

    Pure: the same scenario and the same ``rng`` state give the same jobs.
    Raises ValueError for a mix whose ``kind`` is not a ``JobKind``.
    """
    horizon_s = scenario.days * SECONDS_PER_DAY
    start_s = -scenario.warmup_h * SECONDS_PER_HOUR
    drafts: list[tuple[float, int, int, JobSpec]] = []
    streams = [(substream(rng), substream(rng)) for _ in scenario.workload]
    for m, (mix, (arrival_rng, draws)) in enumerate(zip(scenario.workload, streams, strict=True)):
        kind = JobKind(mix.kind)
        for seq, submit_s in enumerate(arrivals(mix, horizon_s, arrival_rng, start_s=start_s)):
            gpus_per_pod = draws.choice(mix.gpus_per_pod)
            pods = draws.choice(mix.pods)
            job = assign_missing(
                name="",
                queue=mix.queue,
                kind=kind,
                submit_s=submit_s,
                pods=pods,
                gpus_per_pod=gpus_per_pod,
                duration_s=draw_duration_s(mix, draws),
                rules=mix,
                restart_job_share=scenario.restart_job_share,
                rng=draws,
            )
            drafts.append((submit_s, m, seq, job))
    drafts.sort(key=lambda d: (d[0], d[1], d[2]))
    numbered: dict[str, int] = {}
    jobs: list[JobSpec] = []
    for _, _, _, job in drafts:
        i = numbered.get(job.queue, 0)
        numbered[job.queue] = i + 1
        jobs.append(replace(job, name=f"{job.queue}-{i:05d}"))
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    return jobs


def substream(rng: random.Random) -> random.Random:
    """An independent generator seeded by 64 bits of ``rng``: deterministic, and its draws
    never shift those of a sibling stream. Simulation, not cryptography."""
    return random.Random(rng.getrandbits(64))  # noqa: S311


def arrivals(
    mix: WorkloadMix, horizon_s: float, rng: random.Random, *, start_s: float = 0.0
) -> Iterator[float]:
    """Submission times of ``mix`` in ``[start_s, horizon_s)``, whole seconds, sorted per burst."""
    if mix.burst_every_h is None:
        if mix.jobs_per_day <= 0:
            return
        rate_per_s = mix.jobs_per_day / SECONDS_PER_DAY
        t = start_s + rng.expovariate(rate_per_s)
        while t < horizon_s:
            yield float(math.floor(t))
            t += rng.expovariate(rate_per_s)
        return
    every_s = mix.burst_every_h * SECONDS_PER_HOUR
    start = start_s + rng.uniform(0.0, every_s)
    while start < horizon_s:
        offsets = sorted(rng.uniform(0.0, BURST_SPREAD_S) for _ in range(mix.burst_size))
        for offset in offsets:
            if start + offset < horizon_s:
                yield float(math.floor(start + offset))
        start += every_s * rng.uniform(*BURST_GAP_SPREAD)


def draw_duration_s(mix: WorkloadMix, rng: random.Random) -> float:
    """Work at full width: lognormal(median, sigma) clipped to [1 minute, max], whole seconds."""
    median_s = mix.duration_h_median * SECONDS_PER_HOUR
    raw = rng.lognormvariate(math.log(median_s), mix.duration_sigma)
    clipped = min(max(raw, MIN_DURATION_S), mix.duration_h_max * SECONDS_PER_HOUR)
    return float(max(round(clipped), 1))


def assign_missing(
    *,
    name: str,
    queue: str,
    kind: JobKind,
    submit_s: float,
    pods: int,
    gpus_per_pod: int,
    duration_s: float,
    rules: WorkloadMix,
    restart_job_share: float,
    rng: random.Random,
) -> JobSpec:
    """A job from what is known of it plus the documented rules for what is not.

    Used by the generator after drawing arrival, shape and duration, and by the
    trace replay for what a trace lacks. Draws, in this order, always all four
    (so one job's draws never depend on its shape): elastic?, checkpoint
    interval, SLA factor, restart_job.
    """
    elastic = rng.random() < rules.elastic_share
    low, high = rules.checkpoint_interval_min
    checkpoint_interval_s = rng.uniform(low, high) * 60.0
    sla_low, sla_high = rules.sla_factor or PRODUCTION_SLA_FACTOR
    sla_factor = rng.uniform(sla_low, sla_high)
    restart_job = rng.random() < restart_job_share
    return JobSpec(
        name=name,
        queue=queue,
        kind=kind,
        submit_s=submit_s,
        pods=pods,
        gpus_per_pod=gpus_per_pod,
        min_available=math.ceil(pods / 2) if elastic else pods,
        duration_s=duration_s,
        checkpoint_interval_s=checkpoint_interval_s,
        priority=rules.priority,
        sla_s=max(duration_s * sla_factor, duration_s + rules.sla_min_slack_min * 60.0)
        if kind is JobKind.PRODUCTION
        else None,
        preemptable=rules.preemptable,
        restart_job=restart_job,
    )


def rules_for_queue(queue: str, workload: Sequence[WorkloadMix]) -> tuple[JobKind, WorkloadMix]:
    """The kind and the rules of a job in ``queue`` that did not come from a mix (a trace job).

    The first mix of ``workload`` for that queue if there is one (its kind and
    its rules); otherwise the kind by the queue's name (``QUEUE_KINDS``,
    shared for any other) with that kind's rules from the default workload.
    """
    for mix in workload:
        if mix.queue == queue:
            return JobKind(mix.kind), mix
    kind = QUEUE_KINDS.get(queue, JobKind.SHARED)
    return kind, FALLBACK_RULES[kind.value]


def jobs_per_day(mix: WorkloadMix) -> float:
    """Mean arrivals a day: ``jobs_per_day``, or ``burst_size`` per mean burst gap."""
    if mix.burst_every_h is None:
        return mix.jobs_per_day
    return mix.burst_size * 24.0 / mix.burst_every_h


def mean_duration_h(mix: WorkloadMix) -> float:
    """Mean of the clipped lognormal, in hours (the one-minute floor is neglected).

    E[min(X, m)] = exp(mu + sigma^2 / 2) Phi((ln m - mu - sigma^2) / sigma)
    + m (1 - Phi((ln m - mu) / sigma)) for X lognormal(mu, sigma).
    """
    m = mix.duration_h_max
    if mix.duration_sigma == 0:
        return min(mix.duration_h_median, m)
    mu, sigma = math.log(mix.duration_h_median), mix.duration_sigma

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    below = math.exp(mu + sigma**2 / 2) * phi((math.log(m) - mu - sigma**2) / sigma)
    return below + m * (1.0 - phi((math.log(m) - mu) / sigma))


def mean_gpus(mix: WorkloadMix) -> float:
    """Mean GPUs a job of ``mix`` asks for (pods and pod size are independent draws)."""
    return (sum(mix.gpus_per_pod) / len(mix.gpus_per_pod)) * (sum(mix.pods) / len(mix.pods))


def expected_gpu_hours_per_day(mix: WorkloadMix) -> float:
    """The load ``mix`` offers: arrivals x GPUs x hours of work, per day."""
    return jobs_per_day(mix) * mean_gpus(mix) * mean_duration_h(mix)
