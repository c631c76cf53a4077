"""gpuyield as the live path ran it before it was the cluster's one preemptor: the ablation.

The same decisions as ``gpuyield`` (the planner, graceful yield, the demand
ledger, the livelock guard), without the two mechanisms that make the
simulator's gpuyield what a deployment now gets:

- **Volcano's own preempt and reclaim stay on.** A stock scheduler
  configuration keeps them in its actions. They run inside the scheduler
  session whose allocate just failed to place the job, so they act first;
  gpuyield hears of the demand only once that session has published the
  PodGroup's ``Unschedulable`` condition. Where Volcano finds victims it
  kills them with the pod's grace period (``VolcanoNative``'s victim
  selection, the one model of stock preemption, not a copy); where it finds
  none, gpuyield's planner decides and its victims yield. A suspended job
  (Volcano: an Aborted Job, no pods) is no demand for Volcano's actions, only
  for gpuyield's resume.
- **Freed GPUs are not reserved.** gpuyield's placement stays inside its own
  snapshot: the decision nominates nothing, so allocate gives the GPUs to
  whichever pending job comes first in its order (priority, then
  submission), and a preemptor that loses them waits for the demand
  ledger's next round, which evicts again.

Registered as ``gpuyield-unreserved``; not in the default comparison, whose
columns are what a deployment chooses between.
"""

from __future__ import annotations

import math
import random  # noqa: TID251 -- a seeded Random is passed in, for Volcano's node order
from dataclasses import replace

from gpuyield.agents.simulator.defaults import DEFAULT_CONTROLLER
from gpuyield.agents.simulator.engine import Decision, Simulation
from gpuyield.agents.simulator.gpuyield_policy import GpuyieldPolicy
from gpuyield.agents.simulator.state import Phase, SimJob
from gpuyield.agents.simulator.volcano_native import VolcanoNative
from gpuyield.schemas.config import ControllerConfig


class GpuyieldUnreserved:
    name = "gpuyield-unreserved"
    graceful = True  # gpuyield's own victims yield; Volcano's decisions say graceful=False

    def __init__(self, rng: random.Random, config: ControllerConfig = DEFAULT_CONTROLLER) -> None:
        self.volcano = VolcanoNative(rng)
        self.gpuyield = GpuyieldPolicy(config)

    def may_decide(self, sim: Simulation, job: SimJob) -> bool:
        """Volcano's actions try every starving job (gpuyield's ledger only holds its own)."""
        return True

    def held_until(self, sim: Simulation, job: SimJob) -> float:
        """Never held back."""
        return -math.inf

    def decide(self, sim: Simulation, job: SimJob) -> Decision | None:
        if job.phase is not Phase.SUSPENDED:
            stock = self.volcano.decide(sim, job)
            if stock is not None:
                return replace(stock, graceful=False)
        decision = self.gpuyield.decide(sim, job)
        if decision is None:
            return None
        return replace(decision, placement=None, graceful=True)

    def executed(self, sim: Simulation, decision: Decision) -> None:
        if decision.graceful is False:
            return  # Volcano's eviction: gpuyield's ledger never heard of it
        self.gpuyield.executed(sim, decision)
