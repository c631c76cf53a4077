"""Gang deadlocks on the live path: two 20-GPU gangs on 30 GPUs, each holding 15.

Six 5-GPU nodes; each Volcano Job runs four 5-GPU pods with minAvailable 4,
and each got three placed before the cluster filled up: 30 GPUs held, none
usable, and Volcano marks both PodGroups unschedulable (phase Unknown: part of
the minimum runs).
"""

from __future__ import annotations

from cluster_objects import node, pod, pod_group, queue, rfc3339
from harness import NOW, Controller

from gpuyield.schemas.messages import AlertKind, CommandAction, JobProgress

GANGS = ("llm-a", "llm-b")


def deadlocked(
    nodes: int = 6,
    checkpointed: str | None = None,
    *,
    marked: bool = True,
    preemptable: bool = True,
) -> Controller:
    """The deadlock; ``checkpointed`` names a gang that saved a checkpoint an hour ago.

    ``marked``: Volcano marked the PodGroups and the waiting pods unschedulable.
    ``preemptable``: False annotates both gangs ``volcano.sh/preemptable: "false"``.
    """
    c = Controller()
    at = NOW - 600
    for i in range(nodes):
        c.add(node(f"gpu-{i:02d}", gpus=5), at)
    c.add(queue("training", weight=1), at)
    for g, name in enumerate(GANGS):
        group = pod_group(
            name,
            namespace="train",
            queue="training",
            min_member=4,
            phase="Unknown",
            unschedulable=marked,
        )
        if not preemptable:
            group["metadata"]["annotations"] = {"volcano.sh/preemptable": "false"}
        c.add(group, at)
        for k in range(3):
            c.add(pod(name, k, namespace="train", gpus=5, node=f"gpu-{3 * g + k:02d}"), at)
    if checkpointed is not None:
        c.feed(
            JobProgress(
                job=f"train/{checkpointed}",
                step=300,
                progress=0.02,
                last_checkpoint_at=NOW - 3600,
                first_seen_at=NOW - 4000,
                updated_at=NOW - 600,
            )
        )
    for name in GANGS:
        waiting = pod(name, 3, namespace="train", gpus=5)
        if not marked:
            waiting["status"]["conditions"] = []
        c.add(waiting, NOW)
    return c


def test_two_gangs_holding_15_of_20_gpus_each_get_one_decision_that_yields_one_of_them() -> None:
    c = deadlocked()
    assert len(c.decisions) == 1
    decision = c.decisions[0]
    assert decision.demand == "train/llm-a"  # equal in all else: the name keeps its GPUs
    assert [v.job for v in decision.plan.victims] == ["train/llm-b"]
    assert decision.plan.lost_gpu_seconds == 0.0  # a gang that never ran loses nothing
    yields = [cmd for cmd in c.commands if cmd.action is CommandAction.YIELD]
    assert sorted(cmd.node for cmd in yields) == ["gpu-03", "gpu-04", "gpu-05"]
    assert all(cmd.job == "train/llm-b" and cmd.whole_job for cmd in yields)


def test_the_deadlock_raises_an_alert_naming_both_gangs() -> None:
    c = deadlocked()
    alerts = [a for a in c.alerts if a.kind is AlertKind.GANG_DEADLOCK]
    assert len(alerts) == 1
    assert "train/llm-a holds 15 of 20 GPUs" in alerts[0].message
    assert "train/llm-b holds 15 of 20 GPUs" in alerts[0].message
    assert alerts[0].details["yields"] == ["train/llm-b"]


def test_the_freed_gpus_are_held_for_the_gang_that_completes() -> None:
    c = deadlocked()
    held = [r for r in c.reservations if r.job == "train/llm-a"]
    assert len(held) == 1
    assert sum(held[0].nodes.values()) == 5  # its one missing pod


def test_the_gang_whose_yield_loses_least_is_the_one_that_yields() -> None:
    # llm-b checkpointed an hour ago: its yield would lose 15 GPU-hours, llm-a's nothing.
    c = deadlocked(checkpointed="llm-b")
    assert len(c.decisions) == 1
    assert c.decisions[0].demand == "train/llm-b"
    assert [v.job for v in c.decisions[0].plan.victims] == ["train/llm-a"]


def test_no_second_decision_while_the_yielding_gangs_pods_are_leaving() -> None:
    c = deadlocked()
    c.tick(NOW + 30)
    c.tick(NOW + 60)
    assert len(c.decisions) == 1


def test_a_free_node_is_no_deadlock_volcano_completes_a_gang_there() -> None:
    c = deadlocked(nodes=7)
    assert c.decisions == []
    assert not [a for a in c.alerts if a.kind is AlertKind.GANG_DEADLOCK]


def test_gangs_volcano_has_not_marked_unschedulable_are_left_to_volcano() -> None:
    c = deadlocked(marked=False)  # as if Volcano were binding their last pods right now
    assert c.decisions == []


def test_the_yielding_gang_evicts_nobody_for_itself_while_its_pods_leave() -> None:
    c = deadlocked(nodes=7)  # the seventh node runs a low-priority notebook
    c.add(pod_group("notebook", namespace="train", queue="training", min_member=1), NOW - 600)
    notebook = pod("notebook", 0, namespace="train", gpus=5, node="gpu-06", priority=10)
    c.add({**notebook, "status": {**notebook["status"], "startTime": rfc3339(NOW - 900)}}, NOW)
    c.tick(NOW + 1)
    assert [d.demand for d in c.decisions] == ["train/llm-a"]
    assert [v.job for v in c.decisions[0].plan.victims] == ["train/llm-b"]  # loses nothing
    c.tick(NOW + 30)
    assert len(c.decisions) == 1  # llm-b, yielding, is no demand of its own


def test_a_deadlock_no_gang_may_break_raises_one_critical_alert_and_evicts_nothing() -> None:
    c = deadlocked(preemptable=False)
    for dt in (1, 31, 61):
        c.tick(NOW + dt)
    assert c.decisions == []
    alerts = [a for a in c.alerts if a.kind is AlertKind.GANG_DEADLOCK]
    assert [a.severity for a in alerts] == ["critical"]
    assert "no gang may yield" in alerts[0].message
