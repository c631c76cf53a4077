"""Seed 001's pre-peak drill: an online burst takes 64 GPUs back from offline research.

The platform's drill, as the seed states it: an online inference burst needs
64 GPUs back, as whole 8-GPU nodes, from offline research that borrowed
them. Queue ``online``: weight 100, guarantee 128, capability 192; queue
``offline``: weight 10, guarantee 0 (everything it runs is borrowed),
capability 128. The drill passes when reclaim and evictions complete within
15 s, the online pods are all placed and ready within 30 s, and the evicted
offline jobs are Suspended and resume from their checkpoints once the peak
is over (``drill_timeline`` judges these from the run's messages).

The cluster (``drill_scenario``), ``nodes`` x 8 GPUs, full when the burst comes:

- ``online/serving``: the online fleet before the peak, 8 pods of 8 GPUs
  (64 GPUs, half the online guarantee: the burst brings the queue to its
  guarantee exactly, which is what lets it reclaim);
- ``offline/train-NN``: 16 single-node research jobs, 8 GPUs each, the
  offline capability of 128; even ones run the real torch example
  (``examples/train_tiny.py``, a checkpoint every 5 s), odd ones the
  stand-in trainer (every 10 s);
- ``shared/tenant-NN``: the other tenants on the remaining ``nodes - 24``
  nodes, at their guarantee and not reclaimable (a 64- or 128-node cluster
  is not all online and offline: the two queues' capabilities add up to
  40 nodes);
- the burst, ``online/burst``: 8 pods of 8 GPUs, a gang (all 8 or none):
  Volcano cannot place it, gpuyield must free 8 whole nodes. Its pods run
  stand-ins that finish after ``peak_s``: the peak is over, and the
  suspended jobs resume.

What runs as a process: every pod a yield can reach (the 16 offline pods)
and the burst's 8 pods; the serving fleet and the other tenants are pods
without a process (``Runner.SIMULATED``): no yield ever reaches them, and
at 128 nodes they would be 112 interpreters on a small machine. So the
number of processes does not grow with ``nodes``; what grows is the number
of node agents (one per node, each with its Kafka clients), watch events and
the planner's cluster.
"""

from __future__ import annotations

from gpuyield.agents.demo.scenario import (
    STANDIN_STEPS_PER_S,
    TORCH_STEPS_PER_S,
    DemoScenario,
    JobPlan,
    NodePlan,
    QueuePlan,
    Runner,
)
from gpuyield.agents.demo.timing import DEMO_NODE_AGENT
from gpuyield.schemas.config import NodeAgentKnobs

ONLINE = "online"
OFFLINE = "offline"
SHARED = "shared"
GPUS_PER_NODE = 8
BURST_PODS = 8
"""The burst: 64 GPUs as 8 pods that each need a whole 8-GPU node."""
SERVING_PODS = 8
OFFLINE_JOBS = 16
"""The offline capability (128 GPUs) in single-node jobs."""
MIN_NODES = SERVING_PODS + OFFLINE_JOBS
"""The smallest cluster the burst must reclaim on: serving and offline fill it."""
DEFAULT_NODES = MIN_NODES
NODES_PER_RACK = 8
TENANT_PODS_PER_JOB = 8

RECLAIM_BUDGET_S = 15.0
"""From the burst's watch event to the last eviction done (acked, pods deleted)."""
READY_BUDGET_S = 30.0
"""From the burst's watch event to its last pod ready (its first heartbeat)."""
GRACE_S = 8.0
"""The checkpoint grace of the drill's yields. A trainer saves at its next step boundary
(0.2-0.25 s here) and the node agent hard-kills at the deadline, so an eviction ends within
the grace whatever the trainer does; 8 s leaves the rest of the 15 s budget (7 s) for the
watch event to reach the decider, the plan, the commands, the acks and the deletions, which
take about 2 s on an idle machine."""
EXIT_GRACE_S = 2.0
"""From a victim's checkpoint, seen by its node agent, to the kill if it has not exited (the
node agent's ``node_exit_grace_s``; 15 s in the demo). The checkpoint is saved: a kill loses
nothing, and waiting for a torch trainer's own teardown (its heartbeat sink closing, its
result written, the interpreter and torch exiting: over 7 s with both cores busy) spent the
whole grace on every torch victim: the reclaim took the decision's latency plus the grace on a
busy machine (8.5-8.9 s, medians, against 5.2-6.0 s with 2 s; README)."""
PEAK_S = 20.0
"""How long the burst's pods serve before the peak is over."""
TORCH_CHECKPOINT_S = 5.0
STANDIN_CHECKPOINT_S = 10.0
"""The stand-ins checkpoint half as often as the torch trainers: the planner's first criterion
is the work a yield loses since the last checkpoint, so most of its victims are torch trainers
(4 to 8 of the 8 in the bench's runs) and the drill's evictions go through real torch processes,
which take seconds to tear down on a busy machine. With one cadence for both, the first runs'
victims were all stand-ins, which exit in a tenth of a second."""

ENDLESS = 1_000_000  # offline research outlives the drill


