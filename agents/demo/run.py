"""The demo from start to end: services, worker, node agents, the simulated cluster, the story.

``Demo.run`` starts everything (the embedded Tansu broker and Valkey, always:
the demo publishes a made-up cluster and must never reach a real
deployment's topics), plays the story of ``scenario`` phase by phase, each
phase ending on the state the next one needs (never a fixed sleep, never a
fixed timeout: a phase gives up only when nothing it waits on has moved for
``timing.STALL_S``, so a slow machine plays the same story, slower), and stops
everything in order, whatever happened: the simulated cluster first, then the
pods (SIGTERM: they checkpoint), the node agents, the topic reader, the
worker, and last the broker and Redis. ``view`` is what the terminal shows
while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from gpuyield.agents.demo.children import Children, child_env, python
from gpuyield.agents.demo.cluster import JobPhase, JobRow, SimCluster, SimJob
from gpuyield.agents.demo.nodes import NodeAgents, PodGpus
from gpuyield.agents.demo.pods import PodLauncher
from gpuyield.agents.demo.reservations import ReservationFeed
from gpuyield.agents.demo.scenario import DemoScenario, JobPlan, Runner
from gpuyield.agents.demo.tally import JobSteps, Tally, TallyReader
from gpuyield.agents.demo.timing import (
    RUN_LIMIT_S,
    STALL_S,
    Watchdog,
    demo_policy,
    demo_settings,
)
from gpuyield.agents.node.local_signaller import LocalPodRegistry
from gpuyield.schemas import JobState
from gpuyield.schemas.config import NodeAgentKnobs
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import KubeEvent
from gpuyield.streams.archive import archive_until_caught_up
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedRedis
from gpuyield.streams.live_view_store import view_key
from gpuyield.streams.settings import Settings, settings_env
from gpuyield.streams.topics import HEARTBEATS, KUBE_EVENTS, ensure_topics, registry

log = logging.getLogger(__name__)

REDIS_PREFIX = "gpuyield-demo"
APP_ID = "gpuyield-demo"
CLUSTER_ID = "demo"
PARTITIONS = 4  # of the keyed topics: enough for four nodes, light on one machine
LOOP_S = 0.2  # how often the simulated cluster looks at its processes and Redis


REDIS_CONNECTIONS_PER_NODE = 3
"""The demo's node agents share one Redis client (they are tasks of one process): its pool must
hold what they have in flight at once, a few commands each. redis-py's default of 100 made the
agents of a 128-node drill fail with ``MaxConnectionsError`` as they started."""


def redis_connections(nodes: int) -> int:
    """The pool of the demo's Redis client: every node agent's share, and the demo's own."""
    return 100 + REDIS_CONNECTIONS_PER_NODE * nodes


def worker_env(settings: Settings) -> dict[str, str]:
    """The worker's environment: the demo's settings and none of the caller's.

    A settings file or a ``GPUYIELD_*`` variable of a real deployment must not
    redirect the demo's worker or slow its timers.
    """
    env = {k: v for k, v in child_env({}).items() if not k.upper().startswith("GPUYIELD_")}
    env.update(settings_env(settings))
    return env


class DemoError(RuntimeError):
    """The demo could not go on; the message is one line (the CLI adds where the logs are)."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    scenario: DemoScenario
    workdir: Path
    train_tiny: Path | None
    """examples/train_tiny.py, or None: torch pods run stand-ins."""
    archive: str | None = None
    """Where to keep the run's archive (``gpuyield demo --archive DIR``), or None."""
    node_agent: NodeAgentKnobs | None = None
    """The node agents' waits; None: the demo's (``timing.DEMO_NODE_AGENT``)."""


@dataclass(frozen=True, slots=True)
class DemoView:
    """A moment of the demo, for the terminal."""

    phase: str
    elapsed_s: float
    rows: tuple[JobRow, ...]
    steps: Mapping[str, tuple[int, int | None]]  # job -> (step, last checkpoint step)
    tally: Tally


@dataclass(slots=True)
class DemoResult:
    tally: Tally
    rows: list[JobRow]
    wall_s: float
    torch_pods: int
    standin_pods: int


