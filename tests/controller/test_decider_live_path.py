"""The decider on the live path's hard cases (ISSUE9 §3, §5, §6), message by message.

Each case was found by feeding the decider as a new operator would: a slow
node agent, a backlog it cannot serve, Volcano placing someone else on freed
GPUs, suspended jobs of different sizes competing for the GPUs that return.
"""

from __future__ import annotations

import itertools

from cluster_objects import node, pod, pod_group, queue, volcano_job
from harness import NOW, Controller, production_demand, shared_pool

from gpuyield.agents.policy.demands import DemandLedger
from gpuyield.schemas.messages import (
    AlertKind,
    CommandAction,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)


def ack(c: Controller, command: YieldCommand, at: float, outcome: YieldOutcome) -> None:
    c.feed(
        YieldAck(
            command_id=command.command_id,
            decision_id=command.decision_id,
            node=command.node,
            job=command.job,
            outcome=outcome,
            checkpoint_step=1200 if outcome is YieldOutcome.CHECKPOINTED else None,
            acked_at=at,
        )
    )


def still_unschedulable(c: Controller, name: str, at: float, pods: int = 1) -> None:
    """Volcano reports the same shortage again (its PodGroup condition is refreshed)."""
    c.change(
        pod_group(
            name,
            namespace="prod",
            queue="production",
            min_member=pods,
            phase="Inqueue",
            unschedulable=True,
        ),
        at,
    )


def gang_demand(c: Controller, name: str, pods: int, at: float) -> None:
    """A production gang of ``pods`` x 8 GPUs, announced whole: its Volcano Job first (so
    the decider knows every pod it will have), then its unschedulable PodGroup."""
    c.add(
        volcano_job(name, namespace="prod", queue="production", replicas=pods, phase="Pending"), at
    )
    still_unschedulable(c, name, at, pods)
    for k in range(pods):
        c.add(pod(name, k, namespace="prod", priority=1000), at)


def resumes(c: Controller) -> list[YieldCommand]:
    return [cmd for cmd in c.commands if cmd.action is CommandAction.RESUME]


# -- §5: the demand ledger's backoff survives the table ------------------------------


def test_a_demand_no_plan_can_serve_is_retried_less_and_less_often_as_in_the_simulator() -> None:
    c = shared_pool()
    gang_demand(c, "ft-huge", 5, NOW)  # 40 GPUs on a 32-GPU pool: never placeable
    rounds = [c.records["demand/prod/ft-huge"]["last_round"]]
    for seconds in range(10, 4000, 10):
        c.tick(NOW + seconds)
        last = c.records["demand/prod/ft-huge"]["last_round"]
        if last != rounds[-1]:
            rounds.append(last)
    gaps = [b - a for a, b in itertools.pairwise(rounds)]
    # The simulator's ledger, driven the same way: each failed round doubles the wait.
    ledger, t, expected = DemandLedger(cooldown_s=30.0, backoff_max_s=1800.0), NOW, []
    ledger = ledger.tried("ft", t)
    while t < NOW + 3990:
        t += 10
        if ledger.may_plan("ft", t):
            expected.append(t - ledger.last_round["ft"])
            ledger = ledger.tried("ft", t)
    assert gaps == expected
    assert gaps[:5] == [30.0, 60.0, 120.0, 240.0, 480.0]


# -- §3: a late ack --------------------------------------------------------------------


def test_a_late_ack_is_applied_and_the_demand_evicts_no_second_job_meanwhile() -> None:
    c = shared_pool()
    production_demand(c)
    first = list(c.commands)
    assert {cmd.job for cmd in first} == {"research/sweep-0"}
    # The node agent is slow: no ack within the deadline and the slack ...
    c.tick(NOW + 151)
    assert {a.kind for a in c.alerts} == {AlertKind.YIELD_DEADLINE_MISSED}
    # ... and the shortage is reported again while sweep-0's pods still run.
    for seconds in (160, 200, 300, 450):
        still_unschedulable(c, "ft-llama", NOW + seconds)
    assert len(c.decisions) == 1, "a second job was evicted for the same shortage"
    # The acks arrive late: the yield happened, sweep-0 is suspended.
    for cmd in first:
        ack(c, cmd, NOW + 470, YieldOutcome.CHECKPOINTED)
    assert c.records["suspended/research/sweep-0"]["checkpoint_step"] == 1200
    c.add(
        volcano_job("sweep-0", namespace="research", queue="research", replicas=2, phase="Aborted"),
        NOW + 480,
    )
    for k in range(2):
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 480)
    c.add(pod("ft-llama", 0, namespace="prod", priority=1000, node="gpu-00"), NOW + 490)
    c.change(pod_group("ft-llama", namespace="prod", queue="production"), NOW + 490)
    # The fine-tune finishes; sweep-0 resumes, on a node it will run on.
    c.delete(pod("ft-llama", 0, namespace="prod", priority=1000, node="gpu-00"), NOW + 3600)
    c.tick(NOW + 3601)
    assert [(r.job, r.node) for r in resumes(c)] == [("research/sweep-0", "gpu-00")]


# -- §3: resumes reach an agent ----------------------------------------------------------


def test_no_resume_is_issued_without_a_node_to_address_it_to() -> None:
    """A suspended job the decider knows no pods to place for (its Volcano Job unseen, its
    pods only on their way out) gets no resume. Before, the planner was asked to place a
    job the snapshot did not hold (the step failed), and a plan without a placement
    addressed its resume to a node named "cluster", which no agent consumes."""
    c = shared_pool()
    production_demand(c)
    for cmd in list(c.commands):
        ack(c, cmd, NOW + 40, YieldOutcome.CHECKPOINTED)
    c.delete(pod_group("ft-llama", namespace="prod", queue="production"), NOW + 50)
    c.delete(pod("ft-llama", 0, namespace="prod", priority=1000), NOW + 50)
    for seconds in (400, 700, 1000):
        c.tick(NOW + seconds)
    assert all(r.node.startswith("gpu-") for r in resumes(c))
    assert resumes(c) == []


