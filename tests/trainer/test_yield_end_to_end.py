"""The headline: a training process told to yield saves, exits 0, and resumes losing nothing.

Real processes, real torch on the CPU, real signals. The step at which the
signal is sent is drawn at random (pytest-randomly seeds ``random`` per test,
so a failure replays with ``--randomly-seed=N`` from the report header); the
test waits for the trainer to report that step in its heartbeats before
signalling, never for a fixed time.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
import torch

from trainer.runner import Run, free_port, manifests, result, start, wait_for_step

STEPS = 80
SLOW = ["--step-sleep", "0.03"]  # ~2.4 s of training: room to signal mid-run


def common(tmp: Path, name: str) -> list[str]:
    return [
        "--steps",
        str(STEPS),
        "--seed",
        "7",
        "--job",
        "research/tiny",
        "--checkpoint-dir",
        str(tmp / f"{name}-ck"),
        "--result",
        str(tmp / f"{name}.json"),
        "--heartbeat-file",
        str(tmp / f"{name}-hb.jsonl"),
        "--heartbeat-every-steps",
        "1",
    ]


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_sigterm_at_a_random_step_yields_and_the_resumed_run_is_bit_identical(
    tmp_path: Path, device: str
) -> None:
    """On the CPU, and on a GPU where there is one: there the weights, Adam's state and
    the dropout's CUDA generator live on the device (``tests/trainer/test_cuda.py``)."""
    target = random.randrange(3, 30)
    periodic = ["--checkpoint-every", "25", "--device", device]
    reference = start(tmp_path, "reference", [*common(tmp_path, "reference"), *periodic[2:]])
    first = start(tmp_path, "first", [*common(tmp_path, "run"), *periodic, *SLOW])
    try:
        wait_for_step(tmp_path / "run-hb.jsonl", target, [first])
        first.process.send_signal(signal.SIGTERM)
        assert first.wait() == 0, first.output()
        assert reference.wait() == 0, reference.output()
    finally:
        first.kill()
        reference.kill()

    yielded = result(tmp_path / "run.json")
    assert yielded["status"] == "yielded", f"signalled at step {target}: {yielded}"
    assert yielded["reason"] == "SIGTERM"
    assert target <= yielded["step"] < STEPS
    newest = manifests(tmp_path / "run-ck")[-1]
    assert newest["step"] == yielded["step"]
    assert newest["metadata"]["reason"] == "SIGTERM"

    second = start(tmp_path, "second", [*common(tmp_path, "run"), *periodic])
    assert second.wait() == 0, second.output()
    resumed = result(tmp_path / "run.json")
    assert resumed["status"] == "completed"
    assert resumed["started_at"] == yielded["step"]
    assert resumed["step"] == STEPS
    assert resumed["sha256"] == result(tmp_path / "reference.json")["sha256"], (
        f"resumed from step {yielded['step']} (signalled at {target}): parameters differ"
    )


@pytest.mark.slow
def test_ddp_sigterm_to_one_rank_stops_both_at_the_same_step_and_resumes_bit_identical(
    tmp_path: Path,
) -> None:
    """Two gloo ranks started like Volcano starts pods (RANK, WORLD_SIZE, MASTER_*);
    the reference run spawns its two ranks itself (``--ddp 2``)."""
    target = random.randrange(3, 30)

    def ranks(name: str, extra: list[str]) -> list[Run]:
        env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        return [
            start(
                tmp_path,
                f"{name}-rank{rank}",
                [*common(tmp_path, "run"), "--pod", f"tiny-{rank}", *extra],
                {**env, "RANK": str(rank)},
            )
            for rank in (0, 1)
        ]

    reference = start(tmp_path, "reference", [*common(tmp_path, "reference"), "--ddp", "2"])
    first: list[Run] = []
    try:
        assert reference.wait() == 0, reference.output()
        first = ranks("first", SLOW)
        wait_for_step(tmp_path / "run-hb.jsonl", target, first, rank=1)
        first[1].process.send_signal(signal.SIGTERM)  # not the writer: rank 0 learns by all-reduce
        for run in first:
            assert run.wait() == 0, run.output()
    finally:
        reference.kill()
        for run in first:
            run.kill()

    stopped = [result(tmp_path / f"run.rank{rank}.json") for rank in (0, 1)]
    assert [r["status"] for r in stopped] == ["yielded", "yielded"], stopped
    assert stopped[0]["step"] == stopped[1]["step"], stopped
    assert target <= stopped[0]["step"] < STEPS
    assert stopped[0]["sha256"] == stopped[1]["sha256"]
    written = manifests(tmp_path / "run-ck")
    assert [m["step"] for m in written] == [stopped[0]["step"]]
    assert written[0]["metadata"]["reason"] == "SIGTERM"
    assert written[0]["metadata"]["world_size"] == 2

    second = ranks("second", [])
    try:
        for run in second:
            assert run.wait() == 0, run.output()
    finally:
        for run in second:
            run.kill()
    reference_sha = result(tmp_path / "reference.rank0.json")["sha256"]
    for rank in (0, 1):
        resumed = result(tmp_path / f"run.rank{rank}.json")
        assert resumed["started_at"] == stopped[0]["step"]
        assert resumed["status"] == "completed"
        assert resumed["sha256"] == reference_sha, (
            f"rank {rank} resumed from step {stopped[0]['step']}: parameters differ"
        )
