"""The default scenario: the seed articles' 64 x 8-GPU pool, shared by three tenants for 14 days.

Every number below is chosen so that, with good scheduling, the 512 GPUs run
about 85-92 % busy: busy enough that production bursts can only be served by
taking borrowed GPUs back, idle enough that a good policy can keep every
production SLA. The offered load (``workload.expected_gpu_hours_per_day``, the
mean of each documented distribution, clipping included) is:

=====================  =========  ===========  ==========  =============
mix                    jobs/day   GPUs/job     hours/job   GPU-hours/day
=====================  =========  ===========  ==========  =============
production steady      20         20 (8-32)    5.99        2,394
production bursts      12         20 (8-32)    5.99        1,437
research exploratory   15         14.1 (1-64)  11.8        2,485
shared tenants         64         14 (4-32)    5.11        4,577
total                                                      10,893
=====================  =========  ===========  ==========  =============

that is 10,893 of the pool's 512 x 24 = 12,288 GPU-hours a day, 88.6 %
(``tests/simulator/test_defaults.py`` keeps this inside 85-92 %). Per queue:
production-core 3,831 (160 GPUs on average, 62 % of its 256 capability, with
bursts that push it to the capability), research-elastic 2,485 (104 GPUs, 81 %
of its 128 capability: it lives on borrowed GPUs above its 32-GPU guarantee),
shared 4,577 (191 GPUs, above its 128-GPU guarantee).

``examples/scenario-default.json`` is this scenario dumped; regenerate it with::

    .venv/bin/python -c "from gpuyield.agents.simulator.defaults import render_default_scenario
    open('examples/scenario-default.json', 'w').write(render_default_scenario())"
"""

from __future__ import annotations

import json

from gpuyield.schemas import Policy
from gpuyield.schemas.scenario import DEFAULT_QUEUES, Scenario, WorkloadMix

PRODUCTION_PRIORITY = 1000
"""Production fine-tuning outranks everything (the contract's examples use 1000):
a pending production job's ``W_eff`` of 1000 beats any shared or research job
that has not yet run long or come close to finishing, so only those are protected."""

SHARED_PRIORITY = 500
"""Other tenants' steady work: below production, above exploratory research."""

RESEARCH_PRIORITY = 100
"""Exploratory research borrows idle GPUs and is the first to yield."""

PRODUCTION_SLA_FACTOR = (1.5, 3.0)
"""SLA budget = duration x U(1.5, 3) after submission: a 6-hour fine-tune must be
delivered within 9-18 hours, so it may wait for capacity, but not for long.
Also the rule the trace replay uses for jobs mapped to a production queue."""

_PRODUCTION_SHAPE: dict[str, object] = {
    "queue": "production-core",
    "kind": "production",
    "priority": PRODUCTION_PRIORITY,
    # Fine-tuning runs as a gang of whole 8-GPU nodes (NVLink inside a node),
    # 1-4 nodes: 8-32 GPUs, 20 on average.
    "gpus_per_pod": (8,),
    "pods": (1, 2, 3, 4),
    # Every pod is needed: a fine-tune does not run on half its data-parallel ranks.
    "elastic_share": 0.0,
    # Lognormal, median 5 h, sigma 0.6: most runs take 2-12 h (the 5th-95th
    # percentiles are 1.9 h and 13.4 h), mean 5.99 h; none runs past 2 days.
    "duration_h_median": 5.0,
    "duration_sigma": 0.6,
    "duration_h_max": 48.0,
    # Production trainers checkpoint every 20-60 minutes (the range).
    "checkpoint_interval_min": (20.0, 60.0),
    "sla_factor": PRODUCTION_SLA_FACTOR,
    # The queue is not reclaimable and every production job has the same
    # priority, so no other job can ever take a running production job's GPUs;
    # they stay preemptable so that a scenario may add a higher-priority class.
    "preemptable": True,
}

PRODUCTION_STEADY = WorkloadMix.model_validate(
    {
        **_PRODUCTION_SHAPE,
        # 20 a day x 20 GPUs x 5.99 h = 2,394 GPU-hours a day, 100 GPUs on
        # average: the production baseline, well inside the 256-GPU capability.
        "jobs_per_day": 20.0,
    }
)
"""Production fine-tuning arriving as a Poisson stream (the baseline)."""

PRODUCTION_BURSTS = WorkloadMix.model_validate(
    {
        **_PRODUCTION_SHAPE,
        # A release train: every 12-24 hours (18 on average, see
        # workload.BURST_GAP_SPREAD) a team launches 9 fine-tunes at once, 180
        # GPUs on average. On top of the ~100-GPU baseline that is ~280 GPUs
        # wanted, above the 256 capability: each burst pushes production to its
        # capability and production must reclaim what research and shared
        # borrowed. 9 jobs every 18 h = 12 jobs a day (jobs_per_day records that
        # mean; the generator follows burst_every_h and burst_size) = 1,437
        # GPU-hours a day.
        "jobs_per_day": 12.0,
        "burst_every_h": 18.0,
        "burst_size": 9,
    }
)
"""Bursts of production demand (the issue's "bursts of production demand")."""

