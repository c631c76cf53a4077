"""A deterministic discrete-event simulation of a GPU cluster scheduled the Volcano way.

One run replays one workload under one preemption policy in virtual time:
events (submissions, pod releases, job completions, hourly samples,
scheduling cycles) come off a heap keyed by (time, sequence), so the same
workload and seed always give the same numbers, and 14 days take seconds.

Each scheduling cycle does what Volcano's actions do, in order:

1. *allocate* (with backfill): pending jobs by priority, then submission; a
   job starts only with at least ``min_available`` pods placed, one pod on
   one node, within its queue's capability; smaller jobs fill in behind a
   big one that does not fit;
2. *preempt / reclaim*: for jobs still starving, the policy under test picks
   victims (``PreemptionPolicy``); how victims leave is the policy's too:
   killed after the pod's grace period (stock Volcano) or yielded with an
   emergency checkpoint (gpuyield).

Everything that is not the scheduler's choice lives here and is the same for
every policy: progress, checkpoints, pod release, Volcano's job lifecycle
(``PodEvicted -> RestartJob`` with its retry budget, or no policy and a
partial gang), and the accounting behind the metrics.

Time 0 opens the measured window ``[0, days)``. Jobs submitted before it (the
scenario's warm-up) are played like any other, but nothing that happens
before 0 is counted: a pool is judged in its steady state, not while it fills
up from empty (the initial-transient bias of any queueing simulation).
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from gpuyield.agents.planner.hierarchy import QueueTree
from gpuyield.agents.policy.livelock import LivelockGuard
from gpuyield.agents.policy.resume import may_resume
from gpuyield.agents.simulator.allocate import place
from gpuyield.agents.simulator.jobs import JobSpec
from gpuyield.agents.simulator.state import Cluster, Phase, SimJob, SimPod
from gpuyield.schemas.scenario import Scenario

HOUR = 3600.0


_ORDER = operator.attrgetter("order_key")
_SUBMITTED = operator.attrgetter("submitted")


class Event(IntEnum):
    """Kinds of events; at equal times, lower values are handled first."""

    RELEASE = 0
    FINISH = 1
    SUBMIT = 2
    SAMPLE = 3
    CYCLE = 4


@dataclass(frozen=True, slots=True)
class Decision:
    """Victims of one preemption round and, optionally, where the preemptor will go.

    ``placement`` nominates the freed GPUs for the preemptor (reserved until it
    is placed, or a grace period and two cycles later); None leaves them to
    whichever job allocate picks first. ``graceful`` overrides the policy's
    way of evicting for this decision (None: the policy's), for a policy that
    runs two preemptors side by side.
    """

    preemptor: str
    victims: dict[str, tuple[int, ...]]  # job -> pod indexes
    placement: dict[int, int] | None = None  # preemptor pod index -> node
    graceful: bool | None = None


class PreemptionPolicy(Protocol):
    """What differs between the policies under comparison."""

    name: str
    graceful: bool  # victims yield with a checkpoint (True) or are killed (False)

    def may_decide(self, sim: Simulation, job: SimJob) -> bool:
        """Whether ``decide`` would look for victims for ``job`` now.

        False for a demand the policy holds back (gpuyield's cooldowns and
        backoffs): it costs nothing, so it does not count against the
        cycle's attempts, and the jobs behind it in a backlog get theirs.
        Stock Volcano tries every starving job in every session.
        """
        ...

    def held_until(self, sim: Simulation, job: SimJob) -> float:
        """Asked when ``may_decide`` says False: a time before which it stays False.

        It may be early, never late, and holds only while nothing is decided for
        ``job`` (-inf: no such time). Until then a cycle's preemption does not
        look at ``job``, which is what the cycle would do after asking: a
        backlog that is all held back then costs nothing per cycle.
        """
        ...

    def decide(self, sim: Simulation, job: SimJob) -> Decision | None:
        """Victims that make room for the starving ``job``, or None."""
        ...

    def executed(self, sim: Simulation, decision: Decision) -> None:
        """Called once the decision's evictions are under way."""
        ...


class Observer(Protocol):
    """Watches a run without changing it (``gpuyield simulate --archive``'s event log).

    ``advance`` is called before the clock moves to ``t`` (``sim.now`` is still
    the instant just played, and ``sim.touched`` holds the jobs whose pods or
    phase changed in it); ``finish`` once the run is over. An observer reads
    the simulation and clears ``sim.touched``; it never writes anything else,
    so a run's figures are the same with or without one.
    """

    def advance(self, sim: Simulation, t: float) -> None: ...

    def finish(self, sim: Simulation) -> None: ...


@dataclass
class Tally:
    """Running totals behind the metrics."""

    lost_gpu_s: float = 0.0
    dangling: int = 0
    evictions: int = 0
    livelocks: int = 0
    useful_gpu_s: float = 0.0
    samples_t: list[float] = field(default_factory=list)
    samples_used: list[float] = field(default_factory=list)
    samples_useful: list[float] = field(default_factory=list)
    samples_queues: dict[str, list[float]] = field(default_factory=dict)
    samples_evictions: list[int] = field(default_factory=list)
    samples_lost: list[float] = field(default_factory=list)
    evictions_this_hour: int = 0


class Simulation:
    """One workload, one policy, virtual time."""

    def __init__(
        self,
        scenario: Scenario,
        jobs: Sequence[JobSpec],
        policy: PreemptionPolicy,
        *,
        preemption_rounds_per_cycle: int = 3,
        observer: Observer | None = None,
    ) -> None:
        self.scenario = scenario
        self.observer = observer
        self.touched: set[str] = set()
        """Jobs whose pods or phase changed since the observer last looked (with one)."""
        self.policy = policy
        self.horizon = scenario.days * 86400.0
        self.cluster = Cluster.of(scenario.nodes, scenario.gpus_per_node)
        self.tree = QueueTree.build(scenario.queues)
        self.queue_used = {q.name: 0 for q in scenario.queues}
        self.jobs: dict[str, SimJob] = {}
        self.order: list[SimJob] = []
        self._active: dict[str, SimJob] = {}  # submitted, neither Done nor Failed
        # The active jobs in Volcano's job order, and those holding GPUs: what a cycle
        # reads, kept as jobs come and go instead of sorting or scanning a backlog of
        # thousands in every cycle.
        self._queue: list[SimJob] = []
        self._holders: dict[str, SimJob] = {}
        # The active jobs in job order but those the policy holds back (``held_until``),
        # and when each of those is to be looked at again.
        self._unheld: list[SimJob] = []
        self._held: dict[str, float] = {}
        self._held_heap: list[tuple[float, int, str]] = []
        self.now = min([0.0, *(spec.submit_s for spec in jobs)])
        self._window_open = False
        self._running: list[SimJob] | None = None
        self._floors: tuple[list[SimJob], dict[str, int]] | None = None
        self.tally = Tally(samples_queues={q.name: [] for q in scenario.queues})
        self.guard = LivelockGuard(
            window_s=scenario.policy.eviction_window_s,
            max_evictions=max(1, scenario.policy.max_evictions),
        )
        self.pipelined_until: dict[str, float] = {}
        self.reserved_until: dict[str, float] = {}
        self.rounds_per_cycle = preemption_rounds_per_cycle
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._cycle_at: float | None = None
        self._retry_at: float | None = None
        self._on_progress: Callable[[float], None] | None = None
        for spec in jobs:
            self._push(spec.submit_s, Event.SUBMIT, spec)
        t = 0.0
        while t <= self.horizon:
            self._push(t, Event.SAMPLE, None)
            t += HOUR

    # -- the loop --------------------------------------------------------------

    def run(self, on_progress: Callable[[float], None] | None = None) -> Tally:
        """Play the run to its end; ``on_progress`` hears the share done every simulated hour."""
        self._on_progress = on_progress
        while self._heap:
            t, _, kind, payload = heapq.heappop(self._heap)
            if t > self.horizon:
                break
            if self.observer is not None and t > self.now:
                self.observer.advance(self, t)
            self.now = t
            if not self._window_open and t >= 0:
                self._open_window()
            self._handle(Event(kind), payload)
        if self.observer is not None:
            self.observer.advance(self, self.horizon)
        self.now = self.horizon
        if not self._window_open:
            self._open_window()
        for job in self.order:
            self._advance(job)
        self.tally.useful_gpu_s = sum(
            (min(job.work, job.spec.duration_s) - job.floor_work) * job.spec.gpus
            for job in self.order
            if job.phase is not Phase.FAILED
        )
        if self.observer is not None:
            self.observer.finish(self)
        return self.tally

    @property
    def measuring(self) -> bool:
        """Inside the measured window (the warm-up is played, never counted)."""
        return self.now >= 0

    def _open_window(self) -> None:
        """Time 0: what the warm-up jobs have done so far is not the window's work."""
        self._window_open = True
        for job in self.order:
            self._advance(job)
            job.floor_work = min(job.work, job.spec.duration_s)

    def active(self) -> list[SimJob]:
        """Jobs submitted and not yet Done or Failed, in submission order."""
        return list(self._active.values())

    def running(self) -> list[SimJob]:
        """Jobs running and not yielding, in submission order: the only possible victims.

        Kept during the preemption phase of a cycle, where every starving job
        asks for it and only ``execute`` changes it; computed afresh elsewhere.
        """
        return self._running if self._running is not None else self._running_now()

    def holding_or(self, job: SimJob) -> list[SimJob]:
        """The jobs holding GPUs, and ``job``, in submission order (``active``'s order).

        Only they can be in a snapshot: a pass over every active job for each
        one was a pass over the backlog.
        """
        jobs = sorted(self._holders.values(), key=_SUBMITTED)
        if job.name not in self._holders:
            bisect.insort(jobs, job, key=_SUBMITTED)
        return jobs

    def lowest_running_priority(self, queue: str) -> int | None:
        """The lowest job priority running in ``queue`` (None: none runs there).

        Once per list ``running`` hands out: a policy asks it for each starving
        job of a backlog, where a pass over the running jobs each time was the cost.
        """
        running = self.running()
        if self._floors is None or self._floors[0] is not running:
            floors: dict[str, int] = {}
            for job in running:
                name, priority = job.spec.queue, job.spec.priority
                if name not in floors or priority < floors[name]:
                    floors[name] = priority
            self._floors = (running, floors)
        return self._floors[1].get(queue)

    def _running_now(self) -> list[SimJob]:
        """Only a job holding GPUs can run (one whose last pod goes is Pending or Suspended)."""
        running = [
            job for job in self._holders.values() if job.phase is Phase.RUNNING and not job.yielding
        ]
        running.sort(key=_SUBMITTED)
        return running

    def _ended(self, job: SimJob) -> None:
        """Done or Failed: forget the job once its last pod has let go of its GPUs."""
        if not job.holding() and self._active.pop(job.name, None) is not None:
            queue = self._queue
            del queue[bisect.bisect_left(queue, job.order_key, key=_ORDER)]
            if self._held.pop(job.name, None) is None:
                unheld = self._unheld
                del unheld[bisect.bisect_left(unheld, job.order_key, key=_ORDER)]

    def _touch(self, job: SimJob) -> None:
        if self.observer is not None:
            self.touched.add(job.name)

    def _push(self, t: float, kind: Event, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, int(kind), payload))

    def _dirty(self) -> None:
        """Something changed: run a scheduling cycle at this instant, once."""
        if self._cycle_at is None or self._cycle_at > self.now:
            self._cycle_at = self.now
            self._push(self.now, Event.CYCLE, None)

    def _handle(self, kind: Event, payload: object) -> None:
        if kind is Event.SUBMIT:
            assert isinstance(payload, JobSpec)
            self._submit(payload)
        elif kind is Event.RELEASE:
            assert isinstance(payload, tuple)
            self._release(*payload)
        elif kind is Event.FINISH:
            assert isinstance(payload, tuple)
            self._finish(*payload)
        elif kind is Event.SAMPLE:
            self._sample()
            if self._on_progress is not None:
                self._on_progress(min(1.0, self.now / self.horizon))
        elif kind is Event.CYCLE:
            if self._cycle_at == self.now:
                self._cycle_at = None
            self.cycle()

    # -- progress ----------------------------------------------------------------

    def _advance(self, job: SimJob) -> None:
        """Bring ``job``'s work and checkpoints up to ``now``."""
        dt = self.now - job.last_update
        rate = job.rate()
        if dt > 0 and rate > 0:
            interval = job.spec.checkpoint_interval_s
            before = job.run_clock
            crossed = math.floor((before + dt) / interval) - math.floor(before / interval)
            if crossed > 0:
                last = math.floor((before + dt) / interval) * interval
                job.checkpoint_work = min(job.spec.duration_s, job.work + (last - before) * rate)
                job.last_checkpoint_at = job.last_update + (last - before)
            job.work = min(job.spec.duration_s, job.work + dt * rate)
            job.run_clock += dt
        job.last_update = self.now

    def _reschedule_finish(self, job: SimJob) -> None:
        job.finish_version += 1
        rate = job.rate()
        if rate > 0:
            left = max(0.0, job.spec.duration_s - job.work)
            self._push(self.now + left / rate, Event.FINISH, (job.name, job.finish_version))

    def _finish(self, name: str, version: int) -> None:
        job = self.jobs[name]
        if version != job.finish_version or job.phase is not Phase.RUNNING:
            return
        self._advance(job)
        if job.work < job.spec.duration_s - 1e-6:
            self._reschedule_finish(job)
            return
        job.phase = Phase.DONE
        job.finished_at = self.now
        job.broken = False
        self._touch(job)
        for pod in job.holding():
            self._free_pod(job, pod)
        self._ended(job)
        self.cluster.release_reservations(job.name)
        self._dirty()

    def _rollback(self, job: SimJob) -> None:
        """The job dies: the work since its last checkpoint is lost."""
        self._advance(job)
        lost = max(0.0, job.work - job.checkpoint_work)
        if self.measuring:
            self.tally.lost_gpu_s += lost * job.spec.gpus
        # Work below the checkpoint redone inside the window is the window's work again.
        job.floor_work = min(job.floor_work, job.checkpoint_work)
        job.work = job.checkpoint_work
        job.run_clock = 0.0

    # -- submissions, placement, release ------------------------------------------

    def _submit(self, spec: JobSpec) -> None:
        job = SimJob(
            spec=spec,
            pods=[SimPod(i) for i in range(spec.pods)],
            last_update=self.now,
            submitted=len(self.order),
        )
        self.jobs[spec.name] = job
        self.order.append(job)
        self._active[spec.name] = job
        bisect.insort(self._queue, job, key=_ORDER)
        bisect.insort(self._unheld, job, key=_ORDER)
        self._touch(job)
        self._dirty()

    def _place_pod(self, job: SimJob, pod: SimPod, node: int) -> None:
        gpus = job.spec.gpus_per_pod
        self.cluster.free[node] -= gpus
        held = self.cluster.reserved.get(node)
        if held and job.name in held:
            held[job.name] = max(0, held[job.name] - gpus)
            if not held[job.name]:
                del held[job.name]
            if not held:
                del self.cluster.reserved[node]
        pod.node = node
        job.unplaced -= 1
        self._holders[job.name] = job
        self._touch(job)
        for queue in self.tree.ancestors[job.spec.queue]:
            self.queue_used[queue] += gpus

    def _free_pod(self, job: SimJob, pod: SimPod) -> None:
        assert pod.node is not None
        gpus = job.spec.gpus_per_pod
        self.cluster.free[pod.node] += gpus
        pod.node = None
        job.unplaced += 1
        if job.unplaced == len(job.pods):
            del self._holders[job.name]
        if pod.releasing_until is not None:
            pod.releasing_until = None
            job.releasing -= 1
        self._touch(job)
        for queue in self.tree.ancestors[job.spec.queue]:
            self.queue_used[queue] -= gpus

    def _release(self, name: str, pods: tuple[int, ...]) -> None:
        job = self.jobs[name]
        self._advance(job)
        for index in pods:
            pod = job.pods[index]
            if pod.node is not None and pod.releasing_until is not None:
                self._free_pod(job, pod)
        if job.phase in (Phase.DONE, Phase.FAILED):
            self._ended(job)
        self._touch(job)
        if job.yielding and not job.releasing:
            job.yielding = False
            if not job.placed():
                job.phase = Phase.SUSPENDED
                job.resume_not_before = self.now + self.guard.resume_delay(job.name, self.now)
            else:
                job.started_at = self.now
        self._reschedule_finish(job)
        self._dirty()

    def capability_room(self, queue: str) -> float:
        """GPUs ``queue`` may still take without breaking its or an ancestor's capability."""
        room = math.inf
        for q in self.tree.ancestors[queue]:
            cap = self.tree.capability(q)
            if cap is not None:
                room = min(room, cap - self.queue_used[q])
        return room

    def try_place(self, job: SimJob, nodes: dict[int, int] | None = None) -> bool:
        """Place ``job``'s waiting pods (best fit, or on ``nodes``) if its gang can run.

        Where is ``allocate.place``'s, the one model of Volcano's allocate;
        GPUs nominated for another preemptor are held GPU by GPU
        (``Holding.GPUS``), as Volcano holds a victim's GPUs for its preemptor.
        """
        waiting = job.waiting()
        if not waiting:
            return False
        gpus = job.spec.gpus_per_pod
        need = max(0, job.spec.min_available - job.placed_count())
        chosen = place(
            self.cluster.free,
            [gpus] * len(waiting),
            min_count=need,
            job=job.name,
            headroom=self.capability_room(job.spec.queue),
            held=self.cluster.reserved,
            nominated=None
            if nodes is None
            else {i: nodes[pod.index] for i, pod in enumerate(waiting) if pod.index in nodes},
        )
        if chosen is None:
            return False
        self._advance(job)
        for position, node in chosen:
            self._place_pod(job, waiting[position], node)
        self._started(job)
        return True

    def _started(self, job: SimJob) -> None:
        """Pods were placed: a job that now runs its gang (re)starts or grows."""
        running = len(job.placed())
        self._touch(job)
        if running < job.spec.min_available:
            job.phase = Phase.RUNNING
            return
        if job.phase is not Phase.RUNNING or job.broken:
            if job.evictions:
                # A restart after an eviction, resumed or requeued: the cycle detector's cue.
                self.guard = self.guard.observe_resume(job.name, self.now)
            job.phase = Phase.RUNNING
            job.broken = False
            job.started_at = self.now
            job.run_clock = 0.0
            if job.first_started_at is None:
                job.first_started_at = self.now
            self.cluster.release_reservations(job.name)
        self._reschedule_finish(job)

    # -- the scheduling cycle ----------------------------------------------------------

    def schedulable(self) -> list[SimJob]:
        """Jobs that want pods, in Volcano's job order: priority, then submission."""
        return list(self._wanting())

    def _wanting(
        self, frozen: dict[str, bool] | None = None, jobs: list[SimJob] | None = None
    ) -> Iterator[SimJob]:
        """``schedulable``, one job at a time, over the active jobs as they are now.

        A cycle reads the backlog only as far as it gets: allocate stops once no
        GPU is left, and preemption after a few attempts, where building the
        whole list of thousands of waiting jobs first was most of a cycle.
        Whether a job wants pods is read when it is reached, which is what the
        whole list would have said: placing a job's pods changes no other job,
        and ``frozen`` holds what the jobs an eviction changed wanted before it.
        ``jobs``: of these only (in job order; default: every active job).
        """
        for job in list(self._queue if jobs is None else jobs):
            wants = None if frozen is None else frozen.get(job.name)
            if self._wants_pods(job) if wants is None else wants:
                yield job

    def _wants_pods(self, job: SimJob) -> bool:
        """A pod to place, and none terminating (its job is not mid-eviction)."""
        phase = job.phase
        if job.yielding or phase is Phase.DONE or phase is Phase.FAILED:
            return False
        if phase is Phase.SUSPENDED and job.resume_not_before > self.now:
            return False
        return job.unplaced > 0 and not job.releasing

    def cycle(self) -> None:
        for name, until in list(self.reserved_until.items()):
            if until <= self.now:
                # The preemptor did not take its nominated GPUs in time: free them for others.
                self.cluster.release_reservations(name)
                del self.reserved_until[name]
        self._allocate(self._wanting())
        rounds = attempts = 0
        self._running = self._running_now()
        # Allocation only places pods, so the jobs still wanting pods keep this order;
        # an eviction changes only its victims, whose wish before it is what counts.
        frozen: dict[str, bool] = {}
        self._wake_held()
        for job in self._wanting(frozen, self._unheld):
            if rounds >= self.rounds_per_cycle or attempts >= 4 * self.rounds_per_cycle:
                break
            if job.phase is Phase.RUNNING and not job.broken:
                continue  # runs its gang: Volcano does not preempt for elastic growth
            if self.pipelined_until.get(job.name, -math.inf) > self.now:
                continue  # its victims are still terminating
            if not self.policy.may_decide(self, job):
                self._hold(job)
                continue  # held back (cooldown, backoff): no attempt spent
            attempts += 1
            decision = self.policy.decide(self, job)
            if decision is None or not decision.victims:
                continue
            for name in decision.victims:
                if name not in frozen:
                    frozen[name] = self._wants_pods(self.jobs[name])
            self.execute(decision)
            self._running = self._running_now()
            rounds += 1
        self._running = None
        # Retry later even if nothing changes: cooldowns and backoffs expire.
        retry_due = self._retry_at is None or self._retry_at <= self.now
        if retry_due and any(
            j.phase in (Phase.PENDING, Phase.SUSPENDED) or j.broken for j in self._active.values()
        ):
            self._retry_at = self.now + self.scenario.cycle_s
            self._push(self._retry_at, Event.CYCLE, None)

    def _hold(self, job: SimJob) -> None:
        """Leave ``job`` out of preemption until the policy may decide for it again."""
        until = self.policy.held_until(self, job)
        if until > self.now:
            unheld = self._unheld
            del unheld[bisect.bisect_left(unheld, job.order_key, key=_ORDER)]
            self._held[job.name] = until
            heapq.heappush(self._held_heap, (until, job.submitted, job.name))

    def _wake_held(self) -> None:
        """Jobs whose hold is over are looked at again (the policy has the last word)."""
        heap = self._held_heap
        while heap and heap[0][0] <= self.now:
            until, _, name = heapq.heappop(heap)
            if self._held.get(name) == until:  # still held, by this hold
                del self._held[name]
                bisect.insort(self._unheld, self.jobs[name], key=_ORDER)

    def _allocate(self, order: Iterable[SimJob]) -> None:
        """Volcano's allocate with backfill: every job in order, placed where its gang fits.

        A job that cannot fit is skipped on cheap bounds before any node is
        searched (its gang over its queue's capability, a pod larger than the
        largest free slot, a gang larger than all free GPUs; GPUs nominated for
        another job do not count), which ``try_place`` would only confirm: with
        thousands of pending jobs (a trace's backlog) the search per job, not
        the decision, was the cost.
        """
        nominees = {name for held in self.cluster.reserved.values() for name in held}
        largest, total = self._free_bounds()
        rooms: dict[str, float] = {}
        # Per queue, the highest priority still waiting; and the highest of those that
        # may reclaim the GPUs they wait for from other queues (see _ahead_of).
        top_in_queue: dict[str, int] = {}
        top_reclaiming: int | None = None
        for job in order:
            if total <= 0 and not nominees:
                # Nothing left to place anyone on: the rest of a backlog of thousands
                # would only be skipped one by one (what they would record is only
                # read for jobs that could be placed).
                break
            spec = job.spec
            if job.phase is Phase.SUSPENDED and not may_resume(
                spec.priority,
                self.now,
                job.resume_not_before,
                self._ahead_of(job, top_in_queue, top_reclaiming),
            ):
                continue
            need = max(0, spec.min_available - job.placed_count()) * spec.gpus_per_pod
            room = rooms.get(spec.queue)
            if room is None:
                room = rooms[spec.queue] = self.capability_room(spec.queue)
            capped = need > room  # what try_place checks first
            fits = not capped and (
                job.name in nominees or (spec.gpus_per_pod <= largest and need <= total)
            )
            if fits and self.try_place(job, self._nominated(job)):
                largest, total = self._free_bounds()
                rooms.clear()
                continue
            if job.phase is not Phase.RUNNING:
                top_in_queue[spec.queue] = max(
                    top_in_queue.get(spec.queue, spec.priority), spec.priority
                )
                within_guarantee = self.queue_used[spec.queue] + need <= self.tree.guarantee(
                    spec.queue
                )
                if not capped and within_guarantee:
                    top_reclaiming = (
                        spec.priority
                        if top_reclaiming is None
                        else max(top_reclaiming, spec.priority)
                    )

    def _free_bounds(self) -> tuple[int, int]:
        """The largest free slot on a node and all free GPUs, less every nomination."""
        free = self.cluster.free
        if not self.cluster.reserved:  # free GPUs are never negative; a nomination may be
            return max(free, default=0), sum(free)
        free = list(free)
        below = 0
        for node, held in self.cluster.reserved.items():
            free[node] -= sum(held.values())
            below += min(0, free[node])
        return max(free, default=0), sum(free) - below

    def _ahead_of(
        self, suspended: SimJob, top_in_queue: dict[str, int], top_reclaiming: int | None
    ) -> list[int]:
        """Priorities of the waiting jobs that a resume of ``suspended`` would stand in front of.

        ``may_resume`` keeps a suspended job from backfilling in front of a
        heavier job of its own queue, or of a queue that may reclaim from it:
        it would only be evicted again. A job of another queue may reclaim only
        when its queue is reclaimable from and the job's queue stays within its
        guarantee with the job placed (Volcano's proportion plugin and the
        planner's queue rules agree), and not while it waits for its own
        queue's capability, which no GPU elsewhere lifts. Counting every
        waiting job instead kept suspended jobs from resuming for as long as
        any heavier queue had a backlog, whose jobs would never evict them,
        while the GPUs stayed idle (or went to newly submitted jobs, which
        this rule does not hold back). Only the highest such priority matters.
        """
        ahead = []
        mine = top_in_queue.get(suspended.spec.queue)
        if mine is not None:
            ahead.append(mine)
        if top_reclaiming is not None and self.tree.queues[suspended.spec.queue].reclaimable:
            ahead.append(top_reclaiming)
        return ahead

    def _nominated(self, job: SimJob) -> dict[int, int] | None:
        nodes = {
            node: held[job.name] for node, held in self.cluster.reserved.items() if job.name in held
        }
        if not nodes:
            return None
        placement: dict[int, int] = {}
        waiting = iter(job.waiting())
        for node, gpus in sorted(nodes.items()):
            for _ in range(gpus // job.spec.gpus_per_pod):
                pod = next(waiting, None)
                if pod is not None:
                    placement[pod.index] = node
        return placement

    # -- evictions -------------------------------------------------------------------------

    def execute(self, decision: Decision) -> None:
        """Carry out a decision: victims are killed (stock) or yield (gpuyield)."""
        graceful = self.policy.graceful if decision.graceful is None else decision.graceful
        grace = self.scenario.checkpoint_save_s if graceful else self.scenario.kill_grace_s
        until = self.now + grace
        self.pipelined_until[decision.preemptor] = until
        for name, pods in sorted(decision.victims.items()):
            victim = self.jobs[name]
            self._count_eviction(victim, decision.preemptor)
            if graceful:
                self._yield(victim, pods, until)
            else:
                self._kill(victim, pods, until)
        if decision.placement:
            job = self.jobs[decision.preemptor]
            self.cluster.release_reservations(job.name)  # a new round replaces the old one
            self.reserved_until[job.name] = until + 2 * self.scenario.cycle_s
            for node in decision.placement.values():
                held = self.cluster.reserved.setdefault(node, {})
                held[job.name] = held.get(job.name, 0) + job.spec.gpus_per_pod
        self.policy.executed(self, decision)

    def _count_eviction(self, victim: SimJob, preemptor: str) -> None:
        victim.evictions.append(self.now)
        self.guard, incidents = self.guard.observe_eviction(victim.name, preemptor, self.now)
        if self.measuring:
            self.tally.evictions += 1
            self.tally.evictions_this_hour += 1
            self.tally.livelocks += len(incidents)

    def _terminate(self, job: SimJob, pods: Iterable[int], until: float) -> None:
        released = []
        for index in pods:
            pod = job.pods[index]
            if pod.node is not None and pod.releasing_until is None:
                pod.releasing_until = until
                job.releasing += 1
                released.append(index)
        self._touch(job)
        if released:
            self._push(until, Event.RELEASE, (job.name, tuple(released)))

    def _kill(self, job: SimJob, pods: tuple[int, ...], until: float) -> None:
        """Stock eviction: pods are deleted with their grace period, no checkpoint."""
        if job.spec.restart_job:
            # PodEvicted -> RestartJob: every pod goes, the job restarts from its
            # checkpoint and spends one retry; at max_retry Volcano marks it Failed.
            self._rollback(job)
            self._terminate(job, [p.index for p in job.holding()], until)
            job.retries += 1
            job.broken = False
            job.phase = Phase.FAILED if job.retries >= self.scenario.max_retry else Phase.PENDING
            if job.phase is Phase.FAILED:
                job.finished_at = self.now
                self._ended(job)
        else:
            # No policy: the evicted pods are recreated Pending; the rest keep running.
            self._advance(job)
            self._terminate(job, pods, until)
            if 0 < len(job.placed()) < job.spec.min_available and not job.broken:
                self._rollback(job)
                job.broken = True
                if self.measuring:
                    self.tally.dangling += 1
            elif not job.placed():
                self._rollback(job)
                job.phase = Phase.PENDING
        self._reschedule_finish(job)

    def _yield(self, job: SimJob, pods: tuple[int, ...], until: float) -> None:
        """Graceful yield: an emergency checkpoint, then the pods go; nothing is lost."""
        self._advance(job)
        job.checkpoint_work = job.work
        job.last_checkpoint_at = self.now
        job.run_clock = 0.0
        job.yielding = True
        self._terminate(job, pods, until)
        self._reschedule_finish(job)

    # -- samples --------------------------------------------------------------------------

    def _sample(self) -> None:
        tally = self.tally
        used = self.cluster.total - sum(self.cluster.free)
        useful = 0.0
        for job in self._active.values():
            if job.phase is Phase.RUNNING and job.rate() > 0:
                useful += len(job.placed()) * job.spec.gpus_per_pod
        tally.samples_t.append(self.now / HOUR)
        tally.samples_used.append(float(used))
        tally.samples_useful.append(useful)
        for queue, series in tally.samples_queues.items():
            series.append(float(self.queue_used[queue]))
        tally.samples_evictions.append(tally.evictions_this_hour)
        tally.samples_lost.append(tally.lost_gpu_s / HOUR)
        tally.evictions_this_hour = 0


def volcano_victim_job(sim: Simulation, preemptor: SimJob, other: SimJob, *, reclaim: bool) -> bool:
    """Whether stock Volcano offers ``other``'s tasks to ``preemptor`` in preempt or reclaim.

    ``preempt``: the same queue and a strictly lower job priority (the
    priority plugin); ``reclaim``: another queue that is reclaimable
    (``queue_info.go:80-95``), no priority check. Either way only running,
    preemptable jobs (``volcano.sh/preemptable`` defaults to true).
    """
    if other is preemptor or other.phase is not Phase.RUNNING or other.yielding:
        return False
    if not other.spec.preemptable:
        return False
    if reclaim:
        return (
            other.spec.queue != preemptor.spec.queue
            and sim.tree.queues[other.spec.queue].reclaimable
        )
    return (
        other.spec.queue == preemptor.spec.queue and other.spec.priority < preemptor.spec.priority
    )
