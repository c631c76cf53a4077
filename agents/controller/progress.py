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

from gpuyield.schemas.messages import Heartbeat, JobProgress

RATE_SMOOTHING = 0.3
"""Weight of the newest step-rate sample: a few heartbeats settle the rate
after a resume, one slow step does not swing it."""


@dataclass(frozen=True, slots=True)
class ForwardRule:
    """When a changed record is worth the decider's attention."""

    min_progress_delta: float = 0.01
    max_silence_s: float = 60.0


def fold(previous: JobProgress | None, beat: Heartbeat) -> JobProgress | None:
    """The record after ``beat``, or None when the beat is old news (a duplicate or late)."""
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
    forwarded: JobProgress | None, current: JobProgress, rule: ForwardRule = ForwardRule()
) -> bool:
    """True when the decider's copy (``forwarded``) is stale enough to matter."""
    if forwarded is None:
        return True
    if current.last_checkpoint_at != forwarded.last_checkpoint_at:
        return True
    if current.progress - forwarded.progress >= rule.min_progress_delta:
        return True
    return current.updated_at - forwarded.updated_at >= rule.max_silence_s
