"""Folding heartbeats into a job's progress record, and when the decider hears of it."""

from __future__ import annotations

from cluster_objects import T0

from gpuyield.agents.controller.progress import ForwardRule, fold, should_forward
from gpuyield.schemas.messages import Heartbeat


def beat(step: int, at: float, *, checkpoint_at: float | None = None, rank: int = 0) -> Heartbeat:
    return Heartbeat(
        job="research/sweep-3",
        pod=f"sweep-3-worker-{rank}",
        rank=rank,
        step=step,
        total_steps=10_000,
        progress=step / 10_000,
        last_checkpoint_step=None if checkpoint_at is None else step,
        last_checkpoint_at=checkpoint_at,
        sent_at=at,
    )


def test_the_first_heartbeat_opens_the_record() -> None:
    record = fold(None, beat(100, T0))
    assert record is not None
    assert (record.step, record.first_seen_at, record.updated_at) == (100, T0, T0)


def test_the_step_rate_follows_the_steps_per_second() -> None:
    first = fold(None, beat(100, T0))
    second = fold(first, beat(200, T0 + 10))
    assert second is not None
    assert second.step_rate == 10.0


def test_a_redelivered_heartbeat_changes_nothing() -> None:
    record = fold(fold(None, beat(100, T0)), beat(200, T0 + 10))
    assert fold(record, beat(200, T0 + 10)) is None


def test_a_late_heartbeat_never_moves_progress_back() -> None:
    record = fold(fold(None, beat(100, T0)), beat(500, T0 + 40))
    late = fold(record, beat(300, T0 + 50, rank=1))
    assert late is not None
    assert late.step == 500


def test_a_new_checkpoint_is_kept_even_from_a_late_heartbeat() -> None:
    record = fold(None, beat(500, T0 + 40))
    with_checkpoint = fold(record, beat(400, T0 + 30, checkpoint_at=T0 + 29))
    assert with_checkpoint is not None
    assert with_checkpoint.last_checkpoint_at == T0 + 29


def test_a_new_checkpoint_is_forwarded_at_once() -> None:
    forwarded = fold(None, beat(100, T0))
    assert forwarded is not None
    current = fold(forwarded, beat(101, T0 + 1, checkpoint_at=T0 + 1))
    assert current is not None
    assert should_forward(forwarded, current)


def test_small_progress_is_not_forwarded_until_a_percent_or_the_silence_passes() -> None:
    forwarded = fold(None, beat(100, T0))
    assert forwarded is not None
    small = fold(forwarded, beat(150, T0 + 10))
    assert small is not None
    assert not should_forward(forwarded, small)
    percent = fold(small, beat(200, T0 + 20))
    assert percent is not None
    assert should_forward(forwarded, percent)
    quiet = fold(forwarded, beat(101, T0 + 61))
    assert quiet is not None
    assert not should_forward(forwarded, quiet)  # the default silence is five minutes
    assert should_forward(forwarded, quiet, ForwardRule(min_progress_delta=0.01, max_silence_s=60))
