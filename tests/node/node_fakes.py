"""In-memory stand-ins for the node agent's outside world, and a clock tests move by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.agents.node.suspenders import JobGone
from gpuyield.schemas.messages import Heartbeat, YieldAck, YieldCommand

T0 = 1_800_000_000.0


class FakeClock:
    """Unix time that only moves when slept through (or set)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)


@dataclass
class FakePods:
    """Pods that are processes in name only; ``on_signal`` plays the trainer."""

    running: set[PodRef] = field(default_factory=set)
    signals: list[tuple[tuple[PodRef, ...], float]] = field(default_factory=list)
    kills: list[tuple[PodRef, ...]] = field(default_factory=list)
    on_signal: Callable[[Sequence[PodRef]], None] | None = None
    failures: int = 0  # the next calls that raise, as a flaky API would

    def _maybe_fail(self) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("API server unavailable")

    async def signal(self, pods: Sequence[PodRef], grace_s: float) -> None:
        self._maybe_fail()
        self.signals.append((tuple(pods), grace_s))
        if self.on_signal is not None:
            self.on_signal(pods)

    async def alive(self, pods: Sequence[PodRef]) -> bool:
        return any(p in self.running for p in pods)

    async def kill(self, pods: Sequence[PodRef]) -> None:
        self.kills.append(tuple(pods))
        self.running.difference_update(pods)


@dataclass
class FakeSuspender:
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, job, command id)
    missing: set[str] = field(default_factory=set)

    async def suspend(self, job: str, *, command_id: str, reason: str) -> None:
        self.calls.append(("suspend", job, command_id))

    async def resume(self, job: str, *, command_id: str) -> None:
        if job in self.missing:
            raise JobGone(f"Volcano Job {job} not found")
        self.calls.append(("resume", job, command_id))


@dataclass
class FakeAcks:
    acks: list[YieldAck] = field(default_factory=list)

    async def publish(self, ack: YieldAck) -> None:
        self.acks.append(ack)


def heartbeat(
    job: str, *, step: int, sent_at: float, ckpt: int | None = None, ckpt_at: float | None = None
) -> Heartbeat:
    return Heartbeat(
        job=job,
        pod="train-0",
        step=step,
        progress=0.5,
        last_checkpoint_step=ckpt,
        last_checkpoint_at=ckpt_at,
        sent_at=sent_at,
    )


def trainer_that_checkpoints(
    pods: FakePods, board: ProgressBoard, clock: FakeClock, job: str, step: int
) -> Callable[[Sequence[PodRef]], None]:
    """On SIGTERM: save at ``step``, report it, exit (as the trainer SDK does)."""

    def on_signal(signalled: Sequence[PodRef]) -> None:
        board.record(heartbeat(job, step=step, sent_at=clock(), ckpt=step, ckpt_at=clock()))
        pods.running.difference_update(signalled)

    return on_signal


def yield_command(
    command_id: str = "cmd-1",
    *,
    job: str = "team/train",
    node: str = "node-a",
    pods: tuple[str, ...] = ("train-0",),
    now: float = T0,
    grace_s: float = 30.0,
    action: str = "yield",
) -> YieldCommand:
    return YieldCommand.model_validate(
        {
            "command_id": command_id,
            "decision_id": f"decision-{command_id}",
            "action": action,
            "node": node,
            "job": job,
            "pods": pods,
            "grace_s": grace_s,
            "issued_at": now,
            "deadline": now + grace_s,
            "reason": "make room for team/urgent",
        }
    )
