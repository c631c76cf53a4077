"""The demo from start to end: services, worker, node agents, the simulated cluster, the story.

``Demo.run`` starts everything (the embedded Tansu broker and Valkey, always:
the demo publishes a made-up cluster and must never reach a real
deployment's topics), plays the story of ``scenario`` phase by phase, each
phase ending on a condition with a deadline (never a fixed sleep), and stops
everything in order, whatever happened: the simulated cluster first, then the
pods (SIGTERM: they checkpoint), the node agents, the topic reader, the
worker, and last the broker and Redis. ``view`` is what the terminal shows
while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from gpuyield.agents.demo.children import Children, child_env, python
from gpuyield.agents.demo.cluster import JobPhase, JobRow, SimCluster
from gpuyield.agents.demo.nodes import NodeAgents, PodGpus
from gpuyield.agents.demo.pods import PodLauncher
from gpuyield.agents.demo.reservations import ReservationFeed
from gpuyield.agents.demo.scenario import DemoScenario, Runner
from gpuyield.agents.demo.tally import Tally, TallyReader
from gpuyield.agents.demo.timing import demo_policy
from gpuyield.agents.node.local_signaller import LocalPodRegistry
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import KubeEvent
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedRedis
from gpuyield.streams.topics import HEARTBEATS, KUBE_EVENTS, ensure_topics, registry

log = logging.getLogger(__name__)

REDIS_PREFIX = "gpuyield-demo"
APP_ID = "gpuyield-demo"
CLUSTER_ID = "demo"
PARTITIONS = 4  # of the keyed topics: enough for four nodes, light on one machine
LOOP_S = 0.2  # how often the simulated cluster looks at its processes and Redis

STARTUP_TIMEOUT_S = 120.0  # the worker, the agents and the research pods (torch loads slowly)
PLACEMENT_TIMEOUT_S = 90.0  # from the burst to every fine-tune running
RESUME_TIMEOUT_S = 120.0  # from the fine-tunes' end to every suspended job running again


class DemoError(RuntimeError):
    """The demo could not go on; the message is one line (the CLI adds where the logs are)."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    scenario: DemoScenario
    workdir: Path
    train_tiny: Path | None
    """examples/train_tiny.py, or None: torch pods run stand-ins."""


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
        self._start_worker(bootstrap, redis_url)
        redis = Redis.from_url(redis_url)
        producer = AIOKafkaProducer(**kafka, acks="all", max_batch_size=1)
        reader = TallyReader(self.tally, kafka=kafka)
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

        cluster = SimCluster(scenario, launcher, publish, reservations)
        self._cluster = cluster
        agents = NodeAgents(
            [n.name for n in scenario.nodes],
            kafka=kafka,
            redis=redis,
            redis_prefix=REDIS_PREFIX,
            gpus=PodGpus(cluster.pod_gpus),
        )
        self._agents = agents
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

    def _start_worker(self, bootstrap: str, redis_url: str) -> None:
        workdir = self.options.workdir
        env = child_env(
            {
                "GPUYIELD_KAFKA_BOOTSTRAP": bootstrap,
                "GPUYIELD_KAFKA_PROFILE": "tansu",
                "GPUYIELD_REDIS_URL": redis_url,
                "GPUYIELD_STATE_DIR": str(workdir / "worker"),
                "GPUYIELD_APP_ID": APP_ID,
                "GPUYIELD_CLUSTER_ID": CLUSTER_ID,
                "GPUYIELD_TOPIC_PREFIX": "",
                "GPUYIELD_TOPIC_PARTITIONS": str(PARTITIONS),
                "GPUYIELD_GRACE_S": str(self.options.scenario.grace_s),
            }
        )
        env.pop("GPUYIELD_CONFIG", None)  # a user's settings file must not redirect the demo
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

    # -- the simulated cluster's loop -----------------------------------------------------------

    async def _cluster_loop(self, cluster: SimCluster, redis: Redis, stop: asyncio.Event) -> None:
        key = f"{REDIS_PREFIX}:local-jobs"
        while not stop.is_set():
            raw = await cast("Any", redis.hgetall(key))
            records = {k.decode(): json.loads(v) for k, v in raw.items()}
            await cluster.tick(time.time(), records)
            worker = self._children.get("worker")
            if worker is None or worker.poll() is not None:
                raise DemoError(
                    f"the worker exited with status {worker.returncode if worker else '?'}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), LOOP_S)

    # -- the story -------------------------------------------------------------------------------

    async def _story(self, cluster: SimCluster) -> None:
        scenario = self.options.scenario
        research = [j for j in scenario.jobs if not j.burst]
        burst = sorted((j for j in scenario.jobs if j.burst), key=lambda j: j.delay_s)
        self.phase = "research fills the cluster"
        now = time.time()
        for plan in research:
            cluster.submit(plan, now)

        # Past the policy's cooldown (which spares freshly started jobs), with a heartbeat
        # each: the worker knows what every research job would lose by yielding.
        settled_s = demo_policy(scenario.grace_s).cooldown_s + 1.0

        def research_running() -> bool:
            return all(
                (job := cluster.job(p.key)) is not None
                and job.phase is JobPhase.RUNNING
                and job.placed_at is not None
                and time.time() - job.placed_at >= settled_s
                and p.key in self.tally.steps
                for p in research
            )

        await self._until(
            lambda: research_running() and self._worker_ready() and self._agents_ready(),
            STARTUP_TIMEOUT_S,
            "the research jobs, the worker and the node agents to start",
        )
        self.phase = "a burst of production fine-tunes arrives"
        self.tally.line("production burst: " + ", ".join(j.key for j in burst), time.time())
        started = time.monotonic()
        for plan in burst:
            await asyncio.sleep(max(0.0, started + plan.delay_s - time.monotonic()))
            cluster.submit(plan, time.time())

        def placed(key: str) -> bool:
            job = cluster.job(key)
            return job is not None and (
                job.phase is JobPhase.COMPLETED
                or (
                    job.phase is JobPhase.RUNNING
                    and bool(job.pods)
                    and all(p.running or p.completed for p in job.pods.values())
                )
            )

        await self._until(
            lambda: all(placed(j.key) for j in burst),
            PLACEMENT_TIMEOUT_S,
            "the production fine-tunes to be placed",
        )
        self.phase = "the fine-tunes run; research waits, suspended"
        longest = max((j.run_s for j in burst), default=0.0)
        await self._until(
            lambda: all(
                (job := cluster.job(j.key)) is not None and job.phase is JobPhase.COMPLETED
                for j in burst
            ),
            longest + PLACEMENT_TIMEOUT_S,
            "the production fine-tunes to finish",
        )
        self.phase = "capacity returns: suspended research resumes"

        def resumed() -> bool:
            for job in cluster.jobs():
                if job.suspensions == 0:
                    continue
                if job.phase is not JobPhase.RUNNING or job.resumes < job.suspensions:
                    return False
                if job.key not in self.tally.resumed_steps:
                    return False
            return True

        await self._until(resumed, RESUME_TIMEOUT_S, "the suspended research jobs to resume")
        self.phase = "done"

    def _agents_ready(self) -> bool:
        return self._agents is not None and self._agents.ready

    async def _until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait for ``condition``, failing fast when a background part died."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            for task in self._background:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    error = task.exception()
                    if isinstance(error, DemoError):
                        raise error
                    raise DemoError(f"{task.get_name()} failed: {error!r}") from error
            if self._agents is not None and (failed := self._agents.failed()) is not None:
                raise DemoError(f"a node agent failed: {failed!r}")
            if time.monotonic() > deadline:
                raise DemoError(f"waited {timeout_s:.0f} s for {what}")
            await asyncio.sleep(0.1)
