"""gpuyield in the simulator: the planner, graceful yield, cooldowns and the livelock guard.

The decision logic is the production code, not a copy: the simulator's state
becomes a format-v1 snapshot (``snapshots.py``), ``gpuyield.agents.planner``
chooses the victims, and the pure ``gpuyield.agents.policy`` modules keep
one round per shortage (``DemandLedger``) and slow down repeated evictions
(``LivelockGuard``, driven by the engine). Victims yield: they write an
emergency checkpoint within ``checkpoint_save_s`` and only then release their
GPUs, which stay nominated for the preemptor; whole victims are suspended
and resume from that checkpoint when they fit again.
"""

from __future__ import annotations

from gpuyield.agents.planner import plan
from gpuyield.agents.policy.demands import DemandLedger
from gpuyield.agents.simulator.defaults import DEFAULT_CONTROLLER
from gpuyield.agents.simulator.engine import Decision, Simulation
from gpuyield.agents.simulator.snapshots import node_name, pod_name, snapshot_for
from gpuyield.agents.simulator.state import Phase, SimJob
from gpuyield.schemas.config import ControllerConfig

PLANNER_BUDGET = DEFAULT_CONTROLLER.planner_budget
"""Search steps per decision in the simulator (``defaults.DEFAULT_CONTROLLER`` says why)."""

RETRY_BACKOFF_MAX_S = DEFAULT_CONTROLLER.demand_backoff_max_s
"""The longest retry delay of a demand that keeps finding no plan (``DEFAULT_CONTROLLER``)."""


class GpuyieldPolicy:
    """The knobs come from a ``ControllerConfig`` (``defaults.DEFAULT_CONTROLLER`` unless
    given): the planner budget and the demand retry and backoff; the planner's own
    knobs come from the scenario's ``policy``, which the snapshots carry."""

    name = "gpuyield"
    graceful = True

    def __init__(
        self, config: ControllerConfig = DEFAULT_CONTROLLER, *, budget: int | None = None
    ) -> None:
        self.budget = config.planner_budget if budget is None else budget
        self.ledger = DemandLedger(
            cooldown_s=config.demand_retry_s,
            backoff_max_s=config.demand_backoff_max_s,
            sla_retry_s=config.sla_retry_s,
        )
        self.decisions = 0

    def may_decide(self, sim: Simulation, job: SimJob) -> bool:
        """Not while the demand ledger holds ``job`` back (cooldown, backoff, round in flight)."""
        # A job with an SLA (its snapshot's sla_deadline) is retried every cycle.
        return self.ledger.may_plan(job.name, sim.now, sla=job.spec.sla_s is not None)

    def held_until(self, sim: Simulation, job: SimJob) -> float:
        """Until the ledger's cooldown, backoff or round in flight for ``job`` may end."""
        return self.ledger.held_until(job.name, sla=job.spec.sla_s is not None)

    def decide(self, sim: Simulation, job: SimJob) -> Decision | None:
        if not self.may_decide(sim, job):
            return None
        if no_victim_possible(sim, job):
            self.ledger = self.ledger.tried(job.name, sim.now)  # what the planner would say
            return None
        result = plan(snapshot_for(sim, job), job.name, budget=self.budget)
        if not result.feasible or not result.victims:
            self.ledger = self.ledger.tried(job.name, sim.now)
            return None
        by_pod = {pod_name(job, p.index): p.index for p in job.pods}
        by_node = {node_name(i): i for i in range(len(sim.cluster.free))}
        victims: dict[str, tuple[int, ...]] = {}
        for victim in result.victims:
            other = sim.jobs[victim.job]
            names = set(victim.pods)
            victims[victim.job] = tuple(
                p.index for p in other.pods if pod_name(other, p.index) in names
            )
        placement = {by_pod[pod]: by_node[node] for pod, node in result.placement.items()}
        return Decision(job.name, victims, placement)

    def executed(self, sim: Simulation, decision: Decision) -> None:
        self.decisions += 1
        self.ledger = self.ledger.decided(
            decision.preemptor,
            frozenset(decision.victims),
            sim.now,
            sim.now + sim.scenario.policy.grace_s,
        )


def no_victim_possible(sim: Simulation, job: SimJob) -> bool:
    """True only when the planner would find no victim for ``job``: skip building its snapshot.

    In an overloaded pool most of a backlog can evict nobody: its queue is
    above its guarantee (no reclaim: contract rule 3, reading 6, ``job``'s
    own queue is on its branch), and nothing in its own queue weighs less
    (rule 2: a same-queue victim's W_eff, never below its priority, must be
    below the preemptor's weight, its priority when pending and at most
    priority + beta x progress^2 when suspended). Building a snapshot of the
    whole cluster for each of them every cycle was most of the run time.
    """
    spec = job.spec
    policy = sim.scenario.policy
    weight = float(spec.priority)
    if job.phase is Phase.SUSPENDED:  # its snapshot state; run hours count only when running
        weight += policy.beta * job.progress() ** 2
    lightest = sim.lowest_running_priority(spec.queue)
    if lightest is not None and lightest < weight:
        return False  # something running in its own queue weighs less
    need = len(job.waiting()) * spec.gpus_per_pod
    return sim.queue_used[spec.queue] + need > sim.tree.guarantee(spec.queue)
