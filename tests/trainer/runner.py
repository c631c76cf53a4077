"""Running ``examples/train_tiny.py`` as a real process, and watching it through its heartbeats.

Plain ``subprocess`` (a fresh interpreter, as a pod would start it): forking a
process that has imported torch can hang on a lock.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuyield.schemas.decoding import decode
from gpuyield.schemas.messages import Heartbeat

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_tiny.py"
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    log: Path

    def wait(self, timeout_s: float = 90.0) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"trainer still running after {timeout_s} s\n{self.output()}"
            ) from None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start(tmp: Path, name: str, args: list[str], env: dict[str, str] | None = None) -> Run:
    """Start the example; its stdout and stderr go to ``tmp/name.log``."""
    environ = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    environ.update(env or {})
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLE), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environ,
            cwd=ROOT,
        )
    return Run(process, log)


def heartbeats(path: Path) -> list[Heartbeat]:
    if not path.exists():
        return []
    lines = path.read_bytes().splitlines()
    return [decode(Heartbeat, line) for line in lines if line.strip()]


def wait_for_step(
    path: Path, step: int, runs: list[Run], rank: int = 0, timeout_s: float = 60.0
) -> None:
    """Block until ``rank`` reports ``step`` in its heartbeats (no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(hb.rank == rank and hb.step >= step for hb in heartbeats(path)):
            return
        for run in runs:
            if run.process.poll() is not None:
                raise AssertionError(
                    f"trainer exited ({run.process.returncode}) before step {step}\n{run.output()}"
                )
        time.sleep(0.01)
    raise AssertionError(f"rank {rank} did not report step {step} within {timeout_s} s")


def result(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def manifests(checkpoint_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(checkpoint_dir.glob("ckpt-*.json"))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
