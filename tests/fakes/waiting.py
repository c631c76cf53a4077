"""Wait for a condition, never for a fixed time.

A fixed sleep is either too short on a slow machine or wasted on a fast one;
these poll a predicate and fail with a message naming what never happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEFAULT_TIMEOUT_S = 10.0


def _describe(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


async def eventually(
    predicate: Callable[[], bool],
    what: str | Callable[[], str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Poll ``predicate`` on the running loop (letting it work) until true or the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {_describe(what)}")
        await asyncio.sleep(0.005)


def eventually_sync(
    predicate: Callable[[], bool],
    what: str | Callable[[], str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """``eventually`` for code with no event loop (other threads do the work)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {_describe(what)}")
        time.sleep(0.005)
