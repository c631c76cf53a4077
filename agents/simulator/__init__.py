"""The cluster simulator: gpuyield against stock Volcano preemption, same workload, same seed.

Pure and deterministic: virtual time, a ``random.Random`` seeded from the
scenario, no I/O. It runs the production decision code (the planner and the
``gpuyield.agents.policy`` modules), never a copy.
"""

from __future__ import annotations

import random  # noqa: TID251 -- seeded Randoms only, derived from the scenario's seed
from collections.abc import Callable, Sequence
from typing import Protocol

from gpuyield.agents.simulator.defaults import DEFAULT_CONTROLLER
from gpuyield.agents.simulator.engine import Observer, PreemptionPolicy, Simulation
from gpuyield.agents.simulator.gpuyield_policy import GpuyieldPolicy
from gpuyield.agents.simulator.gpuyield_unreserved import GpuyieldUnreserved
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.agents.simulator.metrics import measure
from gpuyield.agents.simulator.volcano_gang import VolcanoGang
from gpuyield.agents.simulator.volcano_native import VolcanoNative
from gpuyield.schemas.config import ControllerConfig
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.simulation import PolicyResult


class PolicyFactory(Protocol):
    """Makes a policy for one run; gpuyield's policies take their knobs from ``config``."""

    def __call__(
        self, scenario: Scenario, config: ControllerConfig = DEFAULT_CONTROLLER, /
    ) -> PreemptionPolicy: ...


POLICIES: dict[str, PolicyFactory] = {
    "volcano-native": lambda s, c=DEFAULT_CONTROLLER: VolcanoNative(
        random.Random(f"volcano-native:{s.seed}")  # noqa: S311
    ),
    "volcano-gang": lambda s, c=DEFAULT_CONTROLLER: VolcanoGang(),
    "gpuyield": lambda s, c=DEFAULT_CONTROLLER: GpuyieldPolicy(c),
    "gpuyield-unreserved": lambda s, c=DEFAULT_CONTROLLER: GpuyieldUnreserved(
        random.Random(f"gpuyield-unreserved:{s.seed}"),  # noqa: S311
        c,
    ),
}

DEFAULT_POLICIES = ("volcano-native", "volcano-gang", "gpuyield")
"""What ``gpuyield simulate`` compares unless told: the choices a deployment has.
``gpuyield-unreserved`` is an ablation (gpuyield without being the one preemptor
and without reserved GPUs), run with ``--policies``."""

__all__ = ["DEFAULT_POLICIES", "POLICIES", "JobKind", "JobSpec", "Simulation", "run_policy"]


def run_policy(
    scenario: Scenario,
    jobs: Sequence[JobSpec],
    policy: str,
    on_progress: Callable[[float], None] | None = None,
    *,
    config: ControllerConfig = DEFAULT_CONTROLLER,
    observer: Observer | None = None,
) -> PolicyResult:
    """Simulate ``jobs`` on ``scenario``'s cluster under one named policy.

    ``config`` holds gpuyield's knobs beyond the scenario's ``policy`` (planner
    budget, demand retry and backoff); the default is the simulator's own.
    ``observer`` watches the run (``event_log.EventLog``) without changing it.
    """
    try:
        make = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown policy '{policy}' (choose from {', '.join(POLICIES)})") from None
    sim = Simulation(scenario, jobs, make(scenario, config), observer=observer)
    sim.run(on_progress)
    return measure(sim)
