"""The simulated cluster: Volcano's behaviour, as the worker sees it through watch events.

What it does, each ``tick``:

1. reaps pod processes that ended: a pod whose trainer completed is
   ``Succeeded`` (a job whose pods all completed is ``Completed`` and deleted
   a second later, as with ``ttlSecondsAfterFinished``); a pod that ended
   otherwise (a yield, a kill) is ``Succeeded``/``Failed`` and frees its GPUs,
   and its job waits for the node agent's suspension;
2. follows the local suspender's records (``<prefix>:local-jobs`` in Redis,
   written by the node agents): ``suspended`` is Volcano's ``AbortJob`` (the
   job's remaining pods are stopped with SIGTERM, as the kubelet does on a
   deletion, and deleted once their process is gone; the job stays
   ``Aborted``), ``resumed`` is ``ResumeJob`` (the pods are created again and
   wait for the scheduler);
3. reads the decider's reservations up to the end of ``gpuyield.reservations``
   (``reservations.ReservationFeed``), after the pods that left were reaped
   and before anything is placed: a hold is published before the yields that
   free its GPUs, so every hold on GPUs about to be reused is seen, whatever
   the timing; a held node takes only its preemptors' pods, as Volcano's
   predicates plugin does with gpuyield's ``NoSchedule`` taint and the
   preemptor's toleration; the hold ends when the preemptor is placed, when
   it is released, or at its ``until``;
4. schedules: pending jobs, highest priority first, are placed all or nothing
   (``placement.place``, the one allocate model), never over their queue's
   capability nor on another preemptor's held node; a job that does not fit
   gets the PodGroup ``Unschedulable`` condition and pods with
   ``PodScheduled=False``, which is what makes it a demand for the worker.
   It never preempts: making room is gpuyield's job;
5. publishes a watch event for every object that changed, appeared or went.

Processes are started and signalled through a ``Launcher``, events leave
through ``publish``: the model itself does no I/O, so it runs the same against
real processes and in a unit test.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from gpuyield.agents.demo import objects
from gpuyield.agents.demo.placement import place
from gpuyield.agents.demo.reservations import Holds, ReservationSource
from gpuyield.agents.demo.scenario import DemoScenario, JobPlan
from gpuyield.schemas.messages import KubeEvent, KubeEventType

log = logging.getLogger(__name__)

Publish = Callable[[Sequence[KubeEvent]], Awaitable[None]]

KILL_AFTER_S = 30.0
"""A pod stopped by an abort is killed after this long (its terminationGracePeriodSeconds)."""
RESTART_AFTER_S = 20.0
"""A pod that ended without a yield's suspension is recreated after this long (Volcano's
RestartTask): the node agent suspends within seconds of a yield, so only a crash waits this long."""
FINISHED_TTL_S = 1.0
"""A completed job's objects are deleted this long after it completed."""


class JobPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    ABORTING = "Aborting"
    ABORTED = "Aborted"
    COMPLETED = "Completed"


@dataclass(frozen=True, slots=True)
class PodExit:
    """A pod process that ended: ``completed`` when the trainer ran all its steps."""

    job: str
    index: int
    code: int
    completed: bool


class Launcher(Protocol):
    async def launch(self, job: JobPlan, pod: str, rank: int) -> int:
        """Start the pod's process and register it with the node agents; its PID."""
        ...

    def terminate(self, job: JobPlan, pod: str) -> None:
        """SIGTERM the pod's process (a deletion, as the kubelet does it)."""
        ...

    def kill(self, job: JobPlan, pod: str) -> None: ...

    async def exits(self) -> list[PodExit]:
        """Processes that ended since the last call (their registration forgotten)."""
        ...


@dataclass(slots=True)
class SimPod:
    index: int
    uid: str
    node: str | None = None
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed
    started_at: float | None = None
    running: bool = False  # its process is alive
    terminating_at: float | None = None
    ended_at: float | None = None
    completed: bool = False  # its trainer ran all its steps


