"""The simulated Volcano, without processes or brokers: a fake launcher, events collected."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuyield.agents.controller import kube_facts
from gpuyield.agents.demo.cluster import JobPhase, PodExit, SimCluster
from gpuyield.agents.demo.placement import place
from gpuyield.agents.demo.scenario import DemoScenario, JobPlan, demo_scenario
from gpuyield.schemas.messages import KubeEvent, KubeEventType, KubeKind

T = 1_800_000_000.0


@dataclass
class FakeLauncher:
    running: dict[str, int] = field(default_factory=dict)
    signals: list[tuple[str, str]] = field(default_factory=list)
    ended: list[PodExit] = field(default_factory=list)

    async def launch(self, job: JobPlan, pod: str, rank: int) -> int:
        self.running[f"{job.namespace}/{pod}"] = rank
        return 1000 + len(self.running)

    def terminate(self, job: JobPlan, pod: str) -> None:
        self.signals.append(("TERM", f"{job.namespace}/{pod}"))

    def kill(self, job: JobPlan, pod: str) -> None:
        self.signals.append(("KILL", f"{job.namespace}/{pod}"))

    def exit(self, job: str, index: int, code: int = 0, *, completed: bool = False) -> None:
        namespace, name = job.split("/")
        del self.running[f"{namespace}/{name}-worker-{index}"]
        self.ended.append(PodExit(job, index, code, completed))

    async def exits(self) -> list[PodExit]:
        out, self.ended = self.ended, []
        return out


@dataclass
class Events:
    seen: list[KubeEvent] = field(default_factory=list)

    async def __call__(self, events: Sequence[KubeEvent]) -> None:
        self.seen.extend(events)

    def last(self, kind: KubeKind, name: str) -> KubeEvent:
        return next(e for e in reversed(self.seen) if e.kind is kind and e.name == name)


def scenario() -> DemoScenario:
    return demo_scenario(random.Random(0), seed=0, duration_s=30)


async def started(s: DemoScenario) -> tuple[SimCluster, FakeLauncher, Events]:
    launcher, events = FakeLauncher(), Events()
    cluster = SimCluster(s, launcher, events)
    for plan in s.jobs:
        if not plan.burst:
            cluster.submit(plan, T)
    await cluster.tick(T, {})
    return cluster, launcher, events


def test_binpack_places_a_gang_whole_or_not_at_all() -> None:
    assert place({"a": 8, "b": 4}, [4], min_count=1) == ["b"]  # the fullest node that fits
    assert place({"a": 8, "b": 4}, [8, 8], min_count=2) is None  # all or nothing
    assert place({"a": 8, "b": 4}, [4, 4, 4, 4], min_count=2) == ["b", "a", "a"]  # elastic
    assert place({"a": 8}, [4, 4], min_count=1, headroom=4) == ["a"]  # queue capability


async def test_research_fills_the_cluster_and_the_burst_is_left_unschedulable() -> None:
    s = scenario()
    cluster, launcher, events = await started(s)
    assert len(launcher.running) == 7  # 3 torch pods, a 2-pod gang, 2 elastic pods
    assert {e.type for e in events.seen} == {KubeEventType.ADDED}
    groups = [
        kube_facts.pod_group_record(e.object) for e in events.seen if e.kind is KubeKind.POD_GROUP
    ]
    assert {(g["job"], g["phase"], g["unschedulable"]) for g in groups} == {
        (p.name, "Running", False) for p in s.jobs if not p.burst
    }
    burst = next(p for p in s.jobs if p.burst)
    cluster.submit(burst, T + 1)
    await cluster.tick(T + 1, {})
    pod = kube_facts.pod_record(events.last(KubeKind.POD, f"{burst.name}-worker-0").object)
    assert (pod["node"], pod["unschedulable"], pod["priority"]) == (None, True, 1000)
    group = kube_facts.pod_group_record(
        next(e for e in reversed(events.seen) if e.kind is KubeKind.POD_GROUP).object
    )
    assert (group["job"], group["unschedulable"], group["phase"]) == (burst.name, True, "Inqueue")


async def test_a_yield_aborts_the_job_and_a_resume_places_it_again() -> None:
    s = scenario()
    cluster, launcher, events = await started(s)
    job = cluster.job("research/llm-sweep")
    assert job is not None
    # The node agent on one node signalled its pod; it checkpointed and exited.
    launcher.exit("research/llm-sweep", 0)
    await cluster.tick(T + 1, {})
    pod = kube_facts.pod_record(events.last(KubeKind.POD, "llm-sweep-worker-0").object)
    assert pod["phase"] == "Succeeded"
    # Its suspension (AbortJob): the other pod is stopped with SIGTERM, then deleted.
    suspended = {"research/llm-sweep": {"state": "suspended", "command_id": "c1"}}
    await cluster.tick(T + 2, suspended)
    assert launcher.signals == [("TERM", "research/llm-sweep-worker-1")]
    assert job.phase is JobPhase.ABORTING
    assert events.last(KubeKind.POD, "llm-sweep-worker-0").type is KubeEventType.DELETED
    terminating = kube_facts.pod_record(events.last(KubeKind.POD, "llm-sweep-worker-1").object)
    assert terminating["terminating"]
    launcher.exit("research/llm-sweep", 1)
    await cluster.tick(T + 3, suspended)
    assert job.phase is JobPhase.ABORTED
    assert events.last(KubeKind.POD, "llm-sweep-worker-1").type is KubeEventType.DELETED
    vjob = kube_facts.volcano_job_record(events.last(KubeKind.JOB, "llm-sweep").object)
    assert vjob["phase"] == "Aborted"
    # ResumeJob: the pods come back and are placed where the GPUs are free again.
    await cluster.tick(T + 4, {"research/llm-sweep": {"state": "resumed", "command_id": "c2"}})
    assert job.phase is JobPhase.RUNNING
    assert (job.suspensions, job.resumes) == (1, 1)
    assert "research/llm-sweep-worker-0" in launcher.running
    placed = kube_facts.pod_record(events.last(KubeKind.POD, "llm-sweep-worker-0").object)
    assert placed["node"] is not None
    assert placed["started_at"] == T + 4


async def test_a_completed_job_is_deleted_shortly_after() -> None:
    s = scenario()
    cluster, launcher, events = await started(s)
    burst = [p for p in s.jobs if p.burst]
    for plan in burst:  # room for them: the gang leaves for good
        cluster.submit(plan, T)
    launcher.exit("research/llm-sweep", 0)
    launcher.exit("research/llm-sweep", 1)
    await cluster.tick(T + 1, {"research/llm-sweep": {"state": "suspended", "command_id": "c"}})
    ft = next(p for p in burst if p.gpus == 8)
    job = cluster.job(ft.key)
    assert job is not None
    assert job.phase is JobPhase.RUNNING
    launcher.exit(ft.key, 0, completed=True)
    await cluster.tick(T + 2, {})
    assert job.phase is JobPhase.COMPLETED
    await cluster.tick(T + 4, {})
    gone: dict[Any, KubeEventType] = {
        e.kind: e.type for e in events.seen if e.namespace == "prod" and e.name.startswith(ft.name)
    }
    assert gone == {
        KubeKind.JOB: KubeEventType.DELETED,
        KubeKind.POD: KubeEventType.DELETED,
        KubeKind.POD_GROUP: KubeEventType.DELETED,
    }
