"""A simulated run as the controller would have seen it: ``gpuyield simulate --archive DIR``.

Replay, the decider and the benchmarks need inputs; a demo gives minutes of
them, a simulation gives weeks of a large cluster. ``EventLog`` watches a
``Simulation`` (an ``engine.Observer``: it reads the run and never changes
it, so the figures are the same with it or without it) and emits, with
simulated times, the messages the live system would have put on the
controller's topics:

- ``gpuyield.kube-events``: the Nodes and Queues once, then every change of
  a Volcano Job, its PodGroup and its pods, as ``gpuyield watch`` publishes
  them, built by the demo's mapping onto the one set of builders
  (``agents.demo.objects``, ``schemas.kube_objects``). A job waiting for pods
  is Pending with an ``Unschedulable`` PodGroup (what makes it a demand), a
  placed pod is Running on its node, a terminating pod carries its
  ``deletionTimestamp``, a pod that let go of its GPUs is deleted (and
  created again, a new uid, when its job wants it back), a suspended job is
  ``Aborted`` without pods, and a finished job is ``Completed`` or
  ``Failed``, then deleted with its pods and PodGroup;
- ``gpuyield.heartbeats``: one heartbeat per running job every
  ``heartbeat_s``, plus one at every checkpoint and one whenever its pods
  change (a start, a yield); one step is one second of work at full width;
- ``gpuyield.job-progress``: those heartbeats folded and forwarded by the
  progress agent's own rules (``controller.progress.fold`` and
  ``should_forward``);
- ``gpuyield.yield-acks``: under the graceful policies (``gpuyield``,
  ``gpuyield-unreserved``), one ``checkpointed`` ack per node when a yield
  is done, as a node agent sends it. Their command ids are the simulation's
  own (no decision is recorded), so a replay, which derives its own
  commands, ignores them; an audit counts them;
- ``gpuyield.ticks``: one every ``tick_s``, as the workers send them.

Stock Volcano's policies kill instead of yielding: their logs have no acks.
Nothing the controller writes (decisions, commands, reservations, the
journal) is in the log: ``gpuyield replay`` over it derives every decision.
"""

from __future__ import annotations

import heapq
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuyield.agents.controller.progress import DEFAULT_FORWARD, ForwardRule, fold, should_forward
from gpuyield.agents.demo import objects
from gpuyield.agents.simulator.engine import Simulation
from gpuyield.agents.simulator.snapshots import EPOCH, node_name
from gpuyield.agents.simulator.state import Phase, SimJob
from gpuyield.schemas import kube_objects as k
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.labels import PREEMPTABLE, SLA_ANNOTATION
from gpuyield.schemas.messages import (
    Heartbeat,
    JobProgress,
    KubeEvent,
    KubeEventType,
    Tick,
    YieldAck,
    YieldOutcome,
)

KUBE_EVENTS = "gpuyield.kube-events"
HEARTBEATS = "gpuyield.heartbeats"
JOB_PROGRESS = "gpuyield.job-progress"
YIELD_ACKS = "gpuyield.yield-acks"
TICKS = "gpuyield.ticks"
TOPICS = (KUBE_EVENTS, HEARTBEATS, JOB_PROGRESS, YIELD_ACKS, TICKS)
"""The topics a log writes (canonical names; the streams registry names them too)."""

_IDS = uuid.UUID("6c1b3a5e-0f0b-4d8e-9a51-5e2f3c6d7a10")
_ORDER = {"Job": 0, "Pod": 1, "PodGroup": 2}
AFTER_CHECKPOINT_S = 0.001
"""A checkpoint's heartbeat is sent this long after it is written (never before it)."""


@dataclass(frozen=True, slots=True)
class LogMessage:
    """One message of the log: its canonical topic, Kafka key, value and time."""

    topic: str
    key: bytes
    value: bytes
    at: float


@dataclass(frozen=True, slots=True)
class LogOptions:
    heartbeat_s: float = 600.0
    """A running job's heartbeat period (the live SDK's is seconds: sampled, see above)."""
    tick_s: float = 60.0
    """The workers' tick period, as the decider sees it."""
    epoch: float = EPOCH
    """Unix time of the simulation's time 0 (the measured window's start)."""
    forward: ForwardRule = DEFAULT_FORWARD
    """When a folded summary is forwarded to ``job-progress`` (the worker's knobs)."""

    def __post_init__(self) -> None:
        if not self.heartbeat_s > 0 or not self.tick_s > 0:
            raise ValueError("heartbeat_s and tick_s must be > 0")


@dataclass(frozen=True, slots=True)
class Progress:
    """A job's work at one instant, read from the simulation without changing it."""

    work: float
    checkpoint_work: float
    checkpoint_at: float | None