RESEARCH_EXPLORATORY = WorkloadMix.model_validate(
    {
        "queue": "research-elastic",
        "kind": "research",
        "priority": RESEARCH_PRIORITY,
        # Ablations and sweeps come in every shape: 1, 2, 4 or 8 GPUs per pod and
        # gangs of 1, 2, 4 or 8 pods (1-64 GPUs, 14.1 on average), including
        # small pods that fragment nodes, which is what topology-aware yielding
        # has to repair.
        "gpus_per_pod": (1, 2, 4, 8),
        "pods": (1, 2, 4, 8),
        # 40 % are elastic (min_available = ceil(pods / 2)): data-parallel
        # exploration that can shrink, so surplus pods may yield one by one.
        "elastic_share": 0.4,
        # Longer than production (median 8 h, sigma 0.9: 5th-95th percentiles
        # 1.8 h and 35 h, mean 11.8 h after the 72 h clip): exploratory runs go
        # until someone looks at them, which is why an unplanned kill is costly.
        "duration_h_median": 8.0,
        "duration_sigma": 0.9,
        "duration_h_max": 72.0,
        # Research code checkpoints less often: every 30-120 minutes.
        "checkpoint_interval_min": (30.0, 120.0),
        # 15 a day x 14.1 GPUs x 11.8 h = 2,485 GPU-hours a day, 104 GPUs on
        # average: 81 % of research-elastic's 128-GPU capability, so it runs
        # above its 32-GPU guarantee on borrowed GPUs most of the time.
        "jobs_per_day": 15.0,
    }
)
"""Exploratory research jobs that borrow idle GPUs and yield them first."""

SHARED_TENANTS = WorkloadMix.model_validate(
    {
        "queue": "shared",
        "kind": "shared",
        "priority": SHARED_PRIORITY,
        # Medium jobs of other teams (batch training, evaluation): 4- or 8-GPU
        # pods, 1, 2 or 4 of them (4-32 GPUs, 14 on average).
        "gpus_per_pod": (4, 8),
        "pods": (1, 2, 4),
        "elastic_share": 0.0,
        # Median 4 h, sigma 0.7: mean 5.11 h; 5th-95th percentiles 1.3 h and 12.6 h.
        "duration_h_median": 4.0,
        "duration_sigma": 0.7,
        "duration_h_max": 48.0,
        "checkpoint_interval_min": (20.0, 60.0),
        # 64 a day x 14 GPUs x 5.11 h = 4,577 GPU-hours a day, 191 GPUs on
        # average: the steady load that fills the pool to ~89 % with the others.
        "jobs_per_day": 64.0,
    }
)
"""The other tenants that the 128 GPUs outside production and research served."""

DEFAULT_WORKLOAD: tuple[WorkloadMix, ...] = (
    PRODUCTION_STEADY,
    PRODUCTION_BURSTS,
    RESEARCH_EXPLORATORY,
    SHARED_TENANTS,
)
"""The default workload, in the order the generator draws it."""

FALLBACK_RULES: dict[str, WorkloadMix] = {
    "production": PRODUCTION_STEADY,
    "research": RESEARCH_EXPLORATORY,
    "shared": SHARED_TENANTS,
}
"""Per job kind, the mix whose rules (priority, elasticity, checkpoints, SLA) a
trace job follows when the scenario has no mix for its queue."""


def default_scenario() -> Scenario:
    """The scenario ``gpuyield simulate`` runs when no file is given.

    64 nodes x 8 GPUs (512 H100s, the seed articles' pool), 14 days, seed 0,
    the three queues of ``DEFAULT_QUEUES`` (production-core, research-elastic
    and the documented third queue, shared) and ``DEFAULT_WORKLOAD``.
    """
    return Scenario(queues=DEFAULT_QUEUES, workload=DEFAULT_WORKLOAD, policy=DEFAULT_POLICY)


DEFAULT_POLICY = Policy(cooldown_s=1800.0)
"""The contract's defaults, but a 30-minute cooldown: a job that just started or
resumed is spared for as long as the livelock guard watches for a
preempt-after-resume cycle, so gpuyield does not feed the cycles it detects.
Stock Volcano has no cooldown unless the ``cdp`` plugin is configured, and
the simulated baselines have none."""


def render_default_scenario() -> str:
    """The text of ``examples/scenario-default.json``: the default scenario, dumped."""
    return json.dumps(default_scenario().model_dump(mode="json"), indent=2) + "\n"
