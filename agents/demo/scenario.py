"""The demo's workload: a small shared GPU pool, research filling it, a production burst.

The story, with the default seed (``describe`` prints it for the user):

- 4 nodes x 8 GPUs (two racks). Queue ``production`` (weight 4, guarantee 16,
  capability 32, not reclaimable) and queue ``research`` (weight 1,
  capability 32, reclaimable).
- Research fills all 32 GPUs at the start: three single-pod jobs that run the
  real torch example (``examples/train_tiny.py``, a tiny MLP on the CPU,
  checkpointing every 5 s), a two-pod gang on two whole nodes and an elastic
  two-pod job (min 1), both run by stand-in processes that report simulated
  progress (far along already) and checkpoint every 30 s. The planner's first
  criterion is the work a yield loses since the last checkpoint, so the torch
  jobs are its cheapest victims most of the time; the 16-GPU gang is chosen
  when its own checkpoint happens to be fresher (the demo shows that as it
  happens: the gang yields and resumes like the others).
- A burst of production fine-tunes (16 GPUs, exactly the production
  guarantee) arrives once research runs and every research job has reported
  a checkpoint, one fine-tune after another, each once the decider has
  answered the one before (within a second on an idle machine), so the
  decider meets them in this order on any machine. Volcano cannot place them:
  the worker decides which research jobs yield, the node agents make them
  checkpoint and suspend them.
- The fine-tunes finish after about half of ``duration_s``; the worker
  resumes the suspended research jobs, which restart from their checkpoints.
  Start-up, the burst and the resumes take the other half, about.

Time is accelerated: one wall second stands for one simulated minute
(``SPEED``), which is how the comparison with the simulator reads the same
workload. The story's phases follow what happened, not the clock: on a
slower machine every phase takes longer and the story stays the same. The
seed varies progress, run times and arrival order, not the shape of the
story.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

SPEED = 60.0
"""Simulated seconds per wall second (one wall second stands for one minute)."""

RESEARCH = "research"
PRODUCTION = "production"


class Runner(StrEnum):
    """What runs in a job's pods."""

    TORCH = "torch"  # examples/train_tiny.py: a real model, real checkpoints
    STANDIN = "stand-in"  # gpuyield.agents.demo.standin: simulated steps, a checkpoint file
    SIMULATED = "simulated"  # no process: a pod the story never signals (another tenant's)


@dataclass(frozen=True, slots=True)
class NodePlan:
    name: str
    gpus: int
    rack: str


