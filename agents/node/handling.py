"""The node agent's decisions, as pure functions of what it has seen and the time.

Nothing here does I/O or reads a clock: the executor observes (heartbeats,
pod liveness), calls ``step`` with ``now``, and carries out the move it gets
back. That keeps the rules for "checkpointed, exited or hard-killed" and for
the lost work in one place, testable without processes or brokers.

The rules, in words:

- A command received more than ``stale_after_s`` after its deadline is not
  carried out (acked ``failed``): the controller has given up on it, and
  acting on an old decision (a topic replayed to a new node, an agent down for
  an hour) could evict a job that has since been resumed.
- After the signal, the trainer's emergency checkpoint counts once a heartbeat
  reports a checkpoint saved at or after the signal time (``last_checkpoint_at``;
  the trainer shares the node's clock), or, when a heartbeat carries no save
  time, a checkpoint step beyond the one known before the signal.
- Checkpointed and gone: ``checkpointed``. Checkpointed but still running:
  it gets ``exit_grace_s`` (never past the deadline) to exit, then is killed,
  still ``checkpointed`` (the work is saved).
- Gone without a checkpoint: wait ``settle_s`` for a heartbeat still in flight
  (the trainer publishes, then exits; the exit may be seen first), then
  ``exited``.
- Still running at the deadline without a checkpoint: killed, ``hard_killed``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyield.agents.node.progress import SeenProgress
from gpuyield.schemas.messages import YieldAck, YieldCommand, YieldOutcome


def is_stale(command: YieldCommand, received_at: float, stale_after_s: float) -> bool:
    """True when the command arrived too long after its deadline to be carried out."""
    return received_at > command.deadline + stale_after_s


def signal_grace_s(command: YieldCommand, now: float) -> float:
    """The grace to pass to the signaller: what is left until the deadline, at most grace_s."""
    return max(0.0, min(command.grace_s, command.deadline - now))


def checkpoint_after_signal(
    seen: SeenProgress | None, signalled_at: float, baseline_step: int | None
) -> int | None:
    """The step of a checkpoint saved since the signal, or None when none is reported yet."""
    if seen is None or seen.last_checkpoint_step is None:
        return None
    if seen.last_checkpoint_at is not None:
        return seen.last_checkpoint_step if seen.last_checkpoint_at >= signalled_at else None
    if baseline_step is not None and seen.last_checkpoint_step > baseline_step:
        return seen.last_checkpoint_step
    return None


@dataclass(frozen=True, slots=True)
class Timing:
    """How long the agent waits for what, once a yield is signalled."""

    deadline: float
    exit_grace_s: float = 10.0  # after a checkpoint, before the pods are killed
    settle_s: float = 2.0  # after the pods are gone, for a checkpoint heartbeat in flight


@dataclass(frozen=True, slots=True)
class Watch:
    """What the waiting loop remembers between observations."""

    checkpoint_step: int | None = None
    checkpoint_seen_at: float | None = None
    gone_seen_at: float | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    """Observe again at ``until`` at the latest (or at the job's next heartbeat)."""

    until: float


@dataclass(frozen=True, slots=True)
class Kill:
    """Hard-kill the pods now; the yield ends with ``outcome``."""

    outcome: YieldOutcome


@dataclass(frozen=True, slots=True)
class Finish:
    """The pods are gone; the yield ends with ``outcome``."""

    outcome: YieldOutcome
    stopped_at: float


Move = Wait | Kill | Finish


def step(
    watch: Watch,
    *,
    now: float,
    alive: bool,
    seen: SeenProgress | None,
    signalled_at: float,
    baseline_step: int | None,
    timing: Timing,
) -> tuple[Watch, Move]:
    """One observation in, the updated memory and the next move out."""
    checkpoint = checkpoint_after_signal(seen, signalled_at, baseline_step)
    if checkpoint is not None and watch.checkpoint_seen_at is None:
        watch = Watch(checkpoint, now, watch.gone_seen_at)
    if alive:
        watch = Watch(watch.checkpoint_step, watch.checkpoint_seen_at, None)
    elif watch.gone_seen_at is None:
        watch = Watch(watch.checkpoint_step, watch.checkpoint_seen_at, now)

    if watch.gone_seen_at is not None:
        if watch.checkpoint_seen_at is not None:
            return watch, Finish(YieldOutcome.CHECKPOINTED, watch.gone_seen_at)
        settled = watch.gone_seen_at + timing.settle_s
        if now >= settled:
            return watch, Finish(YieldOutcome.EXITED, watch.gone_seen_at)
        return watch, Wait(settled)
    if watch.checkpoint_seen_at is not None:
        kill_at = min(timing.deadline, watch.checkpoint_seen_at + timing.exit_grace_s)
        if now >= kill_at:
            return watch, Kill(YieldOutcome.CHECKPOINTED)
        return watch, Wait(kill_at)
    if now >= timing.deadline:
        return watch, Kill(YieldOutcome.HARD_KILLED)
    return watch, Wait(timing.deadline)


def lost_gpu_seconds(
    outcome: YieldOutcome,
    seen: SeenProgress | None,
    *,
    stopped_at: float,
    signalled_at: float,
    gpus: int,
) -> tuple[float, str]:
    """GPU-seconds of training the yield threw away, and how that figure was reached.

    The work since the job's last checkpoint is lost: GPUs x (the time the pods
    stopped - the time of that checkpoint). Zero when the yield checkpointed,
    and zero when the trainer's last heartbeat after the signal shows it stopped
    exactly at its checkpoint (the SDK does not save a step twice). With no
    checkpoint time known (no heartbeat, or a trainer that never checkpointed)
    the loss cannot be told: 0, and the note says so. ``gpus`` is the pods'
    GPU count (see ``gpus.GpuCounter``).
    """
    if outcome is YieldOutcome.CHECKPOINTED:
        return 0.0, ""
    if seen is None:
        return 0.0, "lost work unknown: no heartbeat from the job"
    if seen.last_checkpoint_at is None:
        return 0.0, "lost work unknown: the job reported no checkpoint time"
    if seen.sent_at >= signalled_at and seen.step == seen.last_checkpoint_step:
        return 0.0, f"stopped at its checkpoint (step {seen.step})"
    seconds = max(0.0, stopped_at - seen.last_checkpoint_at)
    return gpus * seconds, (
        f"{gpus} GPU(s) x {seconds:.1f} s since the checkpoint at step {seen.last_checkpoint_step}"
    )


def make_ack(
    command: YieldCommand,
    outcome: YieldOutcome,
    *,
    now: float,
    received_at: float,
    checkpoint_step: int | None = None,
    gpu_seconds_lost: float = 0.0,
    detail: str = "",
) -> YieldAck:
    """The ack for ``command``; ``seconds_taken`` runs from receipt to now."""
    return YieldAck(
        command_id=command.command_id,
        decision_id=command.decision_id,
        node=command.node,
        job=command.job,
        outcome=outcome,
        checkpoint_step=checkpoint_step,
        seconds_taken=max(0.0, now - received_at),
        gpu_seconds_lost=max(0.0, gpu_seconds_lost),
        detail=detail,
        acked_at=now,
    )
