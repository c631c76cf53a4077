"""A resume holds the GPUs it was planned on: two suspended jobs, room for one, one resume.

Found by the demo: once a resume was issued, the job counted as merely
pending, which holds no GPUs in the planner's snapshot, so the next message's
step resumed the next suspended job into the very same GPUs (four resumes for
one freed node), and the extra jobs waited unschedulable, in the shortage
they had yielded to. The decider now nominates a resumed job's GPUs, as it
does a preemptor's, until Volcano places it.
"""

from __future__ import annotations

from typing import Any

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, step
from gpuyield.agents.demo import objects
from gpuyield.schemas.messages import (
    CommandAction,
    KubeEventType,
    Tick,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)

T0 = 1_764_460_800.0


class Decider:
    def __init__(self) -> None:
        self.records: dict[str, Any] = {}
        self.commands: list[YieldCommand] = []
        self.offset = 0
        self.config = ControllerConfig()

    def feed(self, message: Input) -> None:
        self.offset += 1
        out = step(self.records, message, f"in/0/{self.offset}", self.config)
        for key, value in out.writes.items():
            if value is None:
                self.records.pop(key, None)
            else:
                self.records[key] = value
        self.commands += out.commands

    def obj(
        self, obj: dict[str, Any], at: float, kind: KubeEventType = KubeEventType.ADDED
    ) -> None:
        self.feed(objects.event(obj, at, kind, self.offset))


def job_objects(
    namespace: str, name: str, *, queue: str, priority: int, pods: int, nodes: list[str | None],
    phase: str, group_phase: str, at: float, unschedulable: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    klass = f"{queue}-class"
    return [
        objects.volcano_job(
            namespace, name, uid=f"u-{name}", queue=queue, priority_class=klass, replicas=pods,
            gpus_per_pod=8, min_available=pods, created_at=at, phase=phase,
        ),
        *[
            objects.pod(
                namespace, name, i, uid=f"u-{name}-{i}", job_uid=f"u-{name}", queue=queue,
                priority_class=klass, priority=priority, gpus=8, node=nodes[i],
                phase="Running" if nodes[i] else "Pending", started_at=at if nodes[i] else None,
            )
            for i in range(len(nodes))
        ],
        objects.pod_group(
            namespace, name, job_uid=f"u-{name}", queue=queue, priority_class=klass,
            min_member=pods, created_at=at, phase=group_phase, unschedulable=unschedulable,
        ),
    ]  # fmt: skip


def test_two_suspended_jobs_and_room_for_one_get_one_resume() -> None:
    d = Decider()
    at = T0 - 3600
    for name in ("gpu-0", "gpu-1"):
        d.obj(objects.node(name, 8, rack="r"), at)
    d.obj(objects.queue("production", weight=4, guarantee=16, capability=16, reclaimable=False), at)
    d.obj(objects.queue("research", weight=1, guarantee=0, capability=16, reclaimable=True), at)
    for name, node in (("a", "gpu-0"), ("b", "gpu-1")):
        for obj in job_objects(
            "research", name, queue="research", priority=100, pods=1, nodes=[node],
            phase="Running", group_phase="Running", at=at,
        ):  # fmt: skip
            d.obj(obj, at)
    d.feed(Tick(at=T0))  # the workers' ticks carry the hour; a watch event cannot
    # A two-node production job cannot be placed: both research jobs yield.
    for obj in job_objects(
        "prod", "ft", queue="production", priority=1000, pods=2, nodes=[None, None],
        phase="Pending", group_phase="Inqueue", at=T0, unschedulable=True,
    ):  # fmt: skip
        d.obj(obj, T0)
    yields = [c for c in d.commands if c.action is CommandAction.YIELD]
    assert sorted(c.job for c in yields) == ["research/a", "research/b"]
    for command in yields:
        d.feed(
            YieldAck(
                command_id=command.command_id,
                decision_id=command.decision_id,
                node=command.node,
                job=command.job,
                outcome=YieldOutcome.CHECKPOINTED,
                checkpoint_step=100,
                acked_at=T0 + 10,
            )
        )
    for name, node in (("a", "gpu-0"), ("b", "gpu-1")):
        pod, group, vjob = (
            job_objects(
                "research", name, queue="research", priority=100, pods=1, nodes=[node],
                phase="Aborted", group_phase="Pending", at=at,
            )[i]
            for i in (1, 2, 0)
        )  # fmt: skip
        d.obj(pod, T0 + 11, KubeEventType.DELETED)
        d.obj(group, T0 + 11, KubeEventType.MODIFIED)
        d.obj(vjob, T0 + 11, KubeEventType.MODIFIED)
    for obj in job_objects(
        "prod", "ft", queue="production", priority=1000, pods=2, nodes=["gpu-0", "gpu-1"],
        phase="Running", group_phase="Running", at=T0 + 12,
    ):  # fmt: skip
        d.obj(obj, T0 + 12, KubeEventType.MODIFIED)
    # Half of production leaves, long after the resume backoff: room for one research job.
    gone = job_objects(
        "prod", "ft", queue="production", priority=1000, pods=2, nodes=["gpu-0", "gpu-1"],
        phase="Running", group_phase="Running", at=T0 + 12,
    )[1]  # fmt: skip
    d.feed(Tick(at=T0 + 3600))  # the workers' ticks carry the hour; a watch event cannot
    d.obj(gone, T0 + 3600, KubeEventType.DELETED)
    for second in range(1, 6):  # more steps: none may resume the other job into the same GPUs
        d.feed(Tick(at=T0 + 3600 + second))
    resumes = [c for c in d.commands if c.action is CommandAction.RESUME]
    assert len(resumes) == 1, [c.job for c in resumes]
    assert any(k.startswith("reservation/") for k in d.records)
