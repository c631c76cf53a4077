"""On a GPU: a yield saves what lives on the device, and the resumed run loses nothing.

The CPU tests cover every generator but CUDA's, and tensors that live in host
memory. Real jobs train on GPUs: their weights and optimizer state are device
tensors, and dropout there draws from each device's CUDA generator, which a
checkpoint must carry for the resumed run to be bit-identical. These tests run
where torch sees a CUDA device and are skipped elsewhere (CI has none).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from gpuyield.agents.trainer import GracefulTrainer, state
from gpuyield.agents.trainer.checkpoint import CheckpointStore
from trainer.test_session import Position

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")

STEPS = 12
YIELD_AT = 5


@pytest.fixture(autouse=True)
def deterministic() -> Iterator[None]:
    """Deterministic kernels, so two runs can be compared bit for bit."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


class GpuJob:
    """A model on the GPU whose every step draws on the CUDA generator (inputs and dropout)."""

    def __init__(self) -> None:
        torch.manual_seed(11)
        np.random.seed(11)
        random.seed(11)
        self.model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.3), nn.Linear(64, 1)).cuda()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.05)
        self.data = Position()

    def objects(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer, "data": self.data}

    def step(self) -> None:
        x = torch.randn(32, 16, device="cuda") + float(self.data.index)
        loss = (self.model(x) ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.data.index += 1


def run_to_end(job: GpuJob, directory: Path) -> None:
    with GracefulTrainer(directory, job="research/gpu") as session:
        start = session.resume(**job.objects())
        for step in range(start, STEPS):
            job.step()
            session.step_done(step + 1)
        assert session.finish() == 0


def yield_at(job: GpuJob, directory: Path, step_to_yield: int) -> None:
    with GracefulTrainer(directory, job="research/gpu") as session:
        assert session.resume(**job.objects()) == 0
        for step in range(STEPS):
            job.step()
            if step + 1 == step_to_yield:
                session.request_yield()
            if session.step_done(step + 1):
                break
        assert session.finish() == 0
        assert session.yielded


def assert_same_model(a: GpuJob, b: GpuJob) -> None:
    for name, tensor in a.model.state_dict().items():
        assert torch.equal(tensor, b.model.state_dict()[name]), name


def test_a_checkpoint_holds_the_state_of_every_cuda_generator(tmp_path: Path) -> None:
    job = GpuJob()
    yield_at(job, tmp_path, YIELD_AT)
    loaded = CheckpointStore(tmp_path).load_latest()
    assert loaded is not None
    (own,) = loaded.state["rng"]  # one entry per rank
    saved = own["cuda"]
    assert len(saved) == torch.cuda.device_count()
    assert torch.equal(saved[torch.cuda.current_device()], torch.cuda.get_rng_state())


def test_a_yielded_run_resumed_on_the_gpu_ends_bit_identical_to_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    reference = GpuJob()
    run_to_end(reference, tmp_path / "reference")
    yield_at(GpuJob(), tmp_path / "run", YIELD_AT)

    resumed = GpuJob()
    torch.randn(7, device="cuda")  # the restore must undo this draw on the CUDA generator
    run_to_end(resumed, tmp_path / "run")

    assert resumed.data.index == STEPS
    assert_same_model(reference, resumed)
    expected = reference.optimizer.state_dict()["state"]
    for key, entry in resumed.optimizer.state_dict()["state"].items():
        assert entry["exp_avg_sq"].is_cuda  # the optimizer's state went back to the device
        assert torch.equal(entry["exp_avg_sq"], expected[key]["exp_avg_sq"])


def test_a_resume_that_skipped_the_cuda_generators_would_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: its steps do depend on the CUDA generator."""
    reference = GpuJob()
    run_to_end(reference, tmp_path / "reference")
    yield_at(GpuJob(), tmp_path / "run", YIELD_AT)

    restore = state.restore_rng
    monkeypatch.setattr(
        "gpuyield.agents.trainer.session.restore_rng",
        lambda saved: restore({**saved, "cuda": []}),
    )
    resumed = GpuJob()
    torch.randn(7, device="cuda")
    run_to_end(resumed, tmp_path / "run")

    weights = reference.model.state_dict()
    assert any(not torch.equal(t, weights[n]) for n, t in resumed.model.state_dict().items())
