"""Time as an input: the agent reads the wall clock and sleeps only through these.

Deadlines in yield commands are Unix seconds set by the controller, so the
agent needs the wall clock (not a monotonic one) to honour them; tests pass a
fake clock and a sleep that advances it, so no test waits out a grace period.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Clock = Callable[[], float]
"""Unix seconds now."""

Sleep = Callable[[float], Awaitable[None]]
"""Wait this many seconds (may return early only if cancelled)."""


def system_clock() -> float:
    return time.time()


async def system_sleep(seconds: float) -> None:
    await asyncio.sleep(max(0.0, seconds))
