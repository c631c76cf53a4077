"""Checkpoints are whole or ignored: atomic saves, verified loads, bounded retention."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gpuyield.agents.trainer import CheckpointError, CheckpointStore


def trained_state(seed: int = 0) -> dict[str, Any]:
    """A model, Adam and a scheduler after two steps: every kind of state a checkpoint holds."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.dtype == b.dtype
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def save_steps(store: CheckpointStore, *steps: int) -> None:
    for step in steps:
        store.save(step, trained_state(step), {"job": "ns/j", "reason": "periodic"})


def test_a_saved_checkpoint_loads_with_identical_tensors(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    state = trained_state()
    store.save(5, state, {"job": "ns/j", "reason": "SIGTERM"})

    loaded = store.load_latest()

    assert loaded is not None
    assert loaded.info.step == 5
    assert loaded.info.metadata["reason"] == "SIGTERM"
    for key in ("model", "optimizer", "scheduler"):
        assert_same(state[key], loaded.state[key])


def test_a_checkpoint_is_readable_by_plain_torch_load_with_weights_only(tmp_path: Path) -> None:
    info = CheckpointStore(tmp_path).save(3, trained_state(), {"job": "ns/j", "saved_at": 1.5})

    raw = torch.load(info.path, weights_only=True)

    assert raw["step"] == 3
    assert raw["metadata"] == {"job": "ns/j", "saved_at": 1.5, "step": 3}


def test_a_truncated_newest_checkpoint_is_skipped_for_the_previous_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path)
    save_steps(store, 10, 20)
    newest = tmp_path / "ckpt-000000000020.pt"
    newest.write_bytes(newest.read_bytes()[:1000])

    with caplog.at_level(logging.WARNING):
        loaded = store.load_latest()

    assert loaded is not None
    assert loaded.info.step == 10
    assert "skipping checkpoint at step 20" in caplog.text


def test_a_flipped_byte_inside_a_tensor_is_caught_by_the_digest(tmp_path: Path) -> None:
    """torch.load would load it without complaint: the manifest's SHA-256 is what catches it."""
    store = CheckpointStore(tmp_path)
    save_steps(store, 10, 20)
    newest = tmp_path / "ckpt-000000000020.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))

    with pytest.raises(CheckpointError, match="SHA-256"):
        store.load(20)
    loaded = store.load_latest()
    assert loaded is not None
    assert loaded.info.step == 10


def test_a_save_interrupted_before_its_manifest_is_not_a_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    save_steps(store, 10, 20)
    (tmp_path / "ckpt-000000000020.json").unlink()

    loaded = store.load_latest()

    assert loaded is not None
    assert loaded.info.step == 10


def test_garbage_everywhere_gives_no_checkpoint_rather_than_a_crash(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    (tmp_path / "ckpt-000000000007.pt").write_bytes(b"not a zip")
    (tmp_path / "ckpt-000000000007.json").write_text("{not json")
    (tmp_path / "ckpt-000000000009.json").write_text('{"format": "gpuyield-checkpoint/1"}')

    assert store.load_latest() is None


def test_the_writer_quarantines_bad_checkpoints_newer_than_the_one_resumed(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    save_steps(store, 10, 20)
    newest = tmp_path / "ckpt-000000000020.pt"
    newest.write_bytes(newest.read_bytes()[:100])

    loaded = store.load_latest(quarantine=True)
    assert loaded is not None
    save_steps(store, 15, 16)  # the resumed run saves steps below the bad one

    names = sorted(p.name for p in tmp_path.iterdir())
    assert "ckpt-000000000020.pt.invalid" in names
    assert [c.step for c in store.checkpoints()] == [16, 15]


def test_retention_keeps_the_newest_k(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)

    save_steps(store, 1, 2, 3, 4, 5)

    assert [c.step for c in store.checkpoints()] == [5, 4, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"ckpt-{step:012d}.{kind}" for step in (3, 4, 5) for kind in ("json", "pt")
    ]


def test_a_failed_save_leaves_no_file_behind(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    save_steps(store, 1)

    with pytest.raises(Exception, match=r"pickle|Can't|cannot"):
        store.save(2, {"bad": lambda: None}, {})

    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000000001.json",
        "ckpt-000000000001.pt",
    ]


def test_prepare_removes_temporaries_of_a_killed_writer(tmp_path: Path) -> None:
    (tmp_path / ".ckpt-abc123.tmp").write_bytes(b"half a checkpoint")
    store = CheckpointStore(tmp_path)

    store.prepare()

    assert list(tmp_path.iterdir()) == []
