"""One command from record to ack, with fake pods and clock and the real ledger in Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis

from gpuyield.agents.node.executor import ExecutorSettings, YieldExecutor
from gpuyield.agents.node.gpus import FixedGpuCounter
from gpuyield.agents.node.ledger import Ledger
from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.agents.node.records import Phase
from gpuyield.schemas.messages import YieldOutcome
from node.node_fakes import (
    FakeAcks,
    FakeClock,
    FakePods,
    FakeSuspender,
    heartbeat,
    trainer_that_checkpoints,
    yield_command,
)

POD = PodRef("team", "train-0")
JOB = "team/train"


SETTINGS = ExecutorSettings(exit_grace_s=5, settle_s=2, poll_s=0.5, kill_timeout_s=10)


@dataclass
class Rig:
    clock: FakeClock
    pods: FakePods
    board: ProgressBoard
    suspender: FakeSuspender
    acks: FakeAcks
    ledger: Ledger
    executor: YieldExecutor = field(init=False)

    def __post_init__(self) -> None:
        self.executor = self.with_settings(SETTINGS)

    def with_settings(self, settings: ExecutorSettings) -> YieldExecutor:
        """An executor on the same fakes, with other settings."""
        return YieldExecutor(
            ledger=self.ledger,
            signaller=self.pods,
            suspender=self.suspender,
            gpus=FixedGpuCounter(4),
            board=self.board,
            acks=self.acks,
            settings=settings,
            clock=self.clock,
            sleep=self.clock.sleep,
        )


@pytest.fixture
async def rig(redis_url: str, redis_prefix: str) -> AsyncIterator[Rig]:
    redis = Redis.from_url(redis_url)
    clock = FakeClock()
    ledger = Ledger(redis, "node-a", prefix=redis_prefix.rstrip(":"))
    rig = Rig(clock, FakePods(running={POD}), ProgressBoard(), FakeSuspender(), FakeAcks(), ledger)
    yield rig
    await redis.aclose()


async def test_a_trainer_that_checkpoints_yields_checkpointed(rig: Rig) -> None:
    rig.board.record(
        heartbeat(JOB, step=90, sent_at=rig.clock() - 5, ckpt=80, ckpt_at=rig.clock() - 60)
    )
    rig.pods.on_signal = trainer_that_checkpoints(rig.pods, rig.board, rig.clock, JOB, step=97)
    record, new = await rig.ledger.claim(yield_command(), rig.clock())
    assert new

    final = await rig.executor.run(record)

    assert final.phase is Phase.DONE
    assert [grace for _, grace in rig.pods.signals] == [30.0]
    assert rig.pods.kills == []
    (ack,) = rig.acks.acks
    assert ack.outcome is YieldOutcome.CHECKPOINTED
    assert ack.checkpoint_step == 97
    assert ack.gpu_seconds_lost == 0.0
    assert rig.suspender.calls == [("suspend", JOB, "cmd-1")]
    assert final.baseline_checkpoint_step == 80
    assert final.gpus == 4
    assert await rig.ledger.in_flight() == []
    stored = await rig.ledger.get("cmd-1")
    assert stored is not None
    assert stored.ack == ack


async def test_a_trainer_that_ignores_the_signal_is_hard_killed_at_the_deadline(rig: Rig) -> None:
    start = rig.clock()
    rig.board.record(heartbeat(JOB, step=90, sent_at=start - 5, ckpt=80, ckpt_at=start - 60))
    record, _ = await rig.ledger.claim(yield_command(grace_s=30), start)

    await rig.executor.run(record)

    assert rig.pods.kills == [(POD,)]
    (ack,) = rig.acks.acks
    assert ack.outcome is YieldOutcome.HARD_KILLED
    assert ack.checkpoint_step == 80  # where it resumes from
    assert ack.gpu_seconds_lost == pytest.approx(4 * 90, abs=1.0)  # 60 s before + 30 s grace
    assert ack.seconds_taken == pytest.approx(30, abs=1.0)
    assert rig.suspender.calls == [("suspend", JOB, "cmd-1")]


async def test_pods_that_exit_without_a_checkpoint_yield_exited(rig: Rig) -> None:
    rig.board.record(
        heartbeat(JOB, step=90, sent_at=rig.clock() - 5, ckpt=80, ckpt_at=rig.clock() - 10)
    )

    def exit_at_once(pods: object) -> None:
        rig.pods.running.clear()

    rig.pods.on_signal = exit_at_once
    record, _ = await rig.ledger.claim(yield_command(), rig.clock())
    start = rig.clock()

    await rig.executor.run(record)

    (ack,) = rig.acks.acks
    assert ack.outcome is YieldOutcome.EXITED
    assert ack.checkpoint_step == 80
    assert ack.gpu_seconds_lost == pytest.approx(4 * 10, abs=1.0)
    assert rig.clock() - start == pytest.approx(2, abs=1.0)  # the settle time, no more


async def test_a_flaky_api_is_retried_until_the_signal_goes_through(rig: Rig) -> None:
    rig.pods.failures = 2
    rig.pods.on_signal = trainer_that_checkpoints(rig.pods, rig.board, rig.clock, JOB, step=5)
    record, _ = await rig.ledger.claim(yield_command(), rig.clock())
    await rig.executor.run(record)
    assert len(rig.pods.signals) == 1
    assert rig.acks.acks[0].outcome is YieldOutcome.CHECKPOINTED


async def test_a_command_received_long_after_its_deadline_is_not_carried_out(rig: Rig) -> None:
    command = yield_command(now=rig.clock() - 600)
    record, _ = await rig.ledger.claim(command, rig.clock())
    await rig.executor.run(record)
    assert rig.pods.signals == []
    assert rig.suspender.calls == []
    (ack,) = rig.acks.acks
    assert ack.outcome is YieldOutcome.FAILED
    assert "after its deadline" in ack.detail


async def test_resume_resumes_the_job(rig: Rig) -> None:
    record, _ = await rig.ledger.claim(yield_command("r-1", action="resume"), rig.clock())
    await rig.executor.run(record)
    assert rig.suspender.calls == [("resume", JOB, "r-1")]
    assert rig.pods.signals == []
    assert [a.outcome for a in rig.acks.acks] == [YieldOutcome.RESUMED]


async def test_resume_of_a_missing_job_fails_without_retrying(rig: Rig) -> None:
    rig.suspender.missing.add(JOB)
    record, _ = await rig.ledger.claim(yield_command("r-1", action="resume"), rig.clock())
    start = rig.clock()
    await rig.executor.run(record)
    (ack,) = rig.acks.acks
    assert ack.outcome is YieldOutcome.FAILED
    assert "not found" in ack.detail
    assert rig.clock() == start


async def test_a_yield_found_signalled_after_a_crash_is_waited_out_not_signalled_again(
    rig: Rig,
) -> None:
    start = rig.clock()
    record, _ = await rig.ledger.claim(yield_command(), start)
    signalled = record.to(
        Phase.SIGNALLED, signalled_at=start + 1, baseline_checkpoint_step=80, gpus=4
    )
    await rig.ledger.save(signalled)
    # While the agent was down, the trainer checkpointed at step 99 and exited.
    rig.board.record(heartbeat(JOB, step=99, sent_at=start + 3, ckpt=99, ckpt_at=start + 3))
    rig.pods.running.clear()
    rig.clock.now = start + 20

    (recovered,) = await rig.ledger.in_flight()
    await rig.executor.run(recovered)

    assert rig.pods.signals == []
    (ack,) = rig.acks.acks
    assert (ack.outcome, ack.checkpoint_step) == (YieldOutcome.CHECKPOINTED, 99)
    assert ack.seconds_taken == pytest.approx(20, abs=0.5)


async def test_a_yield_found_releasing_after_a_crash_is_suspended_and_acked_with_its_outcome(
    rig: Rig,
) -> None:
    record, _ = await rig.ledger.claim(yield_command(), rig.clock())
    await rig.executor.run(record)
    done = rig.acks.acks.pop()
    # Pretend the process died after deciding, before suspending and acking.
    releasing = record.to(Phase.RELEASING, ack=done, signalled_at=record.received_at)
    await rig.ledger.save(releasing)
    rig.suspender.calls.clear()
    kills_before = len(rig.pods.kills)

    await rig.executor.run(releasing)

    assert rig.suspender.calls == [("suspend", JOB, "cmd-1")]
    assert len(rig.pods.kills) == kills_before
    (ack,) = rig.acks.acks
    assert ack.outcome is done.outcome
    assert await rig.ledger.in_flight() == []


async def test_suspend_first_suspends_before_the_signal_and_not_again(rig: Rig) -> None:
    order: list[str] = []
    executor = rig.with_settings(ExecutorSettings(suspend_first=True, settle_s=1, poll_s=0.5))

    def on_signal(pods: object) -> None:
        order.append(f"signal after {len(rig.suspender.calls)} suspension(s)")
        rig.pods.running.clear()

    rig.pods.on_signal = on_signal
    record, _ = await rig.ledger.claim(yield_command(), rig.clock())
    await executor.run(record)
    assert order == ["signal after 1 suspension(s)"]
    assert rig.suspender.calls == [("suspend", JOB, "cmd-1")]
    assert rig.acks.acks[0].outcome is YieldOutcome.EXITED


async def test_surplus_pods_of_an_elastic_job_yield_without_suspending_the_job(rig: Rig) -> None:
    rig.pods.on_signal = trainer_that_checkpoints(rig.pods, rig.board, rig.clock, JOB, step=97)
    command = yield_command().model_copy(update={"whole_job": False, "gpus": 8})
    record, _ = await rig.ledger.claim(command, rig.clock())

    final = await rig.executor.run(record)

    assert final.gpus == 8  # the controller's count, not the node's guess
    (ack,) = rig.acks.acks
    assert ack.outcome is YieldOutcome.CHECKPOINTED
    assert rig.suspender.calls == []
    assert "keeps running" in ack.detail
