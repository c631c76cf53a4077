"""Yield requests by signal: the handler only records that one arrived.

Python runs a signal handler in the main thread between two bytecodes, possibly
in the middle of ``torch.save``, an optimizer step or a logging call holding a
lock. Saving, logging or even ``threading.Event.set`` (it takes a lock) there
could corrupt state or deadlock, so the handler stores an int and returns; the
training loop reads it at the next step boundary, where saving is safe.

Kubernetes sends SIGTERM when it deletes a pod; SIGUSR1 lets a node agent (or a
person) ask for a yield without the kubelet's deadline already running.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
REQUESTED = 1
"""The code of a yield asked for in code (``request_yield``), below every signal number."""

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def describe(code: int) -> str:
    """A yield code as a reason: the signal's name, or ``requested``."""
    if code == REQUESTED:
        return "requested"
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


class YieldSignals:
    """Records the strongest yield request seen; installs its handlers, restores the old ones.

    The request is an int (a signal number, or ``REQUESTED``) so that ranks can
    agree on it with one MAX all-reduce, and the checkpoint can say why.
    """

    def __init__(self, signals: Iterable[signal.Signals] = DEFAULT_SIGNALS) -> None:
        self._signals = tuple(signals)
        self._previous: dict[signal.Signals, _Handler] = {}
        self._code = 0

    @property
    def code(self) -> int:
        """0 while no yield was requested."""
        return self._code

    def request(self, code: int = REQUESTED) -> None:
        self._code = max(self._code, code)

    def install(self) -> None:
        """Take over the signals; only the main thread may (Python's rule), so elsewhere warn."""
        if threading.current_thread() is not threading.main_thread():
            logger.warning(
                "not in the main thread: %s handlers not installed; only request_yield() works",
                ", ".join(s.name for s in self._signals),
            )
            return
        for sig in self._signals:
            if sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        """Give the signals back to whoever had them (the default SIGTERM kills again)."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self._code = max(self._code, signum)
