"""How big the decider's table grows over weeks: 14 simulated days through ``step``.

The events come from the simulator, instrumented (the simplest faithful
source): the default scenario's workload runs in ``agents/simulator`` under
the gpuyield policy, and after each of its events the bench compares every
job's state with what it last reported and emits what a watch on a real
cluster would deliver: a Volcano Job and its PodGroup when a job is
submitted, the PodGroup marked unschedulable when a scheduling cycle leaves
it pending, a pod added (bound) or deleted per placement and release,
Aborted on suspension, and the Job and PodGroup deleted when it completes
(``ttlSecondsAfterFinished``). Every running job reports its progress once
an hour, and a tick comes every ``--tick-s`` of simulated time.

The loop is open: the simulator's policy evicts and places, and the decider
decides on the same events alongside it; its yield commands are acknowledged
by a stand-in node agent at their deadline (the simulator's pods do not
obey them, so those yields end by the leaving limit). That is the churn a
real table sees, every kind of record included (objects, progress, yields,
demands, evictions, suspensions, alerts, the guard), which is what this
measures; the decisions themselves are measured by ``bench_simulator.py``.

At 256 nodes the workload's arrival rates and the queues' capabilities and
guarantees are scaled by 4 (the same cluster, four times larger).

    .venv/bin/python bench/bench_decider_state.py [--nodes 64 256] [--days 14]

Prints, per simulated day, the table's record count and its JSON bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, step
from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.engine import Event, Simulation
from gpuyield.agents.simulator.gpuyield_policy import GpuyieldPolicy
from gpuyield.agents.simulator.state import Phase, SimJob
from gpuyield.agents.simulator.workload import generate
from gpuyield.schemas.messages import (
    CommandAction,
    JobProgress,
    KubeEvent,
    KubeEventType,
    KubeKind,
    Tick,
    YieldAck,
    YieldOutcome,
)
from gpuyield.schemas.scenario import Scenario

EPOCH = 1_764_460_800.0  # simulated time 0, as Unix seconds
NAMESPACE = {"production-core": "prod", "research-elastic": "research", "shared": "shared"}


def scaled(scenario: Scenario, nodes: int) -> Scenario:
    factor = nodes / scenario.nodes
    queues = [
        q.model_copy(
            update={
                "guarantee": q.guarantee.model_copy(update={"gpu": int(q.guarantee.gpu * factor)}),
                "capability": q.capability.model_copy(
                    update={
                        "gpu": None if q.capability.gpu is None else int(q.capability.gpu * factor)
                    }
                ),
            }
        )
        for q in scenario.queues
    ]
    workload = [
        m.model_copy(update={"jobs_per_day": m.jobs_per_day * factor}) for m in scenario.workload
    ]
    return scenario.model_copy(update={"nodes": nodes, "queues": queues, "workload": workload})


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(EPOCH + at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Watch:
    """Turns the simulator's job states into the events a cluster watch would deliver."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.seen: dict[str, tuple[Any, ...]] = {}
        self.pods: dict[str, dict[int, int]] = {}  # job -> pod index -> node, as reported
        self.flagged: set[str] = set()

    def _ns(self, job: SimJob) -> str:
        return NAMESPACE.get(job.spec.queue, "default")

    def _meta(self, job: SimJob, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self._ns(job),
            "creationTimestamp": rfc3339(job.spec.submit_s),
        }

    def vjob(self, job: SimJob, phase: str) -> dict[str, Any]:
        spec = job.spec
        return {
            "kind": "Job",
            "metadata": self._meta(job, spec.name),
            "spec": {
                "queue": spec.queue,
                "minAvailable": spec.min_available,
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": spec.pods,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "t",
                                        "resources": {
                                            "limits": {"nvidia.com/gpu": str(spec.gpus_per_pod)}
                                        },
                                    }
                                ]
                            }
                        },
                    }
                ],
            },
            "status": {"state": {"phase": phase}},
        }

    def group(self, job: SimJob, phase: str, unschedulable: bool) -> dict[str, Any]:
        meta = self._meta(job, f"{job.spec.name}-pg")
        meta["ownerReferences"] = [{"kind": "Job", "name": job.spec.name}]
        conditions = [{"type": "Unschedulable", "status": "True"}] if unschedulable else []
        return {
            "kind": "PodGroup",
            "metadata": meta,
            "spec": {"minMember": job.spec.min_available, "queue": job.spec.queue},
            "status": {"phase": phase, "conditions": conditions},
        }

    def pod(self, job: SimJob, index: int, node: int) -> dict[str, Any]:
        spec = job.spec
        return {
            "kind": "Pod",
            "metadata": {
                "name": f"{spec.name}-worker-{index}",
                "namespace": self._ns(job),
                "labels": {"volcano.sh/job-name": spec.name},
            },
            "spec": {
                "nodeName": f"node-{node:03d}",
                "priority": spec.priority,
                "containers": [
                    {
                        "name": "t",
                        "resources": {"limits": {"nvidia.com/gpu": str(spec.gpus_per_pod)}},
                    }
                ],
            },
            "status": {"phase": "Running", "startTime": rfc3339(self.sim.now)},
        }

    def event(
        self, kind: KubeKind, obj: dict[str, Any], type_: KubeEventType = KubeEventType.ADDED
    ) -> KubeEvent:
        meta = obj["metadata"]
        return KubeEvent(
            type=type_, kind=kind, namespace=meta.get("namespace"), name=meta["name"],
            resource_version="1", object=obj, observed_at=EPOCH + self.sim.now,
        )  # fmt: skip

    def changes(self, after_cycle: bool) -> list[Input]:
        out: list[Input] = []
        for job in self.sim.order:
            name = job.spec.name
            # A yielding pod holds its GPUs until it is released: the watch shows it until then.
            placed = {p.index: p.node for p in job.pods if p.node is not None}
            state = (job.phase, tuple(sorted(placed.items())))
            old = self.seen.get(name)
            if old == state and not (
                after_cycle and job.phase is Phase.PENDING and name not in self.flagged
            ):
                continue
            if old is None and job.phase in (Phase.DONE, Phase.FAILED):
                continue
            if old is None:
                out.append(self.event(KubeKind.JOB, self.vjob(job, "Pending")))
                out.append(self.event(KubeKind.POD_GROUP, self.group(job, "Pending", False)))
            reported = self.pods.setdefault(name, {})
            for index, node in list(reported.items()):
                if placed.get(index) != node:
                    out.append(
                        self.event(KubeKind.POD, self.pod(job, index, node), KubeEventType.DELETED)
                    )
                    del reported[index]
            for index, node in placed.items():
                if index not in reported:
                    out.append(self.event(KubeKind.POD, self.pod(job, index, node)))
                    reported[index] = node
            if job.phase in (Phase.DONE, Phase.FAILED):
                out.append(
                    self.event(
                        KubeKind.POD_GROUP,
                        self.group(job, "Completed", False),
                        KubeEventType.DELETED,
                    )
                )
                out.append(
                    self.event(KubeKind.JOB, self.vjob(job, "Completed"), KubeEventType.DELETED)
                )
                self.seen.pop(name, None)
                self.pods.pop(name, None)
                self.flagged.discard(name)
                continue
            if (
                job.phase is Phase.RUNNING
                and not job.yielding
                and len(placed) >= job.spec.min_available
            ):
                out.append(
                    self.event(
                        KubeKind.POD_GROUP,
                        self.group(job, "Running", False),
                        KubeEventType.MODIFIED,
                    )
                )
                self.flagged.discard(name)
            elif job.phase is Phase.SUSPENDED and (old is None or old[0] is not Phase.SUSPENDED):
                out.append(
                    self.event(KubeKind.JOB, self.vjob(job, "Aborted"), KubeEventType.MODIFIED)
                )
                out.append(
                    self.event(
                        KubeKind.POD_GROUP,
                        self.group(job, "Pending", False),
                        KubeEventType.MODIFIED,
                    )
                )
            elif job.phase is Phase.PENDING and after_cycle and name not in self.flagged:
                out.append(
                    self.event(
                        KubeKind.POD_GROUP, self.group(job, "Inqueue", True), KubeEventType.MODIFIED
                    )
                )
                self.flagged.add(name)
            self.seen[name] = state
        return out