def progress_at(job: SimJob, t: float) -> Progress:
    """``job``'s work and last checkpoint at ``t`` (no later than its next change).

    The simulation brings a job's work up to date only when its rate changes
    (``Simulation._advance``), so between changes work grows linearly and a
    checkpoint falls every ``checkpoint_interval_s`` of running: the same
    arithmetic, read-only.
    """
    dt = t - job.last_update
    rate = job.rate()
    duration = job.spec.duration_s
    if dt <= 0 or rate <= 0:
        return Progress(job.work, job.checkpoint_work, job.last_checkpoint_at)
    interval = job.spec.checkpoint_interval_s
    before = job.run_clock
    checkpoint_work, checkpoint_at = job.checkpoint_work, job.last_checkpoint_at
    if math.floor((before + dt) / interval) > math.floor(before / interval):
        last = math.floor((before + dt) / interval) * interval
        checkpoint_work = min(duration, job.work + (last - before) * rate)
        checkpoint_at = job.last_update + (last - before)
    return Progress(min(duration, job.work + dt * rate), checkpoint_work, checkpoint_at)


def next_checkpoint(job: SimJob, t: float) -> float | None:
    """When ``job``'s next periodic checkpoint falls after ``t``, if it keeps running."""
    if job.rate() <= 0:
        return None
    interval = job.spec.checkpoint_interval_s
    clock = job.run_clock + (t - job.last_update)
    return t + (math.floor(clock / interval) + 1) * interval - clock


def namespaced(job: SimJob) -> tuple[str, str]:
    """(namespace, name): a job lives in its queue's namespace, as a team's jobs do."""
    return job.spec.queue, job.name


def job_key(job: SimJob) -> str:
    namespace, name = namespaced(job)
    return f"{namespace}/{name}"


@dataclass(slots=True)
class _Pod:
    incarnation: int = 0
    node: int | None = None
    started_at: float | None = None
    terminating_at: float | None = None


@dataclass(slots=True)
class _Job:
    pods: dict[int, _Pod] = field(default_factory=dict)
    published: dict[tuple[str, str], k.Object] = field(default_factory=dict)
    version: int = 0  # heartbeats scheduled before a change are stale
    yield_since: float | None = None
    yield_nodes: tuple[int, ...] = ()
    yield_step: int = 0
    progress: JobProgress | None = None
    forwarded: JobProgress | None = None