@dataclass(frozen=True, slots=True)
class QueuePlan:
    name: str
    weight: int
    guarantee: int
    capability: int | None
    reclaimable: bool


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One Volcano Job of the story and how its pods behave."""

    namespace: str
    name: str
    queue: str
    priority: int
    pods: int
    gpus_per_pod: int
    min_available: int
    runner: Runner
    burst: bool  # arrives with the production burst (else at the start)
    steps_per_s: float
    checkpoint_every: int  # steps between periodic checkpoints
    total_steps: int
    start_step: int = 0  # progress made before the demo began (stand-ins)
    finishes: bool = False  # runs to ``total_steps`` and completes within the demo
    delay_s: float = 0.0  # after the burst (or the start), before it is submitted

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def priority_class(self) -> str:
        return f"{self.queue}-{'high' if self.priority >= 1000 else 'low'}"

    @property
    def run_s(self) -> float:
        """Wall seconds from its start to its last step, if it started from ``start_step``."""
        return (self.total_steps - self.start_step) / self.steps_per_s


@dataclass(frozen=True, slots=True)
class DemoScenario:
    seed: int
    duration_s: float
    nodes: tuple[NodePlan, ...]
    queues: tuple[QueuePlan, ...]
    jobs: tuple[JobPlan, ...]
    grace_s: float = 20.0
    """Wall seconds a yielding pod gets: real processes checkpoint in real time."""

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def job(self, key: str) -> JobPlan:
        return next(j for j in self.jobs if j.key == key)


TORCH_STEPS_PER_S = 5.0  # train_tiny.py with --step-sleep 0.2
STANDIN_STEPS_PER_S = 4.0


def demo_scenario(rng: random.Random, *, seed: int, duration_s: float) -> DemoScenario:
    """The story above, with progress and timings drawn from ``rng``."""
    nodes = tuple(NodePlan(f"gpu-{i}", 8, "rack-a" if i < 2 else "rack-b") for i in range(4))
    queues = (
        QueuePlan(PRODUCTION, weight=4, guarantee=16, capability=32, reclaimable=False),
        QueuePlan(RESEARCH, weight=1, guarantee=0, capability=32, reclaimable=True),
    )
    endless = 1_000_000  # torch research never finishes inside the demo
    far_along = 20_000  # stand-in research: most of it done, the rest outlasts the demo
    research = [
        JobPlan(
            RESEARCH,
            f"tiny-{letter}",
            RESEARCH,
            priority=100,
            pods=1,
            gpus_per_pod=4,
            min_available=1,
            runner=Runner.TORCH,
            burst=False,
            steps_per_s=TORCH_STEPS_PER_S,
            checkpoint_every=25,
            total_steps=endless,
        )
        for letter in "abc"
    ]
    research.append(
        JobPlan(
            RESEARCH,
            "llm-sweep",
            RESEARCH,
            priority=100,
            pods=2,
            gpus_per_pod=8,
            min_available=2,
            runner=Runner.STANDIN,
            burst=False,
            steps_per_s=STANDIN_STEPS_PER_S,
            checkpoint_every=120,
            total_steps=far_along,
            start_step=int(far_along * rng.uniform(0.75, 0.9)),
        )
    )
    research.append(
        JobPlan(
            RESEARCH,
            "rl-elastic",
            RESEARCH,
            priority=100,
            pods=2,
            gpus_per_pod=2,
            min_available=1,
            runner=Runner.STANDIN,
            burst=False,
            steps_per_s=STANDIN_STEPS_PER_S,
            checkpoint_every=120,
            total_steps=far_along,
            start_step=int(far_along * rng.uniform(0.4, 0.6)),
        )
    )
    prod_run_s = max(5.0, duration_s / 2)
    production = []
    shapes = [("ft-chat", 1, 8), ("ft-code", 1, 4), ("ft-eval", 1, 4)]
    rng.shuffle(shapes)
    for order, (name, pods, gpus) in enumerate(shapes):
        run_s = prod_run_s * rng.uniform(0.85, 1.15)
        production.append(
            JobPlan(
                "prod",
                name,
                PRODUCTION,
                priority=1000,
                pods=pods,
                gpus_per_pod=gpus,
                min_available=pods,
                runner=Runner.STANDIN,
                burst=True,
                steps_per_s=STANDIN_STEPS_PER_S,
                checkpoint_every=40,
                total_steps=max(1, int(run_s * STANDIN_STEPS_PER_S)),
                finishes=True,
                delay_s=order * 0.5,
            )
        )
    return DemoScenario(seed, duration_s, nodes, queues, (*research, *production))


def describe(scenario: DemoScenario) -> list[str]:
    """The scenario in a few lines, for the terminal."""
    lines = [
        f"{len(scenario.nodes)} nodes x {scenario.nodes[0].gpus} GPUs; queues "
        + ", ".join(
            f"{q.name} (guarantee {q.guarantee}, capability {q.capability}, "
            f"{'reclaimable' if q.reclaimable else 'not reclaimable'})"
            for q in scenario.queues
        ),
    ]
    for when, burst in (("at the start", False), ("in the burst", True)):
        jobs = [j for j in scenario.jobs if j.burst is burst]
        lines.append(
            f"{when}: "
            + "; ".join(
                f"{j.key} {j.pods}x{j.gpus_per_pod} GPUs"
                + (f" min {j.min_available}" if j.min_available < j.pods else "")
                + f" ({j.runner.value})"
                for j in jobs
            )
        )
    lines.append(
        f"one wall second stands for {SPEED / 60:g} simulated minute; seed {scenario.seed}"
    )
    return lines
