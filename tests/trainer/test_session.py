"""The session in one process: resume exactness, periodic checkpoints, heartbeat contents."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from gpuyield.agents.trainer import CheckpointStore, GracefulTrainer, MemorySink


class Position:
    """A data position: what a sampler would save."""

    def __init__(self) -> None:
        self.index = 0

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index = state["index"]


class Job:
    """A model whose every step draws on all four generators the SDK restores."""

    def __init__(self, seed: int = 3) -> None:
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        self.model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Linear(8, 1))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.05)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=3, gamma=0.5)
        self.data = Position()

    def objects(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "data": self.data,
        }

    def step(self) -> None:
        x = torch.randn(5, 4) + float(self.data.index)
        target = torch.from_numpy(np.random.normal(size=(5, 1)).astype(np.float32))
        loss = ((self.model(x) - target) ** 2).mean() * (1.0 + random.random())
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.data.index += 1


class FakeClock:
    def __init__(self, step_s: float) -> None:
        self.now = 1000.0
        self.step_s = step_s

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.step_s


@pytest.fixture
def sink() -> MemorySink:
    return MemorySink()


def run(job: Job, session: GracefulTrainer, until: int, clock: FakeClock | None = None) -> int:
    start = session.resume(**job.objects())
    for step in range(start, until):
        job.step()
        if clock is not None:
            clock.tick()
        if session.step_done(step + 1):
            break
    return session.finish()


def test_without_a_checkpoint_the_run_starts_at_step_zero(tmp_path: Path) -> None:
    with GracefulTrainer(tmp_path, job="ns/j") as session:
        assert session.resume(model=nn.Linear(2, 1)) == 0


def test_a_yielded_and_resumed_run_ends_bit_identical_to_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    reference = Job()
    run(reference, GracefulTrainer(tmp_path / "a", job="ns/j"), until=12)

    first = Job()
    with GracefulTrainer(tmp_path / "b", job="ns/j") as session:
        assert session.resume(**first.objects()) == 0
        for step in range(12):
            first.step()
            if step + 1 == 5:
                session.request_yield()
            if session.step_done(step + 1):
                break
        assert session.finish() == 0
        assert session.yield_reason == "requested"

    second = Job()
    random.random(), np.random.rand(), torch.rand(1)  # the restore must undo these
    with GracefulTrainer(tmp_path / "b", job="ns/j") as session:
        assert run(second, session, until=12) == 0
    assert second.data.index == 12
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name
    ref_state = reference.optimizer.state_dict()["state"]
    for key, entry in second.optimizer.state_dict()["state"].items():
        assert torch.equal(entry["exp_avg_sq"], ref_state[key]["exp_avg_sq"])
    assert second.scheduler.state_dict() == reference.scheduler.state_dict()


def test_periodic_checkpoints_every_n_steps_are_kept_and_reported(
    tmp_path: Path, sink: MemorySink
) -> None:
    session = GracefulTrainer(
        tmp_path,
        job="ns/j",
        heartbeat=sink,
        checkpoint_every_steps=3,
        keep_checkpoints=2,
        heartbeat_every_steps=1,
    )
    run(Job(), session, until=10)

    assert [c.step for c in CheckpointStore(tmp_path).checkpoints()] == [9, 6]
    assert [(hb.step, hb.last_checkpoint_step) for hb in sink.heartbeats][3:8] == [
        (3, 3),
        (4, 3),
        (5, 3),
        (6, 6),
        (7, 6),
    ]


def test_time_based_checkpoints_follow_the_clock(tmp_path: Path, sink: MemorySink) -> None:
    clock = FakeClock(step_s=4.0)
    session = GracefulTrainer(
        tmp_path,
        job="ns/j",
        heartbeat=sink,
        checkpoint_interval_s=10.0,
        keep_checkpoints=5,
        clock=clock,
        monotonic=clock,
    )
    run(Job(), session, until=10, clock=clock)

    assert [c.step for c in CheckpointStore(tmp_path).checkpoints()] == [9, 6, 3]
    assert {hb.checkpoint_interval_s for hb in sink.heartbeats} == {10.0}


def test_heartbeats_carry_progress_and_the_checkpoint_interval(
    tmp_path: Path, sink: MemorySink
) -> None:
    clock = FakeClock(step_s=0.5)
    session = GracefulTrainer(
        tmp_path,
        job="research/llama",
        pod="llama-worker-0",
        heartbeat=sink,
        total_steps=4,
        checkpoint_every_steps=2,
        heartbeat_every_steps=1,
        clock=clock,
        monotonic=clock,
    )
    run(Job(), session, until=4, clock=clock)

    beats = sink.heartbeats
    assert [hb.step for hb in beats] == [0, 1, 2, 3, 4]
    assert [hb.progress for hb in beats] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [hb.last_checkpoint_step for hb in beats] == [None, None, 2, 2, 4]
    assert beats[-1].last_checkpoint_at == 1002.0
    assert beats[-1].checkpoint_interval_s == pytest.approx(1.0)  # 2 steps of 0.5 s
    assert {(hb.job, hb.pod, hb.rank, hb.total_steps) for hb in beats} == {
        ("research/llama", "llama-worker-0", 0, 4)
    }
    assert session.heartbeat_stats.sent == 5


def test_a_yield_whose_checkpoint_cannot_be_saved_exits_nonzero(tmp_path: Path) -> None:
    directory = tmp_path / "ck"
    with GracefulTrainer(directory, job="ns/j") as session:
        session.resume(model=nn.Linear(2, 1))
        shutil.rmtree(directory)
        directory.write_text("a file where the directory was")
        session.request_yield()

        assert session.step_done(1) is True
        assert session.finish() == 1


def test_step_done_before_resume_is_a_programming_error(tmp_path: Path) -> None:
    with GracefulTrainer(tmp_path, job="ns/j") as session, pytest.raises(RuntimeError):
        session.step_done(1)