def run(nodes: int, days: int, tick_s: float) -> list[dict[str, Any]]:
    scenario = scaled(default_scenario(), nodes).model_copy(update={"days": days})
    jobs = generate(scenario, random.Random(scenario.seed))
    sim = Simulation(scenario, jobs, GpuyieldPolicy())
    watch = Watch(sim)
    config = ControllerConfig(policy=scenario.policy)
    records: dict[str, Any] = {}
    offset = [0]
    pending_acks: list[tuple[float, YieldAck]] = []
    steps = [0]
    step_s = [0.0]

    def feed(message: Input) -> None:
        offset[0] += 1
        started = time.perf_counter()
        outcome = step(records, message, f"bench/0/{offset[0]}", config)
        step_s[0] += time.perf_counter() - started
        steps[0] += 1
        for key, value in outcome.writes.items():
            if value is None:
                records.pop(key, None)
            else:
                records[key] = value
        for command in outcome.commands:
            if command.action is CommandAction.YIELD:
                ack = YieldAck(
                    command_id=command.command_id, decision_id=command.decision_id,
                    node=command.node, job=command.job, outcome=YieldOutcome.CHECKPOINTED,
                    acked_at=command.deadline,
                )  # fmt: skip
                pending_acks.append((command.deadline, ack))

    for i in range(nodes):
        node = {
            "kind": "Node",
            "metadata": {"name": f"node-{i:03d}"},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        feed(KubeEvent(type=KubeEventType.ADDED, kind=KubeKind.NODE, name=node["metadata"]["name"],
                       resource_version="1", object=node, observed_at=EPOCH + sim.now))  # fmt: skip
    for q in scenario.queues:
        spec: dict[str, Any] = {"weight": q.weight, "reclaimable": q.reclaimable}
        if q.capability.gpu is not None:
            spec["capability"] = {"nvidia.com/gpu": str(q.capability.gpu)}
        spec["guarantee"] = {"resource": {"nvidia.com/gpu": str(q.guarantee.gpu)}}
        obj = {"kind": "Queue", "metadata": {"name": q.name}, "spec": spec}
        feed(KubeEvent(type=KubeEventType.ADDED, kind=KubeKind.QUEUE, name=q.name,
                       resource_version="1", object=obj, observed_at=EPOCH + sim.now))  # fmt: skip

    next_tick = [sim.now]
    samples: list[dict[str, Any]] = []
    next_day = [0.0]
    original = sim._handle

    def handle(kind: Event, payload: object) -> None:
        fingerprint = (tuple(sim.cluster.free), len(sim._active))
        original(kind, payload)
        t = EPOCH + sim.now
        while pending_acks and pending_acks[0][0] <= t:
            feed(pending_acks.pop(0)[1])
        while next_tick[0] + tick_s <= sim.now:
            next_tick[0] += tick_s
            feed(Tick(at=EPOCH + next_tick[0]))
        changed = fingerprint != (tuple(sim.cluster.free), len(sim._active))
        if changed or kind is Event.CYCLE:
            for message in watch.changes(after_cycle=kind is Event.CYCLE):
                feed(message)
        if kind is Event.SAMPLE:
            for job in sim.active():
                if job.phase is Phase.RUNNING and job.started_at is not None:
                    feed(JobProgress(
                        job=f"{watch._ns(job)}/{job.spec.name}", step=int(job.work),
                        progress=min(1.0, job.work / job.spec.duration_s),
                        first_seen_at=EPOCH + job.started_at, updated_at=t,
                    ))  # fmt: skip
            if sim.now >= next_day[0]:
                next_day[0] += 86400.0
                kinds = Counter(k.split("/", 1)[0] for k in records)
                samples.append({
                    "day": sim.now / 86400.0, "records": len(records),
                    "bytes": len(json.dumps(records, separators=(",", ":"))),
                    "kinds": dict(sorted(kinds.items())), "steps": steps[0],
                    "step_ms": 1000 * step_s[0] / max(1, steps[0]),
                })  # fmt: skip
                print(f"  {nodes} nodes, day {samples[-1]['day']:.0f}: {samples[-1]}", flush=True)

    sim._handle = handle  # type: ignore[method-assign]
    sim.run()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--tick-s", type=float, default=300.0)
    args = parser.parse_args()
    results = {n: run(n, args.days, args.tick_s) for n in args.nodes}
    cpu = platform.processor() or platform.machine()
    print(f"\nmachine: {cpu}, {os.cpu_count()} cores; tick every {args.tick_s:.0f} s\n")
    print("| nodes | day | records | KiB | yields | alerts | progress | evictions |")
    print("|---|---|---|---|---|---|---|---|")
    for n, samples in results.items():
        for s in samples:
            k = s["kinds"]
            print(
                f"| {n} | {s['day']:.0f} | {s['records']} | {s['bytes'] / 1024:.0f} | "
                f"{k.get('yield', 0)} | {k.get('alert', 0)} | {k.get('progress', 0)} | "
                f"{k.get('evictions', 0)} |"
            )


if __name__ == "__main__":
    main()
