"""The whole path of a yield, with every part real and nothing in between simulated.

``gpuyield worker`` (stock settings), ``gpuyield node-agent`` (local
signaller and suspender), a torch trainer (``examples/train_tiny.py``), the
session's broker and Redis. The test plays the API server and Volcano by
publishing the watch events a cluster would send:

yield command on Kafka -> node agent -> SIGTERM -> emergency checkpoint ->
ack -> job suspended -> capacity returns -> resume command -> the trainer
restarts from the step its ack reported and ends bit-identical to a run that
was never interrupted.

Event time runs ahead of the wall clock once, by an hour, when production
finishes: the decider's clock is its input's time, and the stock resume
backoff (five minutes after an eviction) is not worth waiting out in a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from node.live import TopicReader
from redis.asyncio import Redis
from trainer.runner import Run
from trainer.runner import start as start_trainer

from gpuyield.agents.demo import objects
from gpuyield.agents.node.local_signaller import LocalPodRegistry
from gpuyield.agents.node.suspenders import LocalJobSuspender
from gpuyield.schemas.messages import (
    CommandAction,
    Decision,
    Heartbeat,
    KubeEventType,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)
from gpuyield.streams.topics import TopicSpec

sys.path.insert(0, str(Path(__file__).parents[1] / "worker"))
from live_worker import LiveWorker, publish

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")
NODE = "gpu-00"
STEPS = 1500
GPU = 8


@dataclass
class Kube:
    """Publishes watch events for the objects the test creates, as ``gpuyield watch`` would."""

    bootstrap: str
    topic: str
    version: int = 0

    async def send(self, *changes: tuple[dict[str, Any], KubeEventType], at: float) -> None:
        events = []
        for obj, kind in changes:
            self.version += 1
            events.append(objects.event(obj, at, kind, self.version))
        await publish(self.bootstrap, self.topic, [(e.key, e) for e in events])


def job(
    namespace: str, name: str, *, queue: str, priority: int, node: str | None, phase: str,
    group_phase: str, at: float, unschedulable: bool = False,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:  # fmt: skip
    """A one-pod Volcano Job: (Job, Pod, PodGroup)."""
    klass = f"{queue}-class"
    uid = f"u-{name}"
    return (
        objects.volcano_job(
            namespace, name, uid=uid, queue=queue, priority_class=klass, replicas=1,
            gpus_per_pod=GPU, min_available=1, created_at=at, phase=phase,
            running=1 if node else 0,
        ),
        objects.pod(
            namespace, name, 0, uid=f"{uid}-0", job_uid=uid, queue=queue, priority_class=klass,
            priority=priority, gpus=GPU, node=node, phase="Running" if node else "Pending",
            started_at=at if node else None,
        ),
        objects.pod_group(
            namespace, name, job_uid=uid, queue=queue, priority_class=klass, min_member=1,
            created_at=at, phase=group_phase, unschedulable=unschedulable,
        ),
    )  # fmt: skip


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_a_yield_checkpoints_suspends_and_resumes_from_the_acked_step(
    kafka_bootstrap: str,
    fresh_topics: dict[str, TopicSpec],
    topic_prefix: str,
    redis_url: str,
    redis_prefix: str,
    redis: Redis,
    tmp_path: Path,
) -> None:
    prefix = redis_prefix.rstrip(":")
    topic = {name: spec.name for name, spec in fresh_topics.items()}
    kube = Kube(kafka_bootstrap, topic["gpuyield.kube-events"])
    # "An hour later" is event time, not the workers' ticks: the clock's skew bound is
    # opened to let the watch's events carry it (this test is about the yield's path).
    worker = LiveWorker(
        kafka_bootstrap,
        redis_url,
        topic_prefix,
        f"gy-{secrets.token_hex(4)}",
        f"c-{secrets.token_hex(4)}",
        tmp_path,
        env={"GPUYIELD_MAX_CLOCK_SKEW_S": str(2 * 3600)},
    ).start()
    agent_log = (tmp_path / "node-agent.log").open("wb")
    agent = subprocess.Popen(
        [
            GPUYIELD, "node-agent", "--node", NODE, "--signaller", "local",
            "--suspender", "local", "--redis-prefix", prefix, "--gpus-per-pod", str(GPU),
        ],
        stdout=agent_log,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "GPUYIELD_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "GPUYIELD_KAFKA_PROFILE": "tansu",
            "GPUYIELD_KAFKA_SESSION_TIMEOUT_S": "3",
            "GPUYIELD_REDIS_URL": redis_url,
            "GPUYIELD_TOPIC_PREFIX": topic_prefix,
            "GPUYIELD_STATE_DIR": str(tmp_path / "agent-state"),
        },
    )  # fmt: skip
    agent_log.close()
    checkpoints = tmp_path / "ck"
    common = ["--steps", str(STEPS), "--seed", "7"]
    trainer_args = [
        "--checkpoint-dir", str(checkpoints), "--job", "research/tiny",
        "--pod", "tiny-worker-0", "--kafka-bootstrap", kafka_bootstrap,
        "--kafka-topic", topic["gpuyield.heartbeats"], "--heartbeat-every-steps", "10",
        "--checkpoint-every", "50", *common,
    ]  # fmt: skip
    first = start_trainer(
        tmp_path,
        "first",
        [*trainer_args, "--step-sleep", "0.02", "--result", str(tmp_path / "first.json")],
    )
    reference = start_trainer(
        tmp_path,
        "reference",
        [
            "--checkpoint-dir",
            str(tmp_path / "ref"),
            *common,
            "--result",
            str(tmp_path / "ref.json"),
        ],
    )
    runs: list[Run] = [first, reference]
    registry = LocalPodRegistry(redis, prefix=prefix)
    suspender = LocalJobSuspender(redis, prefix=prefix)
    await registry.register("research/tiny-worker-0", first.process.pid)
    try:
        now = time.time()
        start_at = now - 2 * 3600  # research has run two hours: past any cooldown
        research = job(
            "research", "tiny", queue="research", priority=100, node=NODE, phase="Running",
            group_phase="Running", at=start_at,
        )  # fmt: skip
        await kube.send(
            (objects.node(NODE, GPU, rack="rack-a"), KubeEventType.ADDED),
            (
                objects.queue(
                    "production", weight=4, guarantee=GPU, capability=GPU, reclaimable=False
                ),
                KubeEventType.ADDED,
            ),
            (
                objects.queue("research", weight=1, guarantee=0, capability=GPU, reclaimable=True),
                KubeEventType.ADDED,
            ),
            *((obj, KubeEventType.ADDED) for obj in research),
            at=now,
        )
        async with (
            TopicReader(kafka_bootstrap, topic["gpuyield.heartbeats"], Heartbeat) as beats,
            TopicReader(kafka_bootstrap, topic["gpuyield.yield-acks"], YieldAck) as acks,
            TopicReader(kafka_bootstrap, topic["gpuyield.yield-commands"], YieldCommand) as cmds,
            TopicReader(kafka_bootstrap, topic["gpuyield.decisions"], Decision) as decisions,
        ):
            await beats.wait_for(
                lambda b: b.last_checkpoint_step is not None, 90, "a periodic checkpoint"
            )
            await asyncio.to_thread(worker.wait_ready, 90)

            # A production fine-tune Volcano cannot place: the research job must yield.
            demand_at = time.time()
            production = job(
                "prod", "ft", queue="production", priority=1000, node=None, phase="Pending",
                group_phase="Inqueue", at=demand_at, unschedulable=True,
            )  # fmt: skip
            await kube.send(*((obj, KubeEventType.ADDED) for obj in production), at=demand_at)
            decision = await decisions.wait_for(lambda d: bool(d.commands), 60, "the decision")
            assert decision.demand == "prod/ft", worker.tail()
            assert [v.job for v in decision.plan.victims] == ["research/tiny"]
            command = await cmds.wait_for(
                lambda c: c.action is CommandAction.YIELD, 10, "the yield command"
            )
            assert (command.node, command.pods) == (NODE, ("tiny-worker-0",))
            ack = await acks.wait_for(
                lambda a: a.command_id == command.command_id, 60, "the yield's ack"
            )
            assert first.wait(30) == 0, first.output()
            yielded = json.loads((tmp_path / "first.json").read_text())
            assert ack.outcome is YieldOutcome.CHECKPOINTED, ack
            assert yielded["status"] == "yielded"
            assert ack.checkpoint_step == yielded["step"] < STEPS
            assert ack.gpu_seconds_lost == 0.0
            assert (await suspender.state("research/tiny") or {}).get("state") == "suspended"

            # Volcano: AbortJob deletes the pod; the fine-tune gets the node and runs.
            placed_at = time.time()
            pod_obj = research[1]
            aborted = job(
                "research", "tiny", queue="research", priority=100, node=None, phase="Aborted",
                group_phase="Pending", at=start_at,
            )  # fmt: skip
            running = job(
                "prod", "ft", queue="production", priority=1000, node=NODE, phase="Running",
                group_phase="Running", at=placed_at,
            )  # fmt: skip
            await kube.send(
                (pod_obj, KubeEventType.DELETED),
                (aborted[0], KubeEventType.MODIFIED),
                (aborted[2], KubeEventType.MODIFIED),
                *((obj, KubeEventType.MODIFIED) for obj in running),
                at=placed_at,
            )
            # An hour later (event time) the fine-tune is done and gone: capacity returns.
            later = placed_at + 3600
            await kube.send(
                (running[1], KubeEventType.DELETED),
                (running[2], KubeEventType.DELETED),
                (running[0], KubeEventType.DELETED),
                at=later,
            )
            resume = await cmds.wait_for(
                lambda c: c.action is CommandAction.RESUME, 60, "the resume command"
            )
            assert (resume.job, resume.node) == ("research/tiny", NODE), worker.tail()
            resumed = await acks.wait_for(
                lambda a: a.command_id == resume.command_id, 30, "the resume's ack"
            )
            assert resumed.outcome is YieldOutcome.RESUMED
            assert (await suspender.state("research/tiny") or {}).get("state") == "resumed"

            # Volcano: ResumeJob recreates the pod; the trainer starts from its checkpoint.
            second = start_trainer(
                tmp_path, "second", [*trainer_args, "--result", str(tmp_path / "second.json")]
            )
            runs.append(second)
            await registry.register("research/tiny-worker-0", second.process.pid)
            assert second.wait(90) == 0, second.output()
            restart = await beats.wait_for(
                lambda b: b.sent_at > resumed.acked_at, 30, "the resumed trainer's first heartbeat"
            )
            assert restart.step == ack.checkpoint_step

        assert reference.wait(90) == 0, reference.output()
        finished = json.loads((tmp_path / "second.json").read_text())
        uninterrupted = json.loads((tmp_path / "ref.json").read_text())
        assert finished["status"] == "completed"
        assert finished["started_at"] == ack.checkpoint_step
        assert finished["step"] == uninterrupted["step"] == STEPS
        assert finished["sha256"] == uninterrupted["sha256"]
    finally:
        for run in runs:
            run.kill()
        stop(agent)
        worker.stop()