def drill_scenario(
    nodes: int = DEFAULT_NODES, *, seed: int = 1, peak_s: float = PEAK_S, grace_s: float = GRACE_S
) -> DemoScenario:
    """The drill's cluster and jobs (see the module docstring)."""
    if nodes < MIN_NODES:
        raise ValueError(
            f"the drill needs at least {MIN_NODES} nodes ({SERVING_PODS} of online serving and "
            f"{OFFLINE_JOBS} of borrowed offline capacity), got {nodes}"
        )
    if peak_s <= 0:
        raise ValueError(f"the peak must last a positive time, got {peak_s} s")
    if grace_s <= 0:
        raise ValueError(f"the grace must be a positive time, got {grace_s} s")
    node_plans = tuple(
        NodePlan(f"gpu-{i:03d}", GPUS_PER_NODE, f"rack-{i // NODES_PER_RACK:02d}")
        for i in range(nodes)
    )
    tenants = nodes - MIN_NODES
    queues = [
        QueuePlan(ONLINE, weight=100, guarantee=128, capability=192, reclaimable=False),
        QueuePlan(OFFLINE, weight=10, guarantee=0, capability=128, reclaimable=True),
    ]
    if tenants:
        gpus = tenants * GPUS_PER_NODE
        queues.append(
            QueuePlan(SHARED, weight=10, guarantee=gpus, capability=gpus, reclaimable=False)
        )
    jobs = [_whole_nodes(ONLINE, "serving", SERVING_PODS, Runner.SIMULATED, priority=1000)]
    for first in range(0, tenants, TENANT_PODS_PER_JOB):
        pods = min(TENANT_PODS_PER_JOB, tenants - first)
        name = f"tenant-{first // TENANT_PODS_PER_JOB:02d}"
        jobs.append(_whole_nodes(SHARED, name, pods, Runner.SIMULATED, priority=500))
    for i in range(OFFLINE_JOBS):
        torch = i % 2 == 0
        rate = TORCH_STEPS_PER_S if torch else STANDIN_STEPS_PER_S
        jobs.append(
            JobPlan(
                OFFLINE,
                f"train-{i:02d}",
                OFFLINE,
                priority=100,
                pods=1,
                gpus_per_pod=GPUS_PER_NODE,
                min_available=1,
                runner=Runner.TORCH if torch else Runner.STANDIN,
                burst=False,
                steps_per_s=rate,
                checkpoint_every=round(
                    (TORCH_CHECKPOINT_S if torch else STANDIN_CHECKPOINT_S) * rate
                ),
                total_steps=ENDLESS,
            )
        )
    burst_steps = max(1, round(peak_s * STANDIN_STEPS_PER_S))
    jobs.append(
        JobPlan(
            ONLINE,
            "burst",
            ONLINE,
            priority=1000,
            pods=BURST_PODS,
            gpus_per_pod=GPUS_PER_NODE,
            min_available=BURST_PODS,
            runner=Runner.STANDIN,
            burst=True,
            steps_per_s=STANDIN_STEPS_PER_S,
            checkpoint_every=burst_steps + 1,
            total_steps=burst_steps,
            finishes=True,
        )
    )
    return DemoScenario(
        seed, duration_s=peak_s, nodes=node_plans, queues=tuple(queues), jobs=tuple(jobs),
        grace_s=grace_s,
    )  # fmt: skip


def drill_node_agent(exit_grace_s: float = EXIT_GRACE_S) -> NodeAgentKnobs:
    """The demo's node agent waits, with the drill's exit grace."""
    if exit_grace_s < 0:
        raise ValueError(f"the exit grace must not be negative, got {exit_grace_s} s")
    return DEMO_NODE_AGENT.model_copy(update={"node_exit_grace_s": exit_grace_s})


def _whole_nodes(queue: str, name: str, pods: int, runner: Runner, *, priority: int) -> JobPlan:
    """A fleet of one-node pods that is never signalled: serving or another tenant."""
    return JobPlan(
        queue,
        name,
        queue,
        priority=priority,
        pods=pods,
        gpus_per_pod=GPUS_PER_NODE,
        min_available=1,
        runner=runner,
        burst=False,
        steps_per_s=1.0,
        checkpoint_every=ENDLESS,
        total_steps=ENDLESS,
    )


def describe_drill(scenario: DemoScenario, exit_grace_s: float = EXIT_GRACE_S) -> list[str]:
    """The drill in a few lines, for the terminal."""
    offline = [j for j in scenario.jobs if j.queue == OFFLINE]
    torch = sum(1 for j in offline if j.runner is Runner.TORCH)
    tenants = sum(j.pods for j in scenario.jobs if j.queue == SHARED)
    return [
        f"{len(scenario.nodes)} nodes x {GPUS_PER_NODE} GPUs; "
        + "; ".join(
            f"{q.name} (weight {q.weight}, guarantee {q.guarantee}, capability {q.capability})"
            for q in scenario.queues
        ),
        f"online serves on {SERVING_PODS} nodes; offline borrows {len(offline)} nodes "
        f"({torch} torch trainers checkpointing every {TORCH_CHECKPOINT_S:g} s, "
        f"{len(offline) - torch} stand-ins every {STANDIN_CHECKPOINT_S:g} s)"
        + (f"; other tenants hold {tenants} nodes" if tenants else ""),
        f"the burst: {BURST_PODS} pods x {GPUS_PER_NODE} GPUs, all or none, for "
        f"{scenario.duration_s:g} s (the peak); checkpoint grace {scenario.grace_s:g} s, "
        f"kill {exit_grace_s:g} s after a checkpoint if still running; budgets: "
        f"reclaim {RECLAIM_BUDGET_S:g} s, placed and ready {READY_BUDGET_S:g} s",
    ]