@dataclass(slots=True)
class SimJob:
    plan: JobPlan
    uid: str
    created_at: float
    phase: JobPhase = JobPhase.PENDING
    pods: dict[int, SimPod] = field(default_factory=dict)
    incarnation: int = 0
    tried: bool = False  # the scheduler looked at its current pods at least once
    seen_command: str | None = None  # the last suspender record acted on
    completed_at: float | None = None
    suspensions: int = 0
    resumes: int = 0
    placed_at: float | None = None  # the latest time its pods were placed

    @property
    def key(self) -> str:
        return self.plan.key

    def pod_name(self, index: int) -> str:
        return f"{self.plan.name}-worker-{index}"

    def new_pods(self) -> None:
        self.incarnation += 1
        self.tried = False
        self.pods = {
            i: SimPod(i, f"{self.uid}-{i}-{self.incarnation}") for i in range(self.plan.pods)
        }


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job as the terminal shows it."""

    job: str
    queue: str
    runner: str
    phase: str
    placed: int
    pods: int
    gpus: int
    nodes: tuple[str, ...]
    suspensions: int
    resumes: int


class SimCluster:
    """Volcano and the API server for the demo (see the module docstring)."""

    def __init__(
        self,
        scenario: DemoScenario,
        launcher: Launcher,
        publish: Publish,
        reservations: ReservationSource | None = None,
    ) -> None:
        self._scenario = scenario
        self._launcher = launcher
        self._publish = publish
        self._reservations = reservations
        self._holds = Holds()
        self._jobs: dict[str, SimJob] = {}
        self._published: dict[tuple[str, str], objects.Obj] = {}
        self._version = 0

    # -- what the demo asks ------------------------------------------------------------------

    def submit(self, plan: JobPlan, now: float) -> None:
        """A new Volcano Job; it is scheduled (and published) on the next tick."""
        job = SimJob(plan, uid=f"{plan.name}-{len(self._jobs):04x}", created_at=now)
        job.new_pods()
        self._jobs[plan.key] = job

    def job(self, key: str) -> SimJob | None:
        return self._jobs.get(key)

    def jobs(self) -> list[SimJob]:
        return list(self._jobs.values())

    def pod_gpus(self, namespace: str, name: str) -> int:
        """GPUs of a pod by name (the node agents' lost-work figure); 0 when unknown."""
        for job in self._jobs.values():
            if job.plan.namespace == namespace and name.startswith(f"{job.plan.name}-worker-"):
                return job.plan.gpus_per_pod
        return 0

    def rows(self) -> list[JobRow]:
        return [
            JobRow(
                job=j.key,
                queue=j.plan.queue,
                runner=j.plan.runner.value,
                phase=j.phase.value,
                placed=sum(1 for p in j.pods.values() if p.phase == "Running"),
                pods=j.plan.pods,
                gpus=j.plan.gpus,
                nodes=tuple(sorted({p.node for p in j.pods.values() if p.node and p.running})),
                suspensions=j.suspensions,
                resumes=j.resumes,
            )
            for j in self._jobs.values()
        ]

    # -- one round -----------------------------------------------------------------------------

    async def tick(self, now: float, suspender: Mapping[str, Mapping[str, Any]]) -> None:
        """Reap, follow the suspender, schedule, publish (see the module docstring)."""
        for ended in await self._launcher.exits():
            self._reap(ended, now)
        self._follow(suspender, now)
        self._overdue(now)
        if self._reservations is not None:
            self._holds.apply(await self._reservations.read_to_end())
        await self._schedule(now)
        await self._sync(now)

    # -- 1. processes that ended ---------------------------------------------------------------

    def _reap(self, ended: PodExit, now: float) -> None:
        job = self._jobs.get(ended.job)
        pod = job.pods.get(ended.index) if job else None
        if job is None or pod is None or not pod.running:
            return
        pod.running = False
        pod.ended_at = now
        if pod.terminating_at is not None:
            del job.pods[ended.index]  # deleted: its grace is over
            return
        if ended.completed:
            pod.phase = "Succeeded"
            pod.completed = True
            if all(p.phase == "Succeeded" for p in job.pods.values()):
                job.phase = JobPhase.COMPLETED
                job.completed_at = now
                log.info("%s completed", job.key)
            return
        pod.phase = "Succeeded" if ended.code == 0 else "Failed"
        log.info(
            "%s pod %d ended (status %d); waiting for its suspension",
            job.key,
            pod.index,
            ended.code,
        )

    # -- 2. the local suspender's records ------------------------------------------------------

    def _follow(self, records: Mapping[str, Mapping[str, Any]], now: float) -> None:
        for key, record in records.items():
            job = self._jobs.get(key)
            command = str(record.get("command_id", ""))
            if job is None or command == job.seen_command:
                continue
            state = record.get("state")
            if state == "suspended":
                job.seen_command = command
                if job.phase in (JobPhase.PENDING, JobPhase.RUNNING):
                    self._abort(job, now)
            elif state == "resumed":
                if job.phase is JobPhase.ABORTING:
                    continue  # once its pods are gone
                job.seen_command = command
                if job.phase is JobPhase.ABORTED:
                    job.phase = JobPhase.PENDING
                    job.resumes += 1
                    job.new_pods()
                    log.info("%s resumed: its pods are created again", job.key)
        for job in self._jobs.values():
            if job.phase is JobPhase.ABORTING and not job.pods:
                job.phase = JobPhase.ABORTED
                log.info("%s aborted (suspended)", job.key)

    def _abort(self, job: SimJob, now: float) -> None:
        """Volcano's AbortJob: delete the pods (SIGTERM to the running ones), keep the job."""
        job.phase = JobPhase.ABORTING
        job.suspensions += 1
        for index, pod in list(job.pods.items()):
            if pod.running:
                if pod.terminating_at is None:
                    pod.terminating_at = now
                    self._launcher.terminate(job.plan, job.pod_name(index))
            else:
                del job.pods[index]

    def _overdue(self, now: float) -> None:
        """Kill pods past their termination grace; restart pods that ended without a yield."""
        for job in self._jobs.values():
            for index, pod in list(job.pods.items()):
                if pod.running and pod.terminating_at is not None:
                    if now - pod.terminating_at > KILL_AFTER_S:
                        self._launcher.kill(job.plan, job.pod_name(index))
                    continue
                crashed = (
                    not pod.running
                    and not pod.completed
                    and pod.ended_at is not None
                    and now - pod.ended_at > RESTART_AFTER_S
                )
                if crashed and job.phase is JobPhase.RUNNING:
                    log.warning("%s pod %d ended without a yield: restarting it", job.key, index)
                    job.pods[index] = SimPod(index, f"{pod.uid}-r")
                    job.tried = False

    def held(self, now: float) -> dict[str, dict[str, int]]:
        """Node -> preemptor -> GPUs: the holds in force, as the scheduler honours them."""
        return self._holds.active(now)

    # -- 3-4. reservations and scheduling ------------------------------------------------------

    async def _schedule(self, now: float) -> None:
        waiting = [
            j
            for j in self._jobs.values()
            if j.phase in (JobPhase.PENDING, JobPhase.RUNNING)
            and any(p.node is None for p in j.pods.values())
        ]
        waiting.sort(key=lambda j: (-j.plan.priority, j.created_at, j.key))
        held = self._holds.active(now)
        for job in waiting:
            if await self._try_place(job, now, held) and self._holds.placed(job.key):
                held = self._holds.active(now)

    def _free(self) -> dict[str, int]:
        free = {n.name: n.gpus for n in self._scenario.nodes}
        for job in self._jobs.values():
            for pod in job.pods.values():
                if pod.node is not None and (pod.running or pod.phase == "Running"):
                    free[pod.node] -= job.plan.gpus_per_pod
        return free

    def _queue_headroom(self, queue: str) -> int | None:
        plan = next((q for q in self._scenario.queues if q.name == queue), None)
        if plan is None or plan.capability is None:
            return None
        used = sum(
            j.plan.gpus_per_pod
            for j in self._jobs.values()
            if j.plan.queue == queue
            for p in j.pods.values()
            if p.node is not None and (p.running or p.phase == "Running")
        )
        return max(0, plan.capability - used)

    async def _try_place(self, job: SimJob, now: float, held: dict[str, dict[str, int]]) -> bool:
        pending = [p for p in job.pods.values() if p.node is None]
        placed_before = len(job.pods) - len(pending)
        need = max(0, job.plan.min_available - placed_before)
        nodes = place(
            self._free(),
            [job.plan.gpus_per_pod] * len(pending),
            min_count=need,
            headroom=self._queue_headroom(job.plan.queue),
            job=job.key,
            held=held,
        )
        job.tried = True
        if not nodes:
            return False
        for pod, node in zip(pending, nodes, strict=False):
            pod.node = node
            pod.phase = "Running"
            pod.started_at = now
            await self._launcher.launch(job.plan, job.pod_name(pod.index), pod.index)
            pod.running = True
        job.phase = JobPhase.RUNNING
        job.placed_at = now
        log.info("%s placed on %s", job.key, ", ".join(nodes))
        return True

    # -- 5. watch events ----------------------------------------------------------------------

    def _objects(self, now: float) -> dict[tuple[str, str], objects.Obj]:
        out: dict[tuple[str, str], objects.Obj] = {}
        for n in self._scenario.nodes:
            out[("Node", n.name)] = objects.node(n.name, n.gpus, rack=n.rack)
        for q in self._scenario.queues:
            out[("Queue", q.name)] = objects.queue(
                q.name,
                weight=q.weight,
                guarantee=q.guarantee,
                capability=q.capability,
                reclaimable=q.reclaimable,
            )
        for job in self._jobs.values():
            if job.completed_at is not None and now - job.completed_at >= FINISHED_TTL_S:
                continue  # deleted after it finished
            out.update(self._job_objects(job, now))
        return out

    def _job_objects(self, job: SimJob, now: float) -> dict[tuple[str, str], objects.Obj]:
        plan = job.plan
        running = sum(1 for p in job.pods.values() if p.phase == "Running")
        out: dict[tuple[str, str], objects.Obj] = {}
        out[("Job", job.key)] = objects.volcano_job(
            plan.namespace,
            plan.name,
            uid=job.uid,
            queue=plan.queue,
            priority_class=plan.priority_class,
            replicas=plan.pods,
            gpus_per_pod=plan.gpus_per_pod,
            min_available=plan.min_available,
            created_at=job.created_at,
            phase=job.phase.value,
            running=running,
        )
        for index, pod in sorted(job.pods.items()):
            if pod.node is None and not job.tried:
                continue  # created and scheduled within one tick: published once placed or not
            out[("Pod", f"{plan.namespace}/{job.pod_name(index)}")] = objects.pod(
                plan.namespace,
                plan.name,
                index,
                uid=pod.uid,
                job_uid=job.uid,
                queue=plan.queue,
                priority_class=plan.priority_class,
                priority=plan.priority,
                gpus=plan.gpus_per_pod,
                node=pod.node,
                phase=pod.phase,
                started_at=pod.started_at,
                terminating_at=pod.terminating_at,
            )
        group_phase = {
            JobPhase.PENDING: "Inqueue",
            JobPhase.RUNNING: "Running",
            JobPhase.ABORTING: "Pending",
            JobPhase.ABORTED: "Pending",
            JobPhase.COMPLETED: "Completed",
        }[job.phase]
        out[("PodGroup", job.key)] = objects.pod_group(
            plan.namespace,
            plan.name,
            job_uid=job.uid,
            queue=plan.queue,
            priority_class=plan.priority_class,
            min_member=plan.min_available,
            created_at=job.created_at,
            phase=group_phase,
            unschedulable=job.phase is JobPhase.PENDING and job.tried,
        )
        return out

    async def _sync(self, now: float) -> None:
        """Publish what changed since the last tick: jobs, then pods, then PodGroups."""
        current = self._objects(now)
        order = {"Node": 0, "Queue": 1, "Job": 2, "Pod": 3, "PodGroup": 4}
        events: list[KubeEvent] = []
        for key in sorted(current, key=lambda k: (order[k[0]], k[1])):
            obj = current[key]
            before = self._published.get(key)
            if before == obj:
                continue
            kind = KubeEventType.ADDED if before is None else KubeEventType.MODIFIED
            events.append(self._event(obj, now, kind))
        gone = [k for k in self._published if k not in current]
        for key in sorted(
            gone, key=lambda k: (-order[k[0]] if k[0] != "Pod" else -len(order), k[1])
        ):
            events.append(self._event(self._published[key], now, KubeEventType.DELETED))
        if events:
            await self._publish(events)
        self._published = current

    def _event(self, obj: objects.Obj, now: float, kind: KubeEventType) -> KubeEvent:
        self._version += 1
        return objects.event(obj, now, kind, self._version)
