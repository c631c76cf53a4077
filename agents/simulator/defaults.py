"""The default scenario: the seed articles' 64 x 8-GPU pool, shared by three tenants for 14 days.

Two rules size the workload, the way a platform team sizes a shared pool:

- **production-core's capability covers its peak.** Its jobs carry delivery
  SLAs and its queue may never take more than 256 GPUs, so the team sizes its
  demand (baseline plus release-train bursts) so that 256 GPUs cover it 99 %
  of the time: 93 GPUs on average, 36 % of the capability. What production
  cannot get is then never its own limit but GPUs that others borrowed, which
  is what preemption policies differ on. (Bursts that push production past
  its capability make production jobs wait for each other, and miss SLAs,
  under every policy alike: no preemption policy can lift a capability.)
  ``tests/simulator/test_default_scenario.py`` checks the 99th percentile of
  production's unconstrained demand against 256 on the generated workloads.
- **the pool is offered more work than it can run at 90 %.** The articles'
  pool ran 89.6 % busy, which needs work waiting for every GPU that frees up:
  research hits its 128-GPU capability (its average demand is 81 % of it) and
  waits, gangs of whole nodes leave fragments, and production's bursts come
  and go. So the other tenants offer enough that the pool as a whole is
  offered ~97 % of its GPU-hours; the measured utilization is what a policy
  makes of that.

The offered load (``workload.expected_gpu_hours_per_day``, the mean of each
documented distribution, clipping included) is:

=====================  =========  ===========  ==========  =============
mix                    jobs/day   GPUs/job     hours/job   GPU-hours/day
=====================  =========  ===========  ==========  =============
production steady      12         20 (8-32)    5.99        1,437
production bursts      6.67       20 (8-32)    5.99        798
research exploratory   15         14.1 (1-64)  11.8        2,485
shared tenants         100        14 (4-32)    5.11        7,152
total                                                      11,872
=====================  =========  ===========  ==========  =============

that is 11,872 of the pool's 512 x 24 = 12,288 GPU-hours a day, 96.6 %
(``tests/simulator/test_default_scenario.py`` keeps this inside 93-99 %). Per
queue: production-core 2,235 (93 GPUs on average, 36 % of its 256 capability;
a burst adds 100 GPUs within 15 minutes), research-elastic 2,485 (104 GPUs, 81 %
of its 128 capability: it lives on borrowed GPUs above its 32-GPU guarantee),
shared 7,152 (298 GPUs, far above its 128-GPU guarantee: borrowed too).

The workload starts ``Scenario.warmup_h`` = 24 hours before the measured 14
days, so they open on a busy pool rather than an empty one.

``examples/scenario-default.json`` is this scenario dumped; regenerate it with::

    .venv/bin/python -c "from gpuyield.agents.simulator.defaults import render_default_scenario
    open('examples/scenario-default.json', 'w').write(render_default_scenario())"
"""

from __future__ import annotations

import json

from gpuyield.schemas import Policy
from gpuyield.schemas.config import ControllerConfig
from gpuyield.schemas.scenario import DEFAULT_QUEUES, Scenario, WorkloadMix
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit

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
Also the rule the trace replay uses for jobs mapped to a production queue. The
budget leaves at least ``WorkloadMix.sla_min_slack_min`` (15) minutes beyond
the duration: no generated fine-tune is that short (they last 47 minutes or
more in 99.9 % of draws), but a trace's production jobs can last seconds, and
a 42-second job's 1.5-3x budget ends 21-84 seconds after it could start at
best, before any preemption round (a 30-second kill grace, a 60-second
emergency checkpoint) can free its GPUs: those budgets measure whether GPUs
happened to be idle, not how a policy reclaims them."""

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
        # 12 a day x 20 GPUs x 5.99 h = 1,437 GPU-hours a day, 60 GPUs on
        # average: the production baseline, well inside the 256-GPU capability.
        "jobs_per_day": 12.0,
    }
)
"""Production fine-tuning arriving as a Poisson stream (the baseline)."""

PRODUCTION_BURSTS = WorkloadMix.model_validate(
    {
        **_PRODUCTION_SHAPE,
        # A release train: every 12-24 hours (18 on average, see
        # workload.BURST_GAP_SPREAD) a team launches 5 fine-tunes at once, 100
        # GPUs on average, within 15 minutes. The pool is ~90 % busy, so a
        # burst finds few idle GPUs: production must reclaim what research and
        # shared borrowed, and fast. 5 jobs every 18 h = 6.67 jobs a day
        # (jobs_per_day records that mean; the generator follows burst_every_h
        # and burst_size) = 798 GPU-hours a day.
        "jobs_per_day": 20.0 / 3.0,
        "burst_every_h": 18.0,
        "burst_size": 5,
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
        # 100 a day x 14 GPUs x 5.11 h = 7,152 GPU-hours a day, 298 GPUs on
        # average: the steady load that keeps work waiting for every GPU that
        # production and research leave (see the module docstring).
        "jobs_per_day": 100.0,
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

    64 nodes x 8 GPUs (512 H100s, the seed articles' pool), 14 days after a
    24-hour warm-up, seed 0, the three queues of ``DEFAULT_QUEUES``
    (production-core, research-elastic and the documented third queue,
    shared) and ``DEFAULT_WORKLOAD``.
    """
    return Scenario(queues=DEFAULT_QUEUES, workload=DEFAULT_WORKLOAD, policy=DEFAULT_POLICY)