# -- the states the story waits for (pure, so each rule is testable alone) ---------------------


def settled(job: SimJob | None, seen: JobSteps | None, now: float, settled_s: float) -> bool:
    """A research job the burst may meet: running past the cooldown, with a checkpoint reported.

    The checkpoint matters as much as the cooldown: the planner weighs a
    victim by the work since its last checkpoint, and a trainer that has not
    saved one yet (torch starts slowly on a busy machine) would lose all its
    work since the start, which made the 16-GPU gang, which had just saved,
    the cheapest victim.
    """
    return (
        job is not None
        and job.phase is JobPhase.RUNNING
        and job.placed_at is not None
        and now - job.placed_at >= settled_s
        and seen is not None
        and seen.checkpoint_step is not None
    )


def decider_knows_settled(entry: Mapping[str, Any] | None) -> bool:
    """The decider's own view of a job (its live view) shows it running, past its cooldown,
    with a checkpoint time.

    The demo reads the trainers' heartbeats itself, a second or more ahead of
    the decider on a busy machine (heartbeats reach the decider through the
    worker's progress agent); a burst started on the demo's view alone met a
    decider that still costed a checkpointed torch trainer as never
    checkpointed (all its work since the start), and evicted the gang instead.
    """
    return (
        entry is not None
        and entry.get("state") == JobState.RUNNING.value
        and entry.get("cooldown_until") is None
        and entry.get("last_checkpoint_at") is not None
    )


def placed(job: SimJob | None) -> bool:
    """All its pods run (or it already completed)."""
    return job is not None and (
        job.phase is JobPhase.COMPLETED
        or (
            job.phase is JobPhase.RUNNING
            and bool(job.pods)
            and all(p.running or p.completed for p in job.pods.values())
        )
    )


def finished(job: SimJob | None) -> bool:
    return job is not None and job.phase is JobPhase.COMPLETED


def resumed(job: SimJob, tally: Tally) -> bool:
    """Never suspended, or running again after each suspension with a heartbeat since."""
    return job.suspensions == 0 or (
        job.phase is JobPhase.RUNNING
        and job.resumes >= job.suspensions
        and job.key in tally.resumed_steps
    )


