"""The heartbeat fold: maxima, so order and repeats do not matter; waiters wake on news."""

from __future__ import annotations

import asyncio
import itertools

from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.schemas.messages import Heartbeat


def beat(
    step: int, sent_at: float, ckpt: int | None, ckpt_at: float | None, rank: int = 0
) -> Heartbeat:
    return Heartbeat(
        job="team/train",
        pod=f"train-{rank}",
        rank=rank,
        step=step,
        progress=0.1,
        last_checkpoint_step=ckpt,
        last_checkpoint_at=ckpt_at,
        sent_at=sent_at,
    )


BEATS = [
    beat(10, 100.0, None, None),
    beat(20, 110.0, 20, 109.0),
    beat(25, 115.0, 20, 109.0, rank=1),
    beat(30, 120.0, 30, 119.5),
]


def test_the_fold_is_the_same_in_any_order_and_with_repeats() -> None:
    results = set()
    for order in itertools.permutations(BEATS):
        board = ProgressBoard()
        for b in (*order, order[0]):
            board.record(b)
        results.add(board.get("team/train"))
    (only,) = results
    assert only is not None
    assert (only.step, only.sent_at) == (30, 120.0)
    assert (only.last_checkpoint_step, only.last_checkpoint_at) == (30, 119.5)


async def test_a_waiter_wakes_at_its_jobs_next_heartbeat_only() -> None:
    board = ProgressBoard()
    waiter = asyncio.create_task(board.wait_for_news("team/train"))
    await asyncio.sleep(0)
    other = beat(1, 1.0, None, None).model_copy(update={"job": "team/other"})
    board.record(other)
    await asyncio.sleep(0)
    assert not waiter.done()
    board.record(BEATS[0])
    await asyncio.wait_for(waiter, 1.0)
    assert board.get("team/other") is not None
    assert len(board) == 2


def test_jobs_silent_for_a_day_are_forgotten() -> None:
    board = ProgressBoard(forget_after_s=100, prune_every=2)
    board.record(beat(1, 0.0, None, None).model_copy(update={"job": "team/old"}))
    board.record(beat(1, 50.0, None, None))
    assert len(board) == 2
    board.record(beat(2, 150.0, None, None))
    board.record(beat(3, 160.0, None, None))
    assert board.get("team/old") is None
    assert board.get("team/train") is not None
