"""Effective weight and lost work: the two numbers every victim is judged by.

Both are pure functions of a job and ``now``; no clock is read here, so an
audit that replays a snapshot gets the same numbers.
"""

from __future__ import annotations

import math

from gpuyield.schemas import Job, JobState, Policy

SECONDS_PER_HOUR = 3600.0


def run_hours(job: Job, now: float) -> float:
    """Hours since ``started_at`` for a running job; 0 otherwise (readings 0001 §2-3)."""
    if job.state is not JobState.RUNNING or job.started_at is None:
        return 0.0
    return max(0.0, now - job.started_at) / SECONDS_PER_HOUR


def effective_weight(job: Job, now: float, policy: Policy) -> float:
    """``W = priority + alpha * ln(1 + T_run_h) + beta * progress^2``.

    The progress term protects near-finished work: at beta 800 a 90%-done job
    gains 648 over a fresh one, more than most priority gaps inside a queue.
    """
    return (
        job.priority
        + policy.alpha * math.log1p(run_hours(job, now))
        + policy.beta * job.progress**2
    )


def preemptor_weight(job: Job, now: float, policy: Policy) -> float:
    """A pending preemptor weighs its priority (contract); others their W_eff (0001 §4)."""
    if job.state is JobState.PENDING:
        return job.priority
    return effective_weight(job, now, policy)


def lost_seconds_per_gpu(job: Job, now: float) -> float:
    """Seconds of work one GPU of ``job`` loses if evicted now (contract, reading 9).

    Measured from the last checkpoint, else from the start; a job that never
    started loses nothing, and clock skew never makes it negative.
    """
    since = job.last_checkpoint_at if job.last_checkpoint_at is not None else job.started_at
    if since is None:
        return 0.0
    return max(0.0, now - since)
