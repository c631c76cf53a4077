"""A hard deadline on shutdown: a stop that hangs still ends the process, and says so.

Every long-running gpuyield process (worker, node agent, watch, archive,
alerts, broker, demo) stops in order on SIGTERM or Ctrl-C: it commits what it
has done and closes its clients. An orderly stop can hang, though: a consumer
waiting on a broker that is gone, a commit retried forever, a rebalance that
never ends (issue 11 saw a progress agent whose SIGTERM never finished). A
supervisor then waits for its own grace period and SIGKILLs, and a person at a
terminal waits for nothing.

``ShutdownDeadline.arm()`` is called by the stop signal's handler. It starts a
daemon thread (a thread, so a blocked event loop cannot hold it up) that,
``bound_s`` later, logs one line naming the process and the bound and leaves
with ``os._exit(EXIT_SHUTDOWN_OVERRUN)``. A process that stops in time never
hears from it. Whatever was not committed is read again after the restart:
every consumer is at-least-once with idempotent handling.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_SHUTDOWN_OVERRUN = 124
"""The status of a process that the deadline ended (``timeout``'s convention)."""

DEFAULT_SHUTDOWN_TIMEOUT_S = 20.0
"""Under Kubernetes' default terminationGracePeriodSeconds (30 s), so the
process ends itself, with its log line, before the kubelet's SIGKILL."""


class ShutdownDeadline:
    """Ends the process ``bound_s`` after ``arm()`` unless it has ended by then."""

    def __init__(self, what: str, bound_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> None:
        if bound_s <= 0:
            raise ValueError(f"a shutdown bound must be positive, got {bound_s}")
        self.what = what
        self.bound_s = bound_s
        self._lock = threading.Lock()
        self._armed_at: float | None = None

    @property
    def armed(self) -> bool:
        return self._armed_at is not None

    def arm(self) -> None:
        """Start the countdown (the first call only: a second Ctrl-C does not extend it)."""
        with self._lock:
            if self._armed_at is not None:
                return
            self._armed_at = time.monotonic()
        log.info("%s stopping; it ends within %g s at the latest", self.what, self.bound_s)
        threading.Thread(
            target=self._expire, name="gpuyield-shutdown-deadline", daemon=True
        ).start()

    def _expire(self) -> None:
        time.sleep(self.bound_s)
        log.critical(
            "%s did not stop within %g s of the stop signal: exiting now (status %d); "
            "what it had not committed is read again after a restart",
            self.what,
            self.bound_s,
            EXIT_SHUTDOWN_OVERRUN,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(EXIT_SHUTDOWN_OVERRUN)

    def then(self, stop: Callable[[], object]) -> Callable[..., None]:
        """A stop-signal handler: arm the deadline, then ``stop()``.

        It takes and ignores any arguments, so it serves ``signal.signal``
        (signum, frame) and ``loop.add_signal_handler`` (none) alike.
        """

        def handler(*_: object) -> None:
            self.arm()
            stop()

        return handler
