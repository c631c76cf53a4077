"""A seeded watch-event stream of a large cluster, for the decider's scale benchmark (not a test).

The cluster is ``synthetic.make_cluster``'s (8-GPU nodes in racks, three
queues, about three jobs per node packed to 85-100 %), turned into the
objects an API server serves (``schemas.kube_objects``): each node, queue,
Volcano Job, PodGroup and pod once, as the watch's initial list. After that,
``Stream`` is a stand-in cluster that emits what a watch, the progress agent
and the workers' timers deliver, at ``nodes / 10`` inputs per second of
cluster time:

- a running job's progress (``JobProgress``, as the progress agent forwards it);
- a node's or a pod's status refreshed (a MODIFIED event that changes nothing
  the decider keeps, the most common watch event on a real cluster);
- a job that completes (its pods, PodGroup and Volcano Job deleted);
- a job submitted: Volcano Job and PodGroup added, then either placed (pods
  bound, PodGroup Running) or, when no node has room, left waiting (a share
  ``unschedulable_share`` of them marked unschedulable: demands the decider
  plans for); a completion lets Volcano place the oldest waiting jobs that fit;
- now and then an urgent production gang that does not fit: the decider plans
  for it, and the stand-in node agents acknowledge each yield command at its
  deadline and delete the victim's pods; the gang is placed where the decider
  nominated GPUs for it;
- a tick every ``tick_s`` of cluster time.

The stream is closed-loop (the node agents answer the decider's commands),
deterministic for a seed and, since the decider is, the same for every
implementation of ``step`` that gives the same outcomes.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from synthetic import NOW, make_cluster

from gpuyield.agents.controller.decider import Input, Outcome
from gpuyield.schemas import Snapshot
from gpuyield.schemas.kube_objects import (
    GPU,
    a_gpu_node,
    a_queue,
    a_task,
    a_volcano_job,
    event,
    pod_group_for,
    pods_for,
)
from gpuyield.schemas.messages import (
    CommandAction,
    JobProgress,
    KubeEventType,
    Tick,
    YieldAck,
    YieldOutcome,
)

Object = dict[str, Any]
URGENT_PRIORITY = 10_000


def namespace_of(queue: str) -> str:
    return queue.split("-", 1)[0]


def initial_objects(snapshot: Snapshot) -> list[Object]:
    """The cluster's objects in the order a relist delivers them (nodes, queues, then jobs)."""
    out: list[Object] = [
        a_gpu_node(
            n.name,
            gpus=n.gpus,
            rack=n.topology.rack,
            clique=n.topology.nvlink_domain,
            unschedulable=not n.schedulable,
        )
        for n in snapshot.nodes
    ]
    for q in snapshot.queues:
        out.append(
            a_queue(
                q.name,
                weight=int(q.weight),
                capability={GPU: q.capability.gpu} if q.capability.gpu is not None else None,
                guarantee={GPU: q.guarantee.gpu} if q.guarantee.gpu else None,
                reclaimable=q.reclaimable,
                parent=q.parent,
            )
        )
    for job in snapshot.jobs:
        out.extend(job_objects(job.name, job.queue, job.priority, [p.gpus for p in job.pods],
                               [p.node for p in job.pods], job.min_available,
                               job.submitted_at or NOW, unschedulable=False))  # fmt: skip
    return out


def job_objects(
    name: str,
    queue: str,
    priority: float,
    pod_gpus: list[int],
    nodes: list[str | None],
    min_available: int | None,
    created_at: float,
    *,
    unschedulable: bool,
) -> list[Object]:
    """A Volcano Job of one task, its PodGroup and its pods (placed on ``nodes``, in order)."""
    job = a_volcano_job(
        name,
        namespace=namespace_of(queue),
        queue=queue,
        tasks=[a_task(replicas=len(pod_gpus), gpus=max(pod_gpus, default=1))],
        min_available=min_available or len(pod_gpus),
        created_at=created_at,
        phase="Running" if all(nodes) else "Pending",
    )
    placed = bool(nodes) and all(nodes)
    group = pod_group_for(job, phase="Running" if placed else "Inqueue")
    if not placed and not unschedulable:
        group = pod_group_for(job, phase="Pending")
        group["status"].pop("conditions", None)
    group["metadata"]["creationTimestamp"] = job["metadata"]["creationTimestamp"]
    pods = pods_for(job, nodes=nodes) if placed else []
    for pod, gpus in zip(pods, pod_gpus, strict=False):
        pod["spec"]["priority"] = int(priority)
        pod["spec"]["containers"][0]["resources"]["limits"][GPU] = str(gpus)
    return [job, group, *pods]


