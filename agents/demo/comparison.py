"""The demo's workload in the simulator: what stock Volcano preemption would have done with it.

The live demo shows gpuyield on one machine; the simulator replays the same
jobs (same nodes, queues, gang shapes, priorities, checkpoint intervals) in
simulated time under each policy, ``volcano-native`` and ``volcano-gang``
(kill on preemption) and ``gpuyield`` (yield with a checkpoint), with the
stock policy timers. One wall second of the demo is ``SPEED`` simulated
seconds: research starts at 0 and has run ``PRIOR_H`` hours when the demo's
story begins (the demo's research had been running for hours too), the burst
arrives ``BURST_AFTER_S`` into the story, a fine-tune's work is its demo run
time, checkpoints come as often as the demo's trainers write them. Research
jobs outlast the window, as they outlast the demo.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuyield.agents.demo.scenario import PRODUCTION, SPEED, DemoScenario, JobPlan
from gpuyield.agents.simulator import DEFAULT_POLICIES, JobKind, JobSpec, run_policy
from gpuyield.schemas import Policy
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.simulation import PolicyMetrics
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit, Queue

PRIOR_H = 2.0
"""Simulated hours research has run when the story begins."""
BURST_AFTER_S = 12.5
"""Wall seconds from the research start to the burst, as the comparison assumes it."""
RESEARCH_WORK_H = 48.0
"""Research work left at the start: more than the window, as in the demo."""
SLA_FACTOR = 2.0
"""A fine-tune's SLA budget: this many times its work, from its submission."""
SETTLE_S = 40.0
"""Wall seconds after the last fine-tune's end that the window still covers (the resumes)."""


def _burst_at(plan: JobPlan) -> float:
    return PRIOR_H * 3600 + (BURST_AFTER_S + plan.delay_s) * SPEED


def _spec(plan: JobPlan) -> JobSpec:
    production = plan.queue == PRODUCTION
    work_s = plan.run_s * SPEED if plan.finishes else RESEARCH_WORK_H * 3600
    return JobSpec(
        name=plan.key,
        queue=plan.queue,
        kind=JobKind.PRODUCTION if production else JobKind.RESEARCH,
        submit_s=_burst_at(plan) if plan.burst else 0.0,
        pods=plan.pods,
        gpus_per_pod=plan.gpus_per_pod,
        min_available=plan.min_available,
        duration_s=work_s,
        checkpoint_interval_s=plan.checkpoint_every / plan.steps_per_s * SPEED,
        priority=plan.priority,
        sla_s=work_s * SLA_FACTOR if production else None,
    )


def simulator_inputs(scenario: DemoScenario) -> tuple[Scenario, list[JobSpec]]:
    """The simulator's scenario and jobs for the demo's workload."""
    burst_end = max(
        (_burst_at(j) + j.run_s * SPEED for j in scenario.jobs if j.burst),
        default=PRIOR_H * 3600,
    )
    horizon_s = burst_end + SETTLE_S * SPEED
    sim = Scenario(
        nodes=len(scenario.nodes),
        gpus_per_node=scenario.nodes[0].gpus,
        days=horizon_s / 86400.0,
        warmup_h=0.0,
        seed=scenario.seed,
        queues=tuple(
            Queue(
                name=q.name,
                weight=q.weight,
                guarantee=GpuAmount(gpu=q.guarantee),
                capability=GpuLimit(gpu=q.capability),
                reclaimable=q.reclaimable,
            )
            for q in scenario.queues
        ),
        policy=Policy(),
    )
    return sim, [_spec(j) for j in scenario.jobs]


def compare(
    scenario: DemoScenario, *, on_policy: Callable[[str], None] | None = None
) -> tuple[Scenario, dict[str, PolicyMetrics]]:
    """Each simulator policy's metrics on the demo's workload (a few seconds of CPU at most)."""
    sim, jobs = simulator_inputs(scenario)
    out: dict[str, PolicyMetrics] = {}
    for name in DEFAULT_POLICIES:
        if on_policy is not None:
            on_policy(name)
        out[name] = run_policy(sim, jobs, name).metrics
    return sim, out
