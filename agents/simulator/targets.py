"""The bar a preemption policy must clear against stock Volcano on the same workload.

gpuyield's promise is production's SLA first, then the least lost work, and
never a lost-work win bought with production waits or with the jobs the pool
completes. So a comparison is judged on all of them at once, against
``volcano-native`` run on the same jobs (``TARGETS``):

- production SLA attainment no lower, production wait p99 no longer;
- at least 90 % of the jobs completed;
- lost work at least 10x below (or none at all);
- no dangling gang.

Pure: figures in, verdicts out, so ``gpuyield simulate`` prints them for any
scenario or trace a user brings, and the tests hold the shipped scenarios to
them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuyield.schemas.simulation import PolicyMetrics

BASELINE = "volcano-native"
"""What every other policy is judged against: stock Volcano as most clusters run it."""

COMPLETED_SHARE = 0.9
"""Jobs completed: at least this share of the baseline's."""

LOST_WORK_FACTOR = 10.0
"""Lost work: at least this many times below the baseline's."""


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """One target for one policy: its figure, the baseline's, and whether it was met."""

    policy: str
    target: str
    value: float
    baseline: float
    met: bool
    rule: str


def _sla(m: PolicyMetrics, b: PolicyMetrics) -> tuple[float, float, bool]:
    return m.sla_attainment, b.sla_attainment, m.sla_attainment >= b.sla_attainment - 1e-12


def _wait(m: PolicyMetrics, b: PolicyMetrics) -> tuple[float, float, bool]:
    mine, theirs = m.production_wait_p99_s, b.production_wait_p99_s
    return mine, theirs, mine <= theirs


def _completed(m: PolicyMetrics, b: PolicyMetrics) -> tuple[float, float, bool]:
    mine, theirs = float(m.jobs_completed), float(b.jobs_completed)
    return mine, theirs, mine >= COMPLETED_SHARE * theirs


def _lost(m: PolicyMetrics, b: PolicyMetrics) -> tuple[float, float, bool]:
    mine, theirs = m.lost_gpu_hours_per_day, b.lost_gpu_hours_per_day
    return mine, theirs, mine == 0.0 or mine * LOST_WORK_FACTOR <= theirs


def _dangling(m: PolicyMetrics, b: PolicyMetrics) -> tuple[float, float, bool]:
    return m.dangling_gangs_per_week, b.dangling_gangs_per_week, m.dangling_gangs_per_week == 0


Judge = Callable[[PolicyMetrics, PolicyMetrics], tuple[float, float, bool]]
"""A target's check: (the policy's figure, the baseline's, met)."""

TARGETS: tuple[tuple[str, str, Judge], ...] = (
    ("sla_attainment", "production SLA attainment >= the baseline's", _sla),
    ("production_wait_p99_s", "production wait p99 <= the baseline's", _wait),
    (
        "jobs_completed",
        f"jobs completed >= {COMPLETED_SHARE:.0%} of the baseline's",
        _completed,
    ),
    (
        "lost_gpu_hours_per_day",
        f"lost work none, or >= {LOST_WORK_FACTOR:g}x below the baseline's",
        _lost,
    ),
    ("dangling_gangs_per_week", "no dangling gang", _dangling),
)
"""Each target: the metric it reads, the rule in words, and the check."""


def check_targets(
    metrics: Mapping[str, PolicyMetrics], baseline: str = BASELINE
) -> list[TargetCheck]:
    """Every target for every policy but the baseline; empty when the baseline was not run."""
    base = metrics.get(baseline)
    if base is None:
        return []
    checks: list[TargetCheck] = []
    for policy, m in metrics.items():
        if policy == baseline:
            continue
        for target, rule, judge in TARGETS:
            value, theirs, met = judge(m, base)
            checks.append(TargetCheck(policy, target, value, theirs, met, rule))
    return checks
