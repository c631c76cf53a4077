"""Ranks agree on yields and time-based checkpoints; simulated here with a fake second rank.

The real thing (two gloo processes) is in test_yield_end_to_end.py; this checks
the agreement rules cheaply, one at a time.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from torch import nn

from gpuyield.agents.trainer import CheckpointStore, GracefulTrainer, distributed


class OtherRank:
    """Rank 0 of two; ``remote`` is what the other rank brings to each step's agreement
    (yield code, time-based checkpoint due); it agrees with every other reduction."""

    rank = 0
    world_size = 2

    def __init__(self) -> None:
        self.remote = [0, 0]
        self.reductions: list[list[int]] = []

    def max_ints(self, values: Sequence[int]) -> list[int]:
        self.reductions.append(list(values))
        if len(values) != len(self.remote):
            return list(values)
        return [max(a, b) for a, b in zip(values, self.remote, strict=True)]

    def broadcast_int(self, value: int) -> int:
        return value

    def gather(self, obj: Any) -> list[Any] | None:
        return [obj, obj]


@pytest.fixture
def other(monkeypatch: pytest.MonkeyPatch) -> OtherRank:
    fake = OtherRank()
    monkeypatch.setattr(distributed, "current", lambda group=None: fake)
    return fake


def test_a_sigterm_on_another_rank_stops_this_one_at_the_same_step(
    tmp_path: Path, other: OtherRank
) -> None:
    with GracefulTrainer(tmp_path, job="ns/j") as session:
        session.resume(model=nn.Linear(2, 1))
        assert session.step_done(1) is False
        other.remote = [signal.SIGTERM, 0]

        assert session.step_done(2) is True
        assert session.yield_reason == "SIGTERM"
    loaded = CheckpointStore(tmp_path).load_latest()
    assert loaded is not None
    assert loaded.info.step == 2
    assert len(loaded.state["rng"]) == 2  # every rank's generators travel with the checkpoint


def test_with_sync_every_k_steps_ranks_agree_only_every_k_steps(
    tmp_path: Path, other: OtherRank
) -> None:
    other.remote = [signal.SIGUSR1, 0]
    with GracefulTrainer(tmp_path, job="ns/j", sync_every_steps=3, total_steps=100) as session:
        session.resume(model=nn.Linear(2, 1))
        before = len(other.reductions)

        assert [session.step_done(step) for step in (1, 2, 3)] == [False, False, True]
        # Step 3's agreement (nothing local), then the checkpoint's barrier; none at steps 1-2.
        assert other.reductions[before:] == [[0, 0], [0]]


def test_a_time_based_checkpoint_due_on_another_rank_is_taken_here_too(
    tmp_path: Path, other: OtherRank
) -> None:
    with GracefulTrainer(tmp_path, job="ns/j", checkpoint_interval_s=3600.0) as session:
        session.resume(model=nn.Linear(2, 1))
        other.remote = [0, 1]
        assert session.step_done(1) is False
        assert session.last_checkpoint_step == 1