class Demo:
    """One run of the demo (see the module docstring)."""

    def __init__(self, options: DemoOptions) -> None:
        self.options = options
        self.tally = Tally()
        self.phase = "starting the broker and Redis"
        self._started = time.monotonic()
        self._cluster: SimCluster | None = None
        self._children = Children()
        self._background: list[asyncio.Task[Any]] = []
        self._agents: NodeAgents | None = None
        self._decider_jobs: dict[str, Mapping[str, Any]] = {}  # the worker's live view, by job

    def view(self) -> DemoView:
        steps = {job: (s.step, s.checkpoint_step) for job, s in self.tally.steps.items()}
        rows = tuple(self._cluster.rows()) if self._cluster is not None else ()
        return DemoView(self.phase, time.monotonic() - self._started, rows, steps, self.tally)

    async def run(self) -> DemoResult:
        workdir = self.options.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        broker = EmbeddedBroker(log_path=workdir / "tansu.log")
        redis_server = EmbeddedRedis(workdir / "valkey")
        try:
            await asyncio.to_thread(broker.start)
            await asyncio.to_thread(redis_server.start)
            return await self._with_services(broker.bootstrap, redis_server.url)
        finally:
            self._children.close()
            await asyncio.to_thread(broker.stop)
            await asyncio.to_thread(redis_server.stop)

    # -- with the broker and Redis up ----------------------------------------------------------

    async def _with_services(self, bootstrap: str, redis_url: str) -> DemoResult:
        scenario = self.options.scenario
        kafka: dict[str, Any] = {"bootstrap_servers": bootstrap}
        self.phase = "creating the topics, starting the worker and the node agents"
        await ensure_topics(kafka, registry(PARTITIONS), replication_factor=1)
        settings = demo_settings(
            bootstrap=bootstrap,
            redis_url=redis_url,
            state_dir=self.options.workdir / "worker",
            grace_s=scenario.grace_s,
            app_id=APP_ID,
            cluster_id=CLUSTER_ID,
            partitions=PARTITIONS,
            node_agent=self.options.node_agent,
        )
        self._start_worker(settings)
        redis = Redis.from_url(redis_url, max_connections=redis_connections(len(scenario.nodes)))
        producer = AIOKafkaProducer(**kafka, acks="all", max_batch_size=1)
        reader = TallyReader(self.tally, kafka=kafka, on_message=self._message)
        reservations = ReservationFeed(kafka=kafka)  # the holds the simulated Volcano honours
        launcher = PodLauncher(
            self._children,
            LocalPodRegistry(redis, prefix=REDIS_PREFIX),
            workdir=self.options.workdir,
            bootstrap=bootstrap,
            heartbeats_topic=HEARTBEATS,
            train_tiny=self.options.train_tiny,
            seed=scenario.seed,
        )
        stop = asyncio.Event()

        async def publish(events: Sequence[KubeEvent]) -> None:
            for event in events:
                await producer.send_and_wait(KUBE_EVENTS, encode(event), key=event.key.encode())
            self._watched(events)

        cluster = SimCluster(scenario, launcher, publish, reservations)
        self._cluster = cluster
        agents = NodeAgents(
            [n.name for n in scenario.nodes],
            kafka=kafka,
            redis=redis,
            redis_prefix=REDIS_PREFIX,
            gpus=PodGpus(cluster.pod_gpus),
            settings=settings,
        )
        self._agents = agents
        completed = False
        try:
            await producer.start()
            await reader.start()
            await reservations.start()
            self._background.append(asyncio.create_task(reader.run(stop), name="tally"))
            agents.start()
            self._background.append(
                asyncio.create_task(self._cluster_loop(cluster, redis, stop), name="cluster")
            )
            await self._story(cluster)
            completed = True
            return DemoResult(
                self.tally,
                cluster.rows(),
                time.monotonic() - self._started,
                torch_pods=launcher.started[Runner.TORCH],
                standin_pods=launcher.started[Runner.STANDIN],
            )
        finally:
            self.phase = "stopping"
            stop.set()
            for task in self._background:
                task.cancel()
            for task in self._background:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await asyncio.to_thread(launcher.stop_all, 10.0)
            await agents.stop()
            await reader.stop()
            await reservations.stop()
            with contextlib.suppress(Exception):
                await producer.stop()
            await asyncio.to_thread(self._children.stop, ["worker"], 15.0)
            await redis.aclose()
            if completed and self.options.archive is not None:  # once the worker has stopped
                self.phase = "archiving the run"
                await asyncio.to_thread(
                    archive_until_caught_up,
                    kafka,
                    self.options.archive,
                    [spec.name for spec in registry(PARTITIONS)],
                )

    def _start_worker(self, settings: Settings) -> None:
        workdir = self.options.workdir
        env = worker_env(settings)
        self._children.spawn(
            "worker",
            [python(), "-m", "gpuyield.agents.demo.worker_process"],
            log_path=workdir / "worker.log",
            env=env,
        )

    def _worker_ready(self) -> bool:
        path = self.options.workdir / "worker.log"
        try:
            return b"Worker ready" in path.read_bytes()
        except OSError:
            return False

    def _watched(self, events: Sequence[KubeEvent]) -> None:
        """Watch events the simulated cluster has just published (for a story that times them)."""

    def _message(self, message: Any, sent_at: float) -> None:
        """A message the topic reader folded, with its record's time (same purpose)."""

    # -- the simulated cluster's loop -----------------------------------------------------------

    async def _cluster_loop(self, cluster: SimCluster, redis: Redis, stop: asyncio.Event) -> None:
        key = f"{REDIS_PREFIX}:local-jobs"
        while not stop.is_set():
            raw = await cast("Any", redis.hgetall(key))
            records = {k.decode(): json.loads(v) for k, v in raw.items()}
            await cluster.tick(time.time(), records)
            raw_view = await cast("Any", redis.get(view_key(CLUSTER_ID)))
            if raw_view is not None:
                view = json.loads(raw_view)
                self._decider_jobs = {j["job"]: j for j in view.get("jobs", ())}
            worker = self._children.get("worker")
            if worker is None or worker.poll() is not None:
                raise DemoError(
                    f"the worker exited with status {worker.returncode if worker else '?'}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), LOOP_S)

    # -- the story -------------------------------------------------------------------------------

    async def _story(self, cluster: SimCluster) -> None:
        """The scenario's phases, each ended by the state the next one needs.

        Nothing here waits a fixed time or gives up after one: each phase waits
        for its condition under a ``Watchdog`` that fails only when nothing it
        depends on has moved for ``STALL_S``, so a machine that is several times
        slower plays the same story, just slower.
        """
        scenario = self.options.scenario
        research = [j for j in scenario.jobs if not j.burst]
        burst = sorted((j for j in scenario.jobs if j.burst), key=lambda j: j.delay_s)
        self.phase = "research fills the cluster"
        now = time.time()
        for plan in research:
            cluster.submit(plan, now)

        # Past the policy's cooldown (which spares freshly started jobs), and with a checkpoint
        # reported by every research job, in the demo's view and in the decider's: a trainer
        # that never checkpointed would lose all the work since its start, which on a slow
        # machine (torch starting slowly) made the 16-GPU gang the planner's cheapest victim
        # instead of the torch jobs.
        settled_s = demo_policy(scenario.grace_s).cooldown_s + 1.0

        def settled_(plan: JobPlan) -> bool:
            return settled(
                cluster.job(plan.key), self.tally.steps.get(plan.key), time.time(), settled_s
            ) and decider_knows_settled(self._decider_jobs.get(plan.key))

        def startup_missing() -> str:
            parts = [
                f"{p.key} ({self._job_state(cluster, p.key)}; the decider "
                + (
                    "knows it settled"
                    if decider_knows_settled(self._decider_jobs.get(p.key))
                    else "does not know it settled yet"
                )
                + ")"
                for p in research
                if not settled_(p)
            ]
            if not self._worker_ready():
                parts.append("the worker (not ready)")
            if not self._agents_ready():
                parts.append("the node agents (not ready)")
            return "; ".join(parts)

        await self._until(
            lambda: (
                all(settled_(p) for p in research) and self._worker_ready() and self._agents_ready()
            ),
            "the research jobs, the worker and the node agents to start",
            progress=lambda: (
                self._story_state(cluster),
                self._worker_ready(),
                self._agents_ready(),
                self._steps(p.key for p in research),
                tuple(decider_knows_settled(self._decider_jobs.get(p.key)) for p in research),
            ),
            missing=startup_missing,
        )
        self.phase = "a burst of production fine-tunes arrives"
        self.tally.line("production burst: " + ", ".join(j.key for j in burst), time.time())

        # One after another, each once the decider has answered the one before (within a
        # second on an idle machine: a burst). The decider then sees the demands in the
        # scenario's order on any machine, not in an order set by how fast it ran.
        started = time.monotonic()
        for previous, plan in zip([None, *burst], burst, strict=False):
            if previous is not None:
                await self._until(
                    functools.partial(self._answered, cluster, previous.key),
                    f"the decider to answer {previous.key}",
                    progress=lambda: self._story_state(cluster),
                    missing=functools.partial(self._job_state, cluster, previous.key),
                )
            await asyncio.sleep(max(0.0, started + plan.delay_s - time.monotonic()))
            cluster.submit(plan, time.time())

        await self._until(
            lambda: all(placed(cluster.job(j.key)) for j in burst),
            "the production fine-tunes to be placed",
            progress=lambda: self._story_state(cluster),
            missing=lambda: "; ".join(
                f"{j.key} ({self._job_state(cluster, j.key)})"
                for j in burst
                if not placed(cluster.job(j.key))
            ),
        )
        self.phase = "the fine-tunes run; research waits, suspended"

        await self._until(
            lambda: all(finished(cluster.job(j.key)) for j in burst),
            "the production fine-tunes to finish",
            progress=lambda: (self._story_state(cluster), self._steps(j.key for j in burst)),
            missing=lambda: "; ".join(
                f"{j.key} ({self._job_state(cluster, j.key)})"
                for j in burst
                if not finished(cluster.job(j.key))
            ),
        )
        self.phase = "capacity returns: suspended research resumes"

        await self._until_resumed(cluster, "the suspended research jobs to resume")
        self.phase = "done"

    # -- what the waits look at --------------------------------------------------------------

    def _story_state(self, cluster: SimCluster) -> Hashable:
        """Everything that changes when the story moves: jobs, pods, messages on the topics.

        Trainers' steps are left out on purpose: research that keeps training
        while a suspended gang waits forever is not progress of the story.
        """
        tally = self.tally
        jobs = tuple(
            (
                j.key,
                j.phase.value,
                j.incarnation,
                j.suspensions,
                j.resumes,
                tuple((p.index, p.node, p.phase, p.running) for p in j.pods.values()),
            )
            for j in cluster.jobs()
        )
        return (
            jobs,
            tally.decisions,
            tally.yield_commands,
            tally.resume_commands,
            tuple(sorted(tally.outcomes.items())),
            len(tally.resumed_steps),
            len(tally.alerts),
        )

    def _steps(self, keys: Iterable[str]) -> Hashable:
        return tuple((k, s.step, s.checkpoint_step) for k in keys if (s := self.tally.steps.get(k)))

    def _job_state(self, cluster: SimCluster, key: str) -> str:
        job = cluster.job(key)
        if job is None:
            return "not submitted"
        placed = sum(1 for p in job.pods.values() if p.node is not None)
        parts = [job.phase.value, f"{placed}/{job.plan.pods} pods placed"]
        if job.suspensions:
            parts.append(f"suspended {job.suspensions}x, resumed {job.resumes}x")
        seen = self.tally.steps.get(key)
        if seen is None:
            parts.append("no heartbeat yet")
        else:
            parts.append(
                f"step {seen.step}, "
                + (
                    "no checkpoint"
                    if seen.checkpoint_step is None
                    else f"checkpoint {seen.checkpoint_step}"
                )
            )
        return ", ".join(parts)

    def _answered(self, cluster: SimCluster, key: str) -> bool:
        """The decider made room for ``key``, said it cannot, or it needed none (it was placed)."""
        return (
            key in self.tally.yield_demands
            or placed(cluster.job(key))
            or any(a.job == key for a in self.tally.alerts)
        )

    def _agents_ready(self) -> bool:
        return self._agents is not None and self._agents.ready

    async def _until_resumed(self, cluster: SimCluster, what: str) -> None:
        """Wait until every job the story evicted has resumed, naming those that have not."""
        await self._until(
            lambda: all(resumed(job, self.tally) for job in cluster.jobs()),
            what,
            progress=lambda: self._story_state(cluster),
            missing=lambda: "; ".join(
                f"{job.key} ({self._job_state(cluster, job.key)})"
                for job in cluster.jobs()
                if not resumed(job, self.tally)
            ),
        )

    async def _until(
        self,
        condition: Callable[[], bool],
        what: str,
        *,
        progress: Callable[[], Hashable],
        missing: Callable[[], str],
    ) -> None:
        """Wait for ``condition``; fail when nothing moves (``STALL_S``) or a part died."""
        watchdog = Watchdog(STALL_S, self._started + RUN_LIMIT_S)
        while not condition():
            for task in self._background:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    error = task.exception()
                    if isinstance(error, DemoError):
                        raise error
                    raise DemoError(f"{task.get_name()} failed: {error!r}") from error
            if self._agents is not None and (failed := self._agents.failed()) is not None:
                raise DemoError(f"a node agent failed: {failed!r}")
            why = watchdog.observe(progress(), time.monotonic())
            if why is not None:
                alerts = "; ".join(f"{a.kind.value}: {a.message}" for a in self.tally.alerts[-3:])
                raise DemoError(
                    f"gave up waiting for {what} after {time.monotonic() - self._started:.0f} s "
                    f"({why}); still waiting on: {missing() or '?'}"
                    + (f"; alerts: {alerts}" if alerts else "")
                )
            await asyncio.sleep(0.1)
