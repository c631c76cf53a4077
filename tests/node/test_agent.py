"""The agent's intake: dead letters, other nodes' commands, redeliveries, recovery after a crash."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis

from gpuyield.agents.node.agent import NodeAgent
from gpuyield.agents.node.executor import ExecutorSettings, YieldExecutor
from gpuyield.agents.node.gpus import FixedGpuCounter
from gpuyield.agents.node.ledger import Ledger
from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.agents.node.records import Phase
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import DeadLetter, YieldCommand, YieldOutcome
from node.node_fakes import (
    FakeAcks,
    FakeClock,
    FakePods,
    FakeSuspender,
    trainer_that_checkpoints,
    yield_command,
)

POD = PodRef("team", "train-0")
JOB = "team/train"


@dataclass
class Message:
    value: bytes | None
    offset: int = 0
    topic: str = "gpuyield.yield-commands"
    partition: int = 3
    key: bytes | None = b"node-a"


@dataclass
class Node:
    redis: Redis
    prefix: str
    clock: FakeClock = field(default_factory=FakeClock)
    pods: FakePods = field(default_factory=lambda: FakePods(running={POD}))
    board: ProgressBoard = field(default_factory=ProgressBoard)
    suspender: FakeSuspender = field(default_factory=FakeSuspender)
    acks: FakeAcks = field(default_factory=FakeAcks)
    letters: list[DeadLetter] = field(default_factory=list)

    def agent(self, *, stalled: bool = False) -> NodeAgent:
        """A fresh agent process on this node (same Redis, same pods).

        A ``stalled`` agent's sleeps never end: it stays in whatever wait it reaches.
        """

        async def never(seconds: float) -> None:
            await asyncio.Event().wait()

        ledger = Ledger(self.redis, "node-a", prefix=self.prefix)
        executor = YieldExecutor(
            ledger=ledger,
            signaller=self.pods,
            suspender=self.suspender,
            gpus=FixedGpuCounter(1),
            board=self.board,
            acks=self.acks,
            settings=ExecutorSettings(settle_s=1, poll_s=0.5),
            clock=self.clock,
            sleep=never if stalled else self.clock.sleep,
        )

        async def dead_letter(letter: DeadLetter) -> None:
            self.letters.append(letter)

        return NodeAgent(
            "node-a", ledger=ledger, executor=executor, dead_letters=dead_letter, clock=self.clock
        )


@pytest.fixture
async def node(redis_url: str, redis_prefix: str) -> AsyncIterator[Node]:
    redis = Redis.from_url(redis_url)
    yield Node(redis, redis_prefix.rstrip(":"))
    await redis.aclose()


def message(command: YieldCommand, offset: int = 0) -> Message:
    return Message(encode(command), offset=offset)


async def test_malformed_bytes_go_to_dead_letters_and_the_agent_goes_on(node: Node) -> None:
    agent = node.agent()
    node.pods.on_signal = trainer_that_checkpoints(node.pods, node.board, node.clock, JOB, 7)
    garbage = b"\x00not json{"
    await agent.handle(Message(garbage, offset=41))
    await agent.handle(Message(b'{"v": 1, "command_id": "x"}', offset=42))
    await agent.handle(message(yield_command(now=node.clock()), offset=43))
    await agent.wait_idle()

    assert [letter.offset for letter in node.letters] == [41, 42]
    first = node.letters[0]
    assert base64.b64decode(first.value) == garbage
    assert first.source_topic == "gpuyield.yield-commands"
    assert first.reason.startswith("not JSON")
    assert "YieldCommand" in node.letters[1].reason
    assert [a.outcome for a in node.acks.acks] == [YieldOutcome.CHECKPOINTED]


async def test_commands_for_other_nodes_are_skipped(node: Node) -> None:
    agent = node.agent()
    await agent.handle(message(yield_command(node="node-b", now=node.clock())))
    await agent.wait_idle()
    assert node.pods.signals == []
    assert await Ledger(node.redis, "node-b", prefix=node.prefix).get("cmd-1") is None
    assert await Ledger(node.redis, "node-a", prefix=node.prefix).get("cmd-1") is None


async def test_a_redelivered_command_is_executed_once(node: Node) -> None:
    agent = node.agent()
    node.pods.on_signal = trainer_that_checkpoints(node.pods, node.board, node.clock, JOB, 7)
    command = yield_command(now=node.clock())
    await agent.handle(message(command))
    await agent.handle(message(command))  # while it runs
    await agent.wait_idle()
    await agent.handle(message(command))  # after it is done
    await node.agent().handle(message(command))  # to another agent process of the node
    await agent.wait_idle()

    assert len(node.pods.signals) == 1
    assert len(node.acks.acks) == 1
    assert node.suspender.calls == [("suspend", JOB, "cmd-1")]


async def test_a_yield_in_flight_when_the_agent_died_is_finished_by_the_next_one(
    node: Node,
) -> None:
    # The first agent signals a trainer that takes a while, then dies (its tasks vanish).
    first = node.agent(stalled=True)
    await first.accept(yield_command(grace_s=30, now=node.clock()))
    ledger = Ledger(node.redis, "node-a", prefix=node.prefix)
    async with asyncio.timeout(10):
        while (record := await ledger.get("cmd-1")) is None or record.phase is not Phase.SIGNALLED:
            await asyncio.sleep(0.01)
    assert record is not None
    assert record.phase is Phase.SIGNALLED
    await first.close()
    assert node.acks.acks == []
    # The trainer ignores nothing here: it simply never exits, so the next agent kills it.
    second = node.agent()
    recovered = await second.recover()
    assert [r.command_id for r in recovered] == ["cmd-1"]
    await second.accept(yield_command(grace_s=30, now=record.received_at))  # Kafka redelivers it
    await second.wait_idle()

    assert len(node.pods.signals) == 1  # not signalled again
    (ack,) = node.acks.acks
    assert ack.outcome is YieldOutcome.HARD_KILLED
    assert node.clock() >= record.command.deadline
    assert await ledger.in_flight() == []


async def test_yields_of_one_job_run_in_order_and_other_jobs_alongside(node: Node) -> None:
    agent = node.agent()
    other = PodRef("team", "other-0")
    node.pods.running.add(other)
    node.pods.on_signal = lambda pods: node.pods.running.difference_update(pods)
    await agent.accept(yield_command("y-1", now=node.clock()))
    await agent.accept(yield_command("r-1", action="resume", now=node.clock()))
    await agent.accept(yield_command("y-2", job="team/other", pods=("other-0",), now=node.clock()))
    assert agent.running == {"y-1", "r-1", "y-2"}
    await agent.wait_idle()
    order = [(a.command_id, a.outcome) for a in node.acks.acks]
    assert order.index(("y-1", YieldOutcome.EXITED)) < order.index(("r-1", YieldOutcome.RESUMED))
    assert {c for c, _ in order} == {"y-1", "r-1", "y-2"}