class EventLog:
    """The observer that turns a run into the controller's input messages (see module doc)."""

    def __init__(
        self, emit: Callable[[LogMessage], None], options: LogOptions | None = None
    ) -> None:
        self.emit = emit
        self.options = options or LogOptions()
        self.counts: dict[str, int] = dict.fromkeys(TOPICS, 0)
        self._jobs: dict[str, _Job] = {}
        self._version = 0
        self._started = False
        self._next_tick: float | None = None
        self._beats: list[tuple[float, int, str, int, bool]] = []
        self._seq = 0

    # -- the observer ------------------------------------------------------------------

    def advance(self, sim: Simulation, t: float) -> None:
        if not self._started:
            self._started = True
            self._cluster(sim)
            self._next_tick = sim.now
        self._flush(sim)
        self._periodic(sim, t)

    def finish(self, sim: Simulation) -> None:
        self._flush(sim)

    # -- messages ----------------------------------------------------------------------

    def _send(self, topic: str, key: str, value: bytes, t: float) -> None:
        self.counts[topic] += 1
        self.emit(LogMessage(topic, key.encode(), value, self.options.epoch + t))

    def _kube(self, obj: k.Object, t: float, kind: KubeEventType) -> None:
        self._version += 1
        event: KubeEvent = objects.event(obj, self.options.epoch + t, kind, self._version)
        self._send(KUBE_EVENTS, event.key, encode(event), t)

    def _cluster(self, sim: Simulation) -> None:
        """The Nodes and Queues, once, as a watch's first list shows them."""
        for i in range(len(sim.cluster.free)):
            node = k.a_gpu_node(node_name(i), gpus=sim.cluster.gpus_per_node)
            self._kube(node, sim.now, KubeEventType.ADDED)
        for q in sim.scenario.queues:
            queue = k.a_queue(
                q.name,
                weight=max(1, round(q.weight)),
                guarantee={k.GPU: q.guarantee.gpu} if q.guarantee.gpu else None,
                capability=None if q.capability.gpu is None else {k.GPU: q.capability.gpu},
                reclaimable=q.reclaimable,
                parent=q.parent,
            )
            self._kube(queue, sim.now, KubeEventType.ADDED)

    # -- an instant's changes ------------------------------------------------------------

    def _flush(self, sim: Simulation) -> None:
        """Publish what the instant ``sim.now`` changed, job by job in submission order."""
        touched = sorted(sim.touched, key=lambda name: (sim.jobs[name].spec.submit_s, name))
        sim.touched.clear()
        for name in touched:
            job = sim.jobs[name]
            state = self._jobs.setdefault(name, _Job())
            self._follow_pods(job, state, sim.now)
            self._follow_yield(sim, job, state)
            self._publish(job, state, sim.now)
            state.version += 1
            if job.rate() > 0:
                self._beat(job, state, sim.now)
                self._schedule(job, state, sim.now, sim.now + self.options.heartbeat_s, False)
                checkpoint = next_checkpoint(job, sim.now)
                if checkpoint is not None:
                    self._schedule(job, state, sim.now, checkpoint + AFTER_CHECKPOINT_S, True)
            if job.phase in (Phase.DONE, Phase.FAILED) and not job.holding():
                del self._jobs[name]

    def _follow_pods(self, job: SimJob, state: _Job, now: float) -> None:
        for pod in job.pods:
            seen = state.pods.setdefault(pod.index, _Pod())
            if seen.node is not None and pod.node is None:
                seen.incarnation += 1  # deleted; a pod wanted again is a new one
                seen.started_at = seen.terminating_at = None
            if pod.node is not None and seen.node is None:
                seen.started_at = now
            if pod.releasing_until is not None and seen.terminating_at is None:
                seen.terminating_at = now
            seen.node = pod.node

    def _follow_yield(self, sim: Simulation, job: SimJob, state: _Job) -> None:
        if job.yielding and state.yield_since is None:
            state.yield_since = sim.now
            state.yield_nodes = tuple(
                sorted(
                    {
                        p.node
                        for p in job.pods
                        if p.releasing_until is not None and p.node is not None
                    }
                )
            )
            state.yield_step = int(job.checkpoint_work)
        elif not job.yielding and state.yield_since is not None:
            namespace, name = namespaced(job)
            for node in state.yield_nodes:
                command = uuid.uuid5(_IDS, f"{name}/{state.yield_since!r}/{node}")
                ack = YieldAck(
                    command_id=f"sim-{command}",
                    node=node_name(node),
                    job=f"{namespace}/{name}",
                    outcome=YieldOutcome.CHECKPOINTED,
                    checkpoint_step=state.yield_step,
                    seconds_taken=sim.now - state.yield_since,
                    acked_at=self.options.epoch + sim.now,
                )
                self._send(YIELD_ACKS, ack.job, encode(ack), sim.now)
            state.yield_since = None

    def _objects(self, job: SimJob, state: _Job, now: float) -> dict[tuple[str, str], k.Object]:
        spec = job.spec
        namespace, name = namespaced(job)
        epoch = self.options.epoch
        uid = str(uuid.uuid5(_IDS, name))
        pclass = spec.kind.value
        placed = len(job.placed())
        phase = {
            Phase.PENDING: "Pending",
            Phase.RUNNING: "Running",
            Phase.SUSPENDED: "Aborted",
            Phase.DONE: "Completed",
            Phase.FAILED: "Failed",
        }[job.phase]
        out: dict[tuple[str, str], k.Object] = {}
        vjob = objects.volcano_job(
            namespace,
            name,
            uid=uid,
            queue=spec.queue,
            priority_class=pclass,
            replicas=spec.pods,
            gpus_per_pod=spec.gpus_per_pod,
            min_available=spec.min_available,
            created_at=epoch + spec.submit_s,
            phase=phase,
            running=placed,
        )
        wants = job.phase in (Phase.PENDING, Phase.RUNNING) and not job.yielding
        for pod in job.pods:
            seen = state.pods[pod.index]
            if pod.node is None and not wants:
                continue
            out[("Pod", f"{pod.index:06d}/{seen.incarnation}")] = objects.pod(
                namespace,
                name,
                pod.index,
                uid=str(uuid.uuid5(_IDS, f"{name}/{pod.index}/{seen.incarnation}")),
                job_uid=uid,
                queue=spec.queue,
                priority_class=pclass,
                priority=spec.priority,
                gpus=spec.gpus_per_pod,
                node=None if pod.node is None else node_name(pod.node),
                phase="Running" if pod.node is not None else "Pending",
                started_at=None if seen.started_at is None else epoch + seen.started_at,
                terminating_at=None if seen.terminating_at is None else epoch + seen.terminating_at,
            )
        gang = placed >= spec.min_available and job.phase is Phase.RUNNING
        group_phase = {
            Phase.PENDING: "Inqueue",
            Phase.RUNNING: "Running" if gang else "Inqueue",
            Phase.SUSPENDED: "Pending",
            Phase.DONE: "Completed",
            Phase.FAILED: "Failed",
        }[job.phase]
        group = objects.pod_group(
            namespace,
            name,
            job_uid=uid,
            queue=spec.queue,
            priority_class=pclass,
            min_member=spec.min_available,
            created_at=epoch + spec.submit_s,
            phase=group_phase,
            unschedulable=wants and any(p.node is None for p in job.pods) and not gang,
        )
        for obj in (vjob, group):
            annotations = obj["metadata"].setdefault("annotations", {})
            if spec.sla_s is not None:
                annotations[SLA_ANNOTATION] = f"{spec.sla_s:.0f}"
            if not spec.preemptable:
                annotations[PREEMPTABLE] = "false"
        out[("Job", name)] = vjob
        out[("PodGroup", name)] = group
        return out

    def _publish(self, job: SimJob, state: _Job, now: float) -> None:
        current = self._objects(job, state, now)
        self._changes(state.published, current, now)
        for kind, name in state.published:
            if kind == "Pod" and (kind, name) not in current:
                index, incarnation = (int(part) for part in name.split("/"))
                seen = state.pods[index]
                if seen.incarnation == incarnation:
                    seen.incarnation += 1  # deleted while its job wanted none: new when back
        if job.phase in (Phase.DONE, Phase.FAILED) and not job.holding():
            # Finished, its pods gone: deleted once its final phase was seen
            # (ttlSecondsAfterFinished: 0).
            self._changes(current, {}, now)
            current = {}
        state.published = current

    def _changes(
        self,
        before: dict[tuple[str, str], k.Object],
        current: dict[tuple[str, str], k.Object],
        now: float,
    ) -> None:
        """Deletions first (pods, PodGroup, Job), then additions and changes (Job, pods,
        PodGroup): a pod created again under its name (a new uid) follows its deletion."""
        for key in sorted(
            (key for key in before if key not in current),
            key=lambda key: (_ORDER[key[0]] == 0, key),
        ):
            self._kube(before[key], now, KubeEventType.DELETED)
        for key in sorted(current, key=lambda key: (_ORDER[key[0]], key[1])):
            if before.get(key) != current[key]:
                kind = KubeEventType.ADDED if key not in before else KubeEventType.MODIFIED
                self._kube(current[key], now, kind)

    # -- heartbeats and ticks -----------------------------------------------------------

    def _schedule(self, job: SimJob, state: _Job, now: float, at: float, checkpoint: bool) -> None:
        self._seq += 1
        heapq.heappush(self._beats, (at, self._seq, job.name, state.version, checkpoint))

    def _periodic(self, sim: Simulation, t: float) -> None:
        """Everything due before ``t``, when nothing in the simulation changes, in time order."""
        assert self._next_tick is not None
        while True:
            beat_at = self._beats[0][0] if self._beats else math.inf
            if self._next_tick < t and self._next_tick <= beat_at:
                tick = Tick(at=self.options.epoch + self._next_tick)
                self._send(TICKS, "tick", encode(tick), self._next_tick)
                self._next_tick += self.options.tick_s
                continue
            if beat_at >= t:
                return
            at, _, name, version, checkpoint = heapq.heappop(self._beats)
            state = self._jobs.get(name)
            if state is None or state.version != version:
                continue  # the job changed since: it was rescheduled then
            job = sim.jobs[name]
            self._beat(job, state, at)
            if checkpoint:
                following = next_checkpoint(job, at)
                if following is not None:
                    self._schedule(job, state, at, following + AFTER_CHECKPOINT_S, True)
            else:
                self._schedule(job, state, at, at + self.options.heartbeat_s, False)

    def _beat(self, job: SimJob, state: _Job, t: float) -> None:
        seen = progress_at(job, t)
        epoch = self.options.epoch
        namespace, name = namespaced(job)
        beat = Heartbeat(
            job=f"{namespace}/{name}",
            pod=f"{name}-{objects.TASK}-0",
            step=int(seen.work),
            total_steps=max(1, math.ceil(job.spec.duration_s)),
            progress=min(1.0, seen.work / job.spec.duration_s),
            last_checkpoint_step=None if seen.checkpoint_at is None else int(seen.checkpoint_work),
            last_checkpoint_at=None if seen.checkpoint_at is None else epoch + seen.checkpoint_at,
            checkpoint_interval_s=job.spec.checkpoint_interval_s,
            sent_at=epoch + t,
        )
        self._send(HEARTBEATS, beat.job, encode(beat), t)
        folded = fold(state.progress, beat)
        if folded is None:
            return
        state.progress = folded
        if should_forward(state.forwarded, folded, self.options.forward):
            forwarded = folded.model_copy(update={"forwarded_at": epoch + t})
            state.forwarded = forwarded
            self._send(JOB_PROGRESS, forwarded.job, encode(forwarded), t)
