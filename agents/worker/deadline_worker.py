"""faust's worker, whose stop signals also arm the hard shutdown deadline (issue 11).

faust stops in order on SIGTERM or SIGINT; ``ShutdownDeadline`` ends the
process anyway if that stop hangs (issue 11 saw a progress agent whose
SIGTERM never finished). Used by ``gpuyield worker`` and the demo's worker.
"""

from __future__ import annotations

import signal
from typing import Any

import faust

from gpuyield.streams.shutdown import ShutdownDeadline


class DeadlineWorker(faust.Worker):
    """``faust.Worker`` that arms ``deadline`` when a stop signal arrives."""

    def __init__(self, *args: Any, deadline: ShutdownDeadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def _schedule_shutdown(self, signal: signal.Signals) -> None:
        self.deadline.arm()
        super()._schedule_shutdown(signal)
