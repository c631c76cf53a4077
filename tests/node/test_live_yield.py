"""The node agent end to end: commands on the real broker, real Redis, real training processes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.service import AgentTopics
from gpuyield.schemas.messages import DeadLetter, Heartbeat, YieldAck, YieldCommand, YieldOutcome
from gpuyield.streams.topics import TopicSpec
from node.live import NODE, ROOT, SESSION_TIMEOUT_S, Live, TopicReader

pytestmark = pytest.mark.slow

JOB = "team/train"
POD = PodRef("team", "train-0")


def command(
    command_id: str, *, grace_s: float = 20.0, action: str = "yield", job: str = JOB
) -> YieldCommand:
    now = time.time()
    return YieldCommand.model_validate(
        {
            "command_id": command_id,
            "decision_id": f"d-{command_id}",
            "action": action,
            "node": NODE,
            "job": job,
            "pods": (POD.name,) if job == JOB else (),
            "grace_s": grace_s,
            "issued_at": now,
            "deadline": now + grace_s,
            "reason": "make room for team/urgent",
        }
    )


@pytest.fixture
async def live(
    kafka_bootstrap: str,
    fresh_topics: dict[str, TopicSpec],
    topic_prefix: str,
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
) -> AsyncIterator[Live]:
    redis = Redis.from_url(redis_url)
    harness = Live(
        kafka_bootstrap,
        AgentTopics.with_prefix(topic_prefix),
        redis,
        redis_prefix.rstrip(":"),
        tmp_path,
    )
    try:
        yield harness
    finally:
        harness.cleanup()
        await redis.aclose()


async def test_the_torch_example_checkpoints_on_the_yield_and_the_ack_names_its_step(
    live: Live, tmp_path: Path
) -> None:
    result = tmp_path / "result.json"
    trainer = live.start(
        [
            str(ROOT / "examples" / "train_tiny.py"),
            "--checkpoint-dir", str(tmp_path / "ck"),
            "--steps", "1000000",
            "--job", JOB,
            "--pod", POD.name,
            "--kafka-bootstrap", live.bootstrap,
            "--kafka-topic", live.topics.heartbeats,
            "--heartbeat-every-steps", "10",
            "--checkpoint-every", "50",
            "--step-sleep", "0.005",
            "--result", str(result),
        ],
        "train_tiny",
    )  # fmt: skip
    await live.registry.register(POD, trainer.pid)
    async with (
        live.agent(),  # starts while torch loads
        TopicReader(live.bootstrap, live.topics.heartbeats, Heartbeat) as beats,
        TopicReader(live.bootstrap, live.topics.acks, YieldAck) as acks,
    ):
        await beats.wait_for(
            lambda b: b.last_checkpoint_step is not None, 60, "a periodic checkpoint"
        )
        await live.send(live.topics.commands, command("c-torch"))
        ack = await acks.wait_for(lambda a: a.command_id == "c-torch", 40, "the ack")

    assert trainer.wait(10) == 0, live.log("train_tiny")
    yielded = json.loads(result.read_text())
    assert yielded["status"] == "yielded"
    assert ack.outcome is YieldOutcome.CHECKPOINTED, ack
    assert ack.checkpoint_step == yielded["step"]
    assert ack.gpu_seconds_lost == 0.0
    assert ack.job == JOB
    assert (await live.suspender.state(JOB) or {}).get("state") == "suspended"


async def test_a_trainer_that_ignores_sigterm_is_hard_killed_at_the_deadline(live: Live) -> None:
    starting = asyncio.create_task(live.toy_trainer(POD, JOB, "--ignore-sigterm"))
    async with live.agent(), TopicReader(live.bootstrap, live.topics.acks, YieldAck) as acks:
        trainer, _ = await starting
        sent = time.time()
        await live.send(live.topics.commands, command("c-stubborn", grace_s=1.5))
        ack = await acks.wait_for(lambda a: a.command_id == "c-stubborn", 30, "the ack")

    assert trainer.wait(5) == -signal.SIGKILL
    assert ack.outcome is YieldOutcome.HARD_KILLED, ack
    assert ack.checkpoint_step == 5  # the periodic one: where the job resumes
    assert ack.gpu_seconds_lost > 0  # 2 GPUs since step 5
    assert ack.acked_at - sent >= 1.5


async def test_a_redelivered_command_is_executed_once_and_bad_bytes_are_dead_lettered(
    live: Live,
) -> None:
    starting = asyncio.create_task(live.toy_trainer(POD, JOB))
    signaller = live.local_signaller()
    garbage = b"\xff\xfe not a command"
    yield_it = command("c-once")
    async with (
        live.agent(signaller),
        TopicReader(live.bootstrap, live.topics.acks, YieldAck) as acks,
        TopicReader(live.bootstrap, live.topics.dead_letters, DeadLetter) as letters,
    ):
        trainer, checkpoint = await starting
        await live.send(live.topics.commands, yield_it)
        await live.send(live.topics.commands, garbage)
        await live.send(
            live.topics.commands, yield_it
        )  # Kafka redelivers, or the controller repeats
        # A later command on the same partition: once it is acked, everything before it was read.
        await live.send(live.topics.commands, command("c-after", action="resume", job="team/other"))
        await acks.wait_for(lambda a: a.command_id == "c-after", 30, "the later command's ack")
        await acks.wait_for(lambda a: a.command_id == "c-once", 30, "the yield's ack")
        letter = await letters.wait_for(lambda d: True, 10, "the dead letter")

    assert len(signaller.signals) == 1
    assert [a.command_id for a in acks.items].count("c-once") == 1
    (ack,) = [a for a in acks.items if a.command_id == "c-once"]
    assert ack.outcome is YieldOutcome.CHECKPOINTED
    assert ack.checkpoint_step == json.loads(checkpoint.read_text())["step"]
    assert trainer.wait(5) == 0
    assert base64.b64decode(letter.value) == garbage
    assert letter.source_topic == live.topics.commands
    assert letter.reason.startswith("not JSON")


async def test_a_node_agent_killed_mid_yield_finishes_it_after_restart(
    live: Live, redis_url: str, topic_prefix: str, tmp_path: Path
) -> None:
    """The real CLI, SIGKILLed once it has signalled; the trainer saves slowly meanwhile."""
    env = {
        "GPUYIELD_KAFKA_BOOTSTRAP": live.bootstrap,
        "GPUYIELD_REDIS_URL": redis_url,
        "GPUYIELD_TOPIC_PREFIX": topic_prefix,
        "GPUYIELD_KAFKA_PROFILE": "tansu",
        "GPUYIELD_KAFKA_SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S),
        "GPUYIELD_STATE_DIR": str(tmp_path / "state"),
    }
    args = [
        "-m", "gpuyield", "node-agent",
        "--node", NODE,
        "--signaller", "local",
        "--redis-prefix", live.redis_prefix,
    ]  # fmt: skip
    first = live.start(args, "agent-1", env)
    trainer, checkpoint = await live.toy_trainer(POD, JOB, "--save-delay", "2")
    record_key = f"{live.redis_prefix}:node:{NODE}:cmd:c-crash"

    async def phase() -> str | None:
        raw = await live.redis.get(record_key)
        return None if raw is None else str(json.loads(raw)["phase"])

    async with TopicReader(live.bootstrap, live.topics.acks, YieldAck) as acks:
        await live.send(live.topics.commands, command("c-crash"))
        async with asyncio.timeout(30):
            while await phase() != "signalled":
                assert first.poll() is None, live.log("agent-1")
                await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        assert first.wait(5) == -signal.SIGKILL
        assert acks.items == []

        second = live.start(args, "agent-2", env)
        try:
            ack = await acks.wait_for(lambda a: a.command_id == "c-crash", 40, "the ack")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{live.log('agent-1')}\n{live.log('agent-2')}") from None
        async with asyncio.timeout(10):
            while await phase() != "done":
                await asyncio.sleep(0.05)
        second.send_signal(signal.SIGTERM)
        with contextlib.suppress(Exception):
            await acks.wait_for(lambda a: a.command_id != "c-crash", 0.5, "nothing more")
        assert second.wait(20) == 0, live.log("agent-2")

    assert ack.outcome is YieldOutcome.CHECKPOINTED, (ack, live.log("agent-2"))
    assert ack.checkpoint_step == json.loads(checkpoint.read_text())["step"]
    assert [a.command_id for a in acks.items] == ["c-crash"]
    assert trainer.wait(5) == 0