DEFAULT_POLICY = Policy(cooldown_s=1800.0)
"""The contract's defaults, but a 30-minute cooldown: a job that just started or
resumed is spared for as long as the livelock guard watches for a
preempt-after-resume cycle, so gpuyield does not feed the cycles it detects.
Stock Volcano has no cooldown unless the ``cdp`` plugin is configured, and
the simulated baselines have none."""


DEFAULT_CONTROLLER = ControllerConfig(
    policy=DEFAULT_POLICY,
    planner_budget=5_000,
    demand_retry_s=300.0,
    demand_backoff_max_s=1800.0,
)
"""The simulator's gpuyield knobs, where they differ from the controller's defaults.

- ``planner_budget`` 5,000 search steps per decision: simulated clusters are
  small and a 14-day run makes thousands of decisions.
- ``demand_retry_s`` 300: a demand that found no plan is retried after 5
  minutes of virtual time (the engine has no pod events to retry on sooner).
- ``demand_backoff_max_s`` 1800: one that keeps finding none is retried after
  5, 10, 20, then every 30 minutes instead of every 5. A backlog of jobs that
  no eviction may serve (their queue above its guarantee, nothing lighter to
  preempt) otherwise calls the planner once per job every 5 minutes for as
  long as it lasts, which on the Philly trace was most of the run time.

``gpuyield simulate`` starts from these, then applies the knobs the settings
set explicitly (``GPUYIELD_<KNOB>`` or the settings file), then a scenario
file's ``policy`` block: the scenario names what one experiment varies."""


OVERLOAD_NODES = 32
"""The overloaded scenario's pool: half the default's 512 GPUs, for twice the demand."""

OVERLOAD_QUEUE_MAP = "7f04ca=production-core,ee9e8c=research-elastic,*=shared"
"""The Philly replay's queue mapping (README), used for the overloaded scenario too."""


def overload_scenario() -> Scenario:
    """The Philly fortnight (``--trace-start 28``) on 32 nodes: demand about twice the pool.

    On the default 512 GPUs the trace's jobs would hold 92 % of the pool if
    each started when submitted; on 256 they would hold 184 %, so backlogs
    grow for days and every policy must choose whom to serve. The queues are
    the default's, scaled to the smaller pool so that each keeps its role:

    - production-core: guarantee and capability 160 GPUs, not reclaimable.
      Its virtual cluster's demand has a p99 of 144 GPUs, so it fits its
      capability: what it waits for is GPUs others borrowed, as in the
      default scenario (a capability below its demand would make production
      wait for itself, under every policy alike).
    - research-elastic: guarantee 16, capability 128 (its largest jobs are
      128-GPU gangs), reclaimable.
    - shared: guarantee 64, capability 256, reclaimable: everyone else.

    Guarantees add up to 240 of the 256 GPUs. Everything else (policy,
    timers, retry budget) is the default scenario's. Run it with
    ``gpuyield simulate --scenario examples/scenario-overload.json --trace
    ../shared/traces/philly/philly_jobs.csv --trace-start 28 --queue-map
    OVERLOAD_QUEUE_MAP``.
    """
    scaled = {"production-core": (160, 160), "research-elastic": (16, 128), "shared": (64, 256)}
    queues = tuple(
        q.model_copy(
            update={
                "guarantee": GpuAmount(gpu=scaled[q.name][0]),
                "capability": GpuLimit(gpu=scaled[q.name][1]),
            }
        )
        for q in DEFAULT_QUEUES
    )
    return default_scenario().model_copy(update={"nodes": OVERLOAD_NODES, "queues": queues})


def render_overload_scenario() -> str:
    """The text of ``examples/scenario-overload.json``: the overloaded scenario, dumped."""
    return json.dumps(overload_scenario().model_dump(mode="json"), indent=2) + "\n"


def render_default_scenario() -> str:
    """The text of ``examples/scenario-default.json``: the default scenario, dumped."""
    return json.dumps(default_scenario().model_dump(mode="json"), indent=2) + "\n"