@dataclass
class _Job:
    name: str
    queue: str
    priority: float
    pod_gpus: list[int]
    nodes: list[str | None]
    min_available: int | None
    created_at: float
    started_at: float
    steps: int = 0

    @property
    def key(self) -> str:
        return f"{namespace_of(self.queue)}/{self.name}"


@dataclass
class Stream:
    """The stand-in cluster: ``initial()`` then ``next()`` inputs, ``answer()`` the outcomes."""

    nodes: int
    seed: int = 1
    tick_s: float = 2.0
    urgent_every: int = 2000
    """Inputs between two urgent gangs (each one makes the decider plan)."""
    unschedulable_share: float = 0.1
    """The share of the submissions that find no room which Volcano marks unschedulable
    (demands: the decider plans for each); the others wait in the queue, Pending."""
    rate: float = 0.0
    now: float = NOW
    running: dict[str, _Job] = field(default_factory=dict)
    waiting: dict[str, _Job] = field(default_factory=dict)
    aborted: dict[str, _Job] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    schedulable: dict[str, bool] = field(default_factory=dict)
    queued: list[Input] = field(default_factory=list)
    later: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    sequence: int = 0
    submitted: int = 0
    urgent: int = 0
    count: int = 0
    next_tick: float = NOW

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.rate = self.rate or self.nodes / 10.0
        self.snapshot = make_cluster(self.nodes, self.seed, hierarchical=False)
        self.node_objects = {n.name: a_gpu_node(n.name, gpus=n.gpus, rack=n.topology.rack,
                                                clique=n.topology.nvlink_domain,
                                                unschedulable=not n.schedulable)
                             for n in self.snapshot.nodes}  # fmt: skip
        self.free = {n.name: n.gpus for n in self.snapshot.nodes}
        self.schedulable = {n.name: n.schedulable for n in self.snapshot.nodes}
        self.queues = [q.name for q in self.snapshot.queues if q.name != "shared"]
        for job in self.snapshot.jobs:
            entry = _Job(job.name, job.queue, job.priority, [p.gpus for p in job.pods],
                         [p.node for p in job.pods], job.min_available,
                         job.submitted_at or NOW, job.started_at or NOW)  # fmt: skip
            if all(entry.nodes):
                self.running[entry.key] = entry
                for pod in job.pods:
                    if pod.node is not None:
                        self.free[pod.node] -= pod.gpus
            else:
                self.waiting[entry.key] = entry
        self.next_tick = self.now + self.tick_s
        self.shapes = [(tuple(j.pod_gpus), j.queue) for j in self.running.values()]

    def initial(self) -> list[Input]:
        """The watch's initial list of every object."""
        objects = initial_objects(self.snapshot)
        return [event(o, self.now) for o in objects]

    def _objects(self, job: _Job, *, unschedulable: bool) -> list[Object]:
        return job_objects(
            job.name,
            job.queue,
            job.priority,
            job.pod_gpus,
            job.nodes,
            job.min_available,
            job.created_at,
            unschedulable=unschedulable,
        )

    def __iter__(self) -> Iterator[Input]:
        return self

    def __next__(self) -> Input:
        while not self.queued:
            self._advance()
        return self.queued.pop(0)

    def _advance(self) -> None:
        self.now += 1.0 / self.rate
        self.count += 1
        while self.later and self.later[0][0] <= self.now:
            heapq.heappop(self.later)[2]()
        if self.now >= self.next_tick:
            self.queued.append(Tick(at=self.next_tick))
            self.next_tick += self.tick_s
        if self.count % self.urgent_every == 0:
            self._urgent()
            return
        r = self.rng.random()
        if r < 0.35:
            self._progress()
        elif r < 0.50:
            self._node_refresh()
        elif r < 0.70:
            self._pod_refresh()
        elif r < 0.85:
            self._complete()
        else:
            self._submit()

    def _emit(self, obj: Object, kind: KubeEventType = KubeEventType.MODIFIED) -> None:
        self.queued.append(event(obj, self.now, kind))

    def _random_running(self) -> _Job | None:
        if not self.running:
            return None
        keys = list(self.running)  # insertion order: deterministic
        return self.running[keys[self.rng.randrange(len(keys))]]

    def beating(self) -> list[Input]:
        """A progress summary of every running job, as of now: a cluster whose every job
        has heartbeated before (the stream's own inputs then update records, not create
        them). Draws nothing from the stream's generator, so the inputs after are the same."""
        return [self._summary(job) for job in self.running.values()]

    def _progress(self) -> None:
        job = self._random_running()
        if job is None:
            return
        job.steps += self.rng.randint(50, 500)
        self.queued.append(self._summary(job))

    def _summary(self, job: _Job) -> JobProgress:
        interval = 1800.0
        last = job.started_at + interval * ((self.now - job.started_at) // interval)
        return JobProgress(
            job=job.key,
            step=job.steps,
            progress=min(1.0, (self.now - job.started_at) / 86400.0),
            step_rate=2.0,
            last_checkpoint_step=max(0, job.steps - 100),
            last_checkpoint_at=last if last > job.started_at else None,
            checkpoint_interval_s=interval,
            first_seen_at=job.started_at,
            updated_at=self.now,
        )

    def _node_refresh(self) -> None:
        names = list(self.node_objects)
        name = names[self.rng.randrange(len(names))]
        if self.rng.random() < 0.05:
            self.schedulable[name] = not self.schedulable[name]
            self.node_objects[name] = a_gpu_node(
                name, rack=self.node_objects[name]["metadata"]["labels"].get(
                    "topology.kubernetes.io/rack"), clique=name,
                unschedulable=not self.schedulable[name])  # fmt: skip
        self._emit(self.node_objects[name])

    def _pod_refresh(self) -> None:
        job = self._random_running()
        if job is None:
            return
        objects = self._objects(job, unschedulable=False)
        pods = objects[2:]
        if pods:
            self._emit(pods[self.rng.randrange(len(pods))])

    def _complete(self) -> None:
        """A job completes; Volcano then places the oldest waiting jobs that fit now."""
        job = self._random_running()
        if job is None:
            return
        self._remove(job)
        for waiting in list(self.waiting.values())[:3]:
            if waiting.priority >= URGENT_PRIORITY:
                continue  # placed on the GPUs the decider nominated for it
            nodes = self._fit(waiting.pod_gpus)
            if nodes is not None:
                self._place(waiting, nodes)

    def _remove(self, job: _Job) -> None:
        objects = self._objects(job, unschedulable=False)
        for pod in objects[2:]:
            self._emit(pod, KubeEventType.DELETED)
        self._emit(objects[1], KubeEventType.DELETED)
        self._emit(objects[0], KubeEventType.DELETED)
        for node, gpus in zip(job.nodes, job.pod_gpus, strict=True):
            if node is not None:
                self.free[node] += gpus
        self.running.pop(job.key, None)

    def _fit(self, pod_gpus: list[int]) -> list[str] | None:
        """First fit over a random sample of nodes, as a busy scheduler finds room or not."""
        free = dict(self.free)
        names = list(free)
        chosen: list[str] = []
        for gpus in pod_gpus:
            for _ in range(40):
                name = names[self.rng.randrange(len(names))]
                if self.schedulable[name] and free[name] >= gpus:
                    free[name] -= gpus
                    chosen.append(name)
                    break
            else:
                return None
        return chosen

    def _place(self, job: _Job, nodes: list[str]) -> None:
        job.nodes = list(nodes)
        job.started_at = self.now
        for node, gpus in zip(nodes, job.pod_gpus, strict=True):
            self.free[node] -= gpus
        objects = self._objects(job, unschedulable=False)
        for pod in objects[2:]:
            pod["status"]["startTime"] = objects[0]["metadata"]["creationTimestamp"]
            self._emit(pod, KubeEventType.ADDED)
        self._emit(objects[1])
        self._emit(objects[0])
        self.waiting.pop(job.key, None)
        self.running[job.key] = job

    def _submit(self, job: _Job | None = None) -> None:
        if job is None:
            self.submitted += 1
            # The shape and queue of a job that runs: submissions use what completions free.
            like = self.shapes[self.rng.randrange(len(self.shapes))]
            shape, queue = list(like[0]), like[1]
            job = _Job(f"sub-{self.submitted:06d}", queue, float(self.rng.randint(1, 300)),
                       shape, [None] * len(shape), None, self.now, self.now)  # fmt: skip
        objects = self._objects(job, unschedulable=False)
        self._emit(objects[0], KubeEventType.ADDED)
        self._emit(objects[1], KubeEventType.ADDED)
        nodes = self._fit(job.pod_gpus)
        if nodes is not None:
            self._place(job, nodes)
            return
        self.waiting[job.key] = job
        if self.rng.random() < self.unschedulable_share:
            self._emit(self._objects(job, unschedulable=True)[1])

    def _urgent(self) -> None:
        self.urgent += 1
        size = self.rng.choice([2, 4])
        queue = self.rng.choice(["production-core", "research-elastic"])
        job = _Job(f"urgent-{self.urgent:04d}", queue, URGENT_PRIORITY,
                   [8] * size, [None] * size, None, self.now, self.now)  # fmt: skip
        objects = self._objects(job, unschedulable=True)
        self._emit(objects[0], KubeEventType.ADDED)
        self._emit(objects[1], KubeEventType.ADDED)
        self.waiting[job.key] = job

    def park(self, count: int) -> None:
        """``count`` gangs aborted outside gpuyield that the cluster cannot hold as it is.

        Each wants one whole 8-GPU node more than the cluster has with 8 free
        GPUs, so it cannot resume until completions free more: the state of a
        full cluster after a preemption, in which the decider (adopting
        aborted jobs) keeps asking whether they fit again.
        """
        whole = sum(1 for n, f in self.free.items() if f >= 8 and self.schedulable[n])
        for i in range(count):
            job = _Job(f"parked-{i:03d}", "research-elastic", 50.0, [8] * (whole + 1),
                       [None] * (whole + 1), None, self.now, self.now)  # fmt: skip
            objects = self._objects(job, unschedulable=False)
            objects[0]["status"]["state"]["phase"] = "Aborted"
            self._emit(objects[0], KubeEventType.ADDED)
            self._emit(objects[1], KubeEventType.ADDED)
            self.aborted[job.key] = job

    def answer(self, outcome: Outcome) -> None:
        """What the node agents and Volcano do about ``outcome``: ack yields, place preemptors."""
        for command in outcome.commands:
            if command.action is not CommandAction.YIELD:
                self._at(self.now + 1.0, lambda job=command.job: self._resumed(job))
                continue
            ack = YieldAck(
                command_id=command.command_id,
                decision_id=command.decision_id,
                node=command.node,
                job=command.job,
                outcome=YieldOutcome.CHECKPOINTED,
                acked_at=command.deadline,
            )
            self._at(command.deadline, lambda ack=ack: self.queued.append(ack))
            self._at(command.deadline, lambda job=command.job: self._yielded(job))
        for held in outcome.reservations:
            job = self.waiting.get(held.job)
            if job is None or held.state.value != "held":
                continue
            nodes = [n for n, gpus in sorted(held.nodes.items()) for _ in range(gpus // 8)]
            if len(nodes) == len(job.pod_gpus):
                # Volcano binds the gang once its victims are gone (their deadline passed).
                at = self.now + max(c.grace_s for c in outcome.commands) + 5.0
                self._at(at, lambda job=job, nodes=nodes: self._bind(job, nodes))

    def _at(self, at: float, action: Callable[[], None]) -> None:
        self.sequence += 1
        heapq.heappush(self.later, (at, self.sequence, action))

    def _yielded(self, name: str) -> None:
        """Volcano aborts a job whose pods yielded: pods deleted, the Job Aborted, kept."""
        job = self.running.get(name)
        if job is None:
            return
        objects = self._objects(job, unschedulable=False)
        for pod in objects[2:]:
            self._emit(pod, KubeEventType.DELETED)
        for node, gpus in zip(job.nodes, job.pod_gpus, strict=True):
            if node is not None:
                self.free[node] += gpus
        job.nodes = [None] * len(job.pod_gpus)
        aborted = self._objects(job, unschedulable=False)
        aborted[0]["status"]["state"]["phase"] = "Aborted"
        self._emit(aborted[0])
        self._emit(aborted[1])
        self.running.pop(name, None)
        self.aborted[name] = job

    def _resumed(self, name: str) -> None:
        """A resume command: the Job runs again, placed when it fits, else waits marked."""
        job = self.aborted.pop(name, None)
        if job is None:
            return
        objects = self._objects(job, unschedulable=True)
        self._emit(objects[0])
        nodes = self._fit(job.pod_gpus)
        if nodes is not None:
            self._place(job, nodes)
            return
        self.waiting[job.key] = job
        self._emit(objects[1])

    def _bind(self, job: _Job, nodes: list[str]) -> None:
        if job.key in self.waiting and all(self.free[n] >= 8 for n in nodes):
            self._place(job, nodes)
