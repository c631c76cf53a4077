"""Emergency-checkpoint benchmark: how much of a yield's grace period the save takes.

Not a test. ``python bench/bench_checkpoint.py [--sizes 10M 100M 1B] [--repeats 3]
[--device cuda]`` prints a markdown table, with the machine named: for MLPs of about 10M, 100M
and 1B fp32 parameters, the median time of the SDK's emergency checkpoint (from
the yield agreed at a step boundary to the manifest committed: state dicts,
RNG states, ``torch.save`` through the SHA-256 writer, fsyncs, rename,
retention), the file size, and the median time of ``resume`` (verify the
digest, ``torch.load(weights_only=True)``, load into the model and optimizer).
With ``--device cuda`` the model and its optimizer state live on the GPU, as
in a real job: the save then includes copying them to host memory, and the
resume copying them back.

The optimizer is Adam with its state populated (the file is then about 3x the
weights) unless that would not fit in memory: then plain SGD without momentum
(no state, the file is the weights), and the table says so. On a GPU the
state must fit in the device's free memory too. Files go to a
temporary directory (``--dir`` to choose the disk) and are removed.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from machine import cpu_model
from torch import nn

from gpuyield.agents.trainer import GracefulTrainer

SIZES = {"10M": (1024, 10), "100M": (2048, 24), "1B": (4096, 60)}  # width, layers of width^2


@dataclass
class Row:
    size: str
    params: int
    optimizer: str
    file_bytes: int
    save_s: list[float]
    resume_s: list[float]


def machine(device: torch.device) -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = f"{torch.cuda.get_device_name(device)}, " if device.type == "cuda" else ""
    return (
        f"{gpu}{cpu_model()}, {os.cpu_count()} cores, {memory:.0f} GiB RAM, "
        f"Python {platform.python_version()}, torch {torch.__version__}, {platform.platform()}"
    )


def available_memory() -> int:
    with open("/proc/meminfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def build(size: str, device: torch.device) -> nn.Module:
    width, layers = SIZES[size]
    with torch.no_grad():
        return nn.Sequential(*(nn.Linear(width, width, device=device) for _ in range(layers)))


def optimizer_for(
    model: nn.Module, params: int, device: torch.device
) -> tuple[torch.optim.Optimizer, str]:
    """Adam with populated state if model + state, twice over (resume), fits; else plain SGD."""
    adam_bytes = params * 4 * 3 * 2
    room = available_memory()
    if device.type == "cuda":
        room = min(room, torch.cuda.mem_get_info(device)[0])
    if adam_bytes < 0.7 * room:
        adam = torch.optim.Adam(model.parameters(), lr=1e-4)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        adam.step()
        for p in model.parameters():
            p.grad = None
        return adam, "Adam (state populated)"
    need = adam_bytes / 2**30
    return (
        torch.optim.SGD(model.parameters(), lr=1e-4),
        f"SGD, no state (Adam would need ~{need:.0f} GiB)",
    )


def emergency_save(model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path) -> float:
    with GracefulTrainer(directory, job="bench/checkpoint", pod="bench", yield_signals=()) as s:
        s.resume(model=model, optimizer=optimizer)
        s.request_yield()
        started = time.perf_counter()
        assert s.step_done(1)
        seconds = time.perf_counter() - started
        assert s.finish() == 0
    return seconds


def resume(model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path) -> float:
    with GracefulTrainer(directory, job="bench/checkpoint", pod="bench", yield_signals=()) as s:
        started = time.perf_counter()
        assert s.resume(model=model, optimizer=optimizer) == 1
        return time.perf_counter() - started


def measure(size: str, repeats: int, parent: Path | None, device: torch.device) -> Row:
    model = build(size, device)
    params = sum(p.numel() for p in model.parameters())
    optimizer, label = optimizer_for(model, params, device)
    saves: list[float] = []
    resumes: list[float] = []
    file_bytes = 0
    for _ in range(repeats):
        directory = Path(tempfile.mkdtemp(prefix="gpuyield-bench-", dir=parent))
        try:
            saves.append(emergency_save(model, optimizer, directory))
            file_bytes = sum(f.stat().st_size for f in directory.iterdir())
            resumes.append(resume(model, optimizer, directory))
        finally:
            shutil.rmtree(directory)
    return Row(size, params, label, file_bytes, saves, resumes)


def table(rows: list[Row]) -> str:
    lines = [
        "| model | parameters | optimizer | checkpoint | save, median | save rate "
        "| resume, median | runs |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        save = statistics.median(row.save_s)
        rate = row.file_bytes / save / 1e9
        lines.append(
            f"| MLP ~{row.size} | {row.params / 1e6:,.1f} M | {row.optimizer} "
            f"| {row.file_bytes / 1e9:.2f} GB | {save:.2f} s | {rate:.2f} GB/s "
            f"| {statistics.median(row.resume_s):.2f} s | {len(row.save_s)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["10M", "100M"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: $TMPDIR)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    logging.basicConfig(level=logging.ERROR)  # the SDK's yield warnings are expected here
    torch.manual_seed(0)
    rows = []
    for size in args.sizes:
        rows.append(measure(size, args.repeats, args.dir, device))
    where = args.dir or Path(tempfile.gettempdir())
    print(f"Emergency checkpoints from {args.device} on {machine(device)}; files in {where}.\n")
    print(table(rows))


if __name__ == "__main__":
    main()
