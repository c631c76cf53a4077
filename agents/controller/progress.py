"""Folding heartbeats into a job's progress, and deciding when the decider must hear of it.

At-least-once delivery means a heartbeat may come twice or late: one that is
not newer than what the job's record already holds changes nothing, so
reprocessing a partition after a crash leaves every record as it was.
A job's pods all report (one per rank); the record follows the furthest step
and the newest checkpoint, because ranks stop at the same step and rank 0
writes the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.schemas.messages import Heartbeat, JobProgress

RATE_SMOOTHING = 0.3
"""Weight of the newest step-rate sample: a few heartbeats settle the rate
after a resume, one slow step does not swing it."""


@dataclass(frozen=True, slots=True)
class ForwardRule:
    """When a changed record is worth the decider's attention (``ControllerConfig``'s
    ``progress_forward_delta`` and ``progress_forward_silence_s``)."""

    min_progress_delta: float
    max_silence_s: float

    @classmethod
    def of(cls, config: ControllerConfig) -> ForwardRule:
        return cls(config.progress_forward_delta, config.progress_forward_silence_s)


DEFAULT_FORWARD = ForwardRule.of(ControllerConfig())
"""The rule at ``ControllerConfig``'s defaults (the settings hold the numbers, once)."""


def in_worker_time(
    beat: Heartbeat, received_at: float, max_skew_s: float, queued_at: float | None = None
) -> tuple[Heartbeat, float | None]:
    """``beat`` in the workers' time when the trainer's clock is off by more than the bound.

    The decider's time must not come from trainers (issue 11): a trainer a year
    ahead once put every deadline a year away. A beat's ``sent_at`` is compared
    with when it was put on the topic (``queued_at``, the Kafka record's
    timestamp), not with when it was read: a beat read 40 minutes late because
    the worker was catching up a backlog was queued 40 minutes ago, and its
    trainer's clock is right. Within ``max_skew_s`` of that a trainer's own times
    are kept (they say exactly when its checkpoint was written); beyond it,
    every time the beat carries is shifted by the offset, so its checkpoint age
    stays right, and the offset is returned for the record and an alert.

    A record's timestamp is no later than its reading: one beyond
    ``received_at`` was stamped by a producer whose clock is ahead (a trainer's
    own, where the topic keeps CreateTime), so the reading is the witness then.
    Without ``queued_at`` (or with Kafka's -1, none) the reading is the witness.
    A trainer ahead is always caught; one behind only where the record's time is
    the broker's (LogAppendTime): under CreateTime the trainer stamped the record
    itself, and a clock behind looks like a backlog as old.
    """
    witness = received_at if queued_at is None or queued_at <= 0 else min(queued_at, received_at)
    offset = beat.sent_at - witness
    if abs(offset) <= max_skew_s:
        return beat, None
    checkpoint_at = beat.last_checkpoint_at
    if checkpoint_at is not None:
        checkpoint_at = min(max(checkpoint_at - offset, 0.0), witness)
    corrected = beat.model_copy(update={"sent_at": witness, "last_checkpoint_at": checkpoint_at})
    return corrected, offset


def fold(
    previous: JobProgress | None,
    beat: Heartbeat,
    received_at: float | None = None,
    max_skew_s: float = 300.0,
    queued_at: float | None = None,
) -> JobProgress | None:
    """The record after ``beat``, or None when the beat is old news (a duplicate or late).

    ``received_at`` is the worker's clock when the beat was read (None: trust
    the trainer's, as the simulator does) and ``queued_at`` the Kafka record's
    timestamp (None: unknown): a beat off by more than ``max_skew_s`` from when
    it was queued is taken in the workers' time (``in_worker_time``), and a
    record whose time lies beyond the worker's clock (written by a skewed
    trainer before) is replaced rather than kept forever ahead of every beat.
    """
    offset: float | None = None
    if received_at is not None:
        beat, offset = in_worker_time(beat, received_at, max_skew_s, queued_at)
        if previous is not None and previous.updated_at > received_at + max_skew_s:
            previous = None
    if offset is not None or (previous is not None and previous.clock_offset_s is not None):
        folded = _fold(previous, beat)
        if folded is None:
            return None
        return folded.model_copy(update={"clock_offset_s": offset})
    return _fold(previous, beat)


def _fold(previous: JobProgress | None, beat: Heartbeat) -> JobProgress | None:
    if previous is None:
        return JobProgress(
            job=beat.job,
            step=beat.step,
            progress=beat.progress,
            last_checkpoint_step=beat.last_checkpoint_step,
            last_checkpoint_at=beat.last_checkpoint_at,
            checkpoint_interval_s=beat.checkpoint_interval_s,
            first_seen_at=beat.sent_at,
            updated_at=beat.sent_at,
        )
    newer_checkpoint = beat.last_checkpoint_at is not None and (
        previous.last_checkpoint_at is None or beat.last_checkpoint_at > previous.last_checkpoint_at
    )
    if beat.sent_at <= previous.updated_at and not newer_checkpoint:
        return None
    if beat.step <= previous.step and not newer_checkpoint and beat.sent_at <= previous.updated_at:
        return None
    elapsed = beat.sent_at - previous.updated_at
    rate = previous.step_rate
    if elapsed > 0 and beat.step >= previous.step:
        sample = (beat.step - previous.step) / elapsed
        rate = sample if rate == 0 else (1 - RATE_SMOOTHING) * rate + RATE_SMOOTHING * sample
    return previous.model_copy(
        update={
            "step": max(previous.step, beat.step),
            "progress": max(previous.progress, beat.progress),
            "step_rate": rate,
            "last_checkpoint_step": beat.last_checkpoint_step
            if newer_checkpoint
            else previous.last_checkpoint_step,
            "last_checkpoint_at": beat.last_checkpoint_at
            if newer_checkpoint
            else previous.last_checkpoint_at,
            "checkpoint_interval_s": beat.checkpoint_interval_s or previous.checkpoint_interval_s,
            "updated_at": max(previous.updated_at, beat.sent_at),
        }
    )


def should_forward(
    forwarded: JobProgress | None, current: JobProgress, rule: ForwardRule = DEFAULT_FORWARD
) -> bool:
    """True when the decider's copy (``forwarded``) is stale enough to matter."""
    if forwarded is None:
        return True
    if current.last_checkpoint_at != forwarded.last_checkpoint_at:
        return True
    if current.progress - forwarded.progress >= rule.min_progress_delta:
        return True
    return current.updated_at - forwarded.updated_at >= rule.max_silence_s
