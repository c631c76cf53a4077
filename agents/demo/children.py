"""Every process the demo starts, and the guarantee that none outlives it.

Each child gets its own session (a terminal's Ctrl-C reaches the demo only,
which then stops its children in order: trainers first, so they checkpoint,
the worker before the broker it talks to) and, on Linux, a parent-death
signal: should the demo itself be killed, the kernel kills its children.
``stop_all`` is also registered with ``atexit``: an error anywhere still ends
with no process left behind.

Children are started from the thread that owns this object (the kernel ties
the parent-death signal to the thread that forked), which is the event
loop's thread in the demo.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def _death_signal_setter() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die with its parent (Linux), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return set_death_signal


class Children:
    """The demo's child processes; ``stop_all`` ends them (SIGTERM, then SIGKILL)."""

    def __init__(self) -> None:
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._preexec = _death_signal_setter()
        atexit.register(self.stop_all)

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` with its output appended to ``log_path``; ``name`` must be unique."""
        with log_path.open("ab") as out:
            process = subprocess.Popen(  # noqa: S603 - our own interpreter and scripts
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=self._preexec,  # a single prctl call: safe after fork
            )
        self._processes[name] = process
        log.info("started %s (pid %d)", name, process.pid)
        return process

    def get(self, name: str) -> subprocess.Popen[bytes] | None:
        return self._processes.get(name)

    def signal(self, name: str, signum: int) -> None:
        process = self._processes.get(name)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    def poll_ended(self, prefix: str = "") -> list[tuple[str, int]]:
        """Children named ``prefix...`` that ended since the last call: (name, status);
        they are forgotten."""
        ended = [
            (n, p.returncode)
            for n, p in self._processes.items()
            if n.startswith(prefix) and p.poll() is not None
        ]
        for name, _ in ended:
            del self._processes[name]
        return ended

    def stop(self, names: Sequence[str], timeout_s: float) -> None:
        """SIGTERM ``names``, wait up to ``timeout_s`` for them, then SIGKILL the rest."""
        chosen = [self._processes[n] for n in names if n in self._processes]
        for process in chosen:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in chosen:
            left = deadline - time.monotonic()
            try:
                process.wait(max(0.0, left))
            except subprocess.TimeoutExpired:
                log.warning(
                    "pid %d still running %.0f s after SIGTERM: killing it", process.pid, timeout_s
                )
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()
        for name in names:
            self._processes.pop(name, None)

    def stop_all(self, timeout_s: float = 10.0) -> None:
        """End every child still running; safe to call twice."""
        self.stop(list(self._processes), timeout_s)

    def close(self) -> None:
        self.stop_all()
        atexit.unregister(self.stop_all)


def python() -> str:
    """The interpreter running the demo: its children import the same gpuyield."""
    return sys.executable or "python3"


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The demo's environment for a child, with ``extra`` on top (unbuffered output)."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
