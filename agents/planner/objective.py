"""What the plan minimises, as one tuple compared with ``<`` (contract, "What the plan minimises").

1. protected victim jobs (rule 3: near-finished work goes last);
2. lost work, GPU-seconds since each victim's last checkpoint;
3. victim jobs;
4. total W_eff of the victims;
5. sorted victim job names, then sorted evicted pod names (reading 7).

Sums use ``math.fsum``: correctly rounded and independent of order, so equal
plans compare equal and reach the tie-breaks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from gpuyield.agents.planner.session import PlanningSession


class Cost(NamedTuple):
    protected: int
    lost_gpu_seconds: float
    victim_jobs: int
    victim_weight: float
    job_names: tuple[str, ...]
    pod_names: tuple[str, ...]


def cost_of(
    session: PlanningSession,
    evicted: Mapping[int, frozenset[int]],
    protected: frozenset[int],
) -> Cost:
    """The exact cost of evicting ``evicted`` (candidate index -> pod indexes)."""
    victims = sorted(
        (i for i, pods in evicted.items() if pods), key=lambda i: session.candidates[i].name
    )
    lost = []
    pod_names = []
    for i in victims:
        cand = session.candidates[i]
        for p in evicted[i]:
            pod = cand.pods[p]
            lost.append(pod.gpus * cand.lost_per_gpu_s)
            pod_names.append(pod.name)
    return Cost(
        protected=sum(1 for i in victims if i in protected),
        lost_gpu_seconds=math.fsum(lost),
        victim_jobs=len(victims),
        victim_weight=math.fsum(session.candidates[i].w_eff for i in victims),
        job_names=tuple(session.candidates[i].name for i in victims),
        pod_names=tuple(sorted(pod_names)),
    )