# -- §6: resumes never starve a gang ---------------------------------------------------


def suspended_trio() -> Controller:
    """4 x 8 GPUs; research ran a 16-GPU gang and two 8-GPU jobs; a 32-GPU production
    fine-tune took every node, and all three research jobs are suspended."""
    c = Controller()
    at = NOW - 60
    for i in range(4):
        c.add(node(f"gpu-{i:02d}"), at)
    c.add(queue("production", weight=4, capability=32, guarantee=32, reclaimable=False), at)
    c.add(queue("research", weight=1, capability=32), at)
    research = {
        "big": (2, ["gpu-00", "gpu-01"]),
        "small-a": (1, ["gpu-02"]),
        "small-b": (1, ["gpu-03"]),
    }
    for name, (pods, nodes) in research.items():
        c.add(pod_group(name, namespace="research", queue="research", min_member=pods), at)
        for k, on in enumerate(nodes):
            c.add(pod(name, k, namespace="research", node=on), at)
    gang_demand(c, "ft-wide", 4, NOW)
    assert {cmd.job for cmd in c.commands} == {f"research/{n}" for n in research}
    for cmd in list(c.commands):
        ack(c, cmd, NOW + 40, YieldOutcome.CHECKPOINTED)
    for name, (pods, nodes) in research.items():
        c.add(
            volcano_job(
                name, namespace="research", queue="research", replicas=pods, phase="Aborted"
            ),
            NOW + 45,
        )
        c.change(
            pod_group(
                name, namespace="research", queue="research", min_member=pods, phase="Pending"
            ),
            NOW + 45,
        )
        for k, on in enumerate(nodes):
            c.delete(pod(name, k, namespace="research", node=on), NOW + 45)
    for k in range(4):
        c.add(pod("ft-wide", k, namespace="prod", priority=1000, node=f"gpu-0{k}"), NOW + 50)
    c.change(pod_group("ft-wide", namespace="prod", queue="production", min_member=4), NOW + 50)
    return c


def test_a_heavier_suspended_gang_keeps_the_gpus_it_needs_from_smaller_resumes() -> None:
    c = suspended_trio()
    later = NOW + 3600  # past every backoff
    # The fine-tune's pods finish one node at a time.
    c.delete(pod("ft-wide", 3, namespace="prod", priority=1000, node="gpu-03"), later)
    c.tick(later + 1)
    assert resumes(c) == [], "a small job took the node the 16-GPU gang waits for"
    c.delete(pod("ft-wide", 2, namespace="prod", priority=1000, node="gpu-02"), later + 60)
    c.tick(later + 61)
    assert [r.job for r in resumes(c)] == ["research/big"]
    c.tick(later + 62)
    assert [r.job for r in resumes(c)] == ["research/big"]  # nothing left for the others yet


def test_a_suspended_job_that_cannot_use_gpus_free_for_long_raises_resume_starved_once() -> None:
    c = suspended_trio()
    later = NOW + 3600
    # The fine-tune leaves, but Volcano fills every node half with other work: 16 GPUs
    # are free, none as a whole node.
    for k in range(4):
        c.delete(pod("ft-wide", k, namespace="prod", priority=1000, node=f"gpu-0{k}"), later)
        c.add(pod_group(f"fill-{k}", namespace="shared", queue="research"), later)
        c.add(pod(f"fill-{k}", 0, namespace="shared", gpus=4, node=f"gpu-0{k}"), later)
    config = c.config
    for seconds in range(0, int(config.resume_starved_s) + 120, 60):
        c.tick(later + 1 + seconds)
    starved = [a for a in c.alerts if a.kind is AlertKind.RESUME_STARVED]
    assert {a.job for a in starved} == {"research/big", "research/small-a", "research/small-b"}
    assert len(starved) == 3
    big = next(a for a in starved if a.job == "research/big")
    assert big.details["needs_gpus"] == 16
    assert big.details["free_gpus"] == 16


# -- §6: 32 GPUs yielded for 16 --------------------------------------------------------


def test_a_preemptor_whose_freed_node_went_to_another_job_waits_for_its_hold() -> None:
    """The demo's case: the 16 GPUs freed for ft-a; Volcano put an equal-priority ft-b on
    one of its nodes. ft-a waits for its held GPUs; it does not evict a second gang."""
    c = shared_pool()
    c.change(queue("production", weight=4, capability=32, guarantee=32, reclaimable=False), NOW)
    gang_demand(c, "ft-a", 2, NOW)
    first = list(c.commands)
    assert {cmd.job for cmd in first} == {"research/sweep-0"}
    for cmd in first:
        ack(c, cmd, NOW + 40, YieldOutcome.CHECKPOINTED)
    for k in range(2):
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 45)
    c.add(pod_group("ft-b", namespace="prod", queue="production"), NOW + 46)
    c.add(pod("ft-b", 0, namespace="prod", priority=1000, node="gpu-00"), NOW + 46)
    for seconds in (60, 120, 300, 590):
        still_unschedulable(c, "ft-a", NOW + seconds, pods=2)
    assert len(c.decisions) == 1
    assert {cmd.job for cmd in c.commands} == {"research/sweep-0"}
