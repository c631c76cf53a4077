"""Bounded attempts at one message: retried a few times, then a dead letter, never a crash loop.

What an agent decides about a message is pure and deterministic: a message
the decoder or the core rejects goes to dead letters at once (running a pure
function again gives the same answer). What it then does is not: sending the
decisions, commands and alerts, enforcing holds, forwarding a summary. Those
can fail for a moment (a leader election, a timeout) or for good (an output
larger than the producer accepts). Raising out of a Faust agent restarts it
and, after a worker restart, reads the same message again: one such message
would stop its partition forever (issue 11 saw exactly that).

``attempt`` runs the effects of one message up to ``attempts`` times with a
doubling pause; if they still fail, it returns the reason, and the agent puts
the message on the dead-letter topic with it and moves on to the next offset.
Every effect is idempotent downstream (decision and command ids are derived
from the input's position), so a partly sent outcome sent again is harmless.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class Attempts:
    """How hard an agent tries before a message goes to dead letters (the settings' knobs)."""

    attempts: int = 3
    """``GPUYIELD_AGENT_MAX_ATTEMPTS``: tries in all, the first included."""
    backoff_s: float = 0.5
    """``GPUYIELD_AGENT_RETRY_BACKOFF_S``: the pause before the second try, doubled after."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s must not be negative, got {self.backoff_s}")


async def attempt(
    work: Callable[[], Awaitable[object]],
    what: str,
    policy: Attempts,
    *,
    sleep: Sleep = asyncio.sleep,
) -> str | None:
    """Run ``work`` until it succeeds, at most ``policy.attempts`` times.

    Returns None once it succeeded, else the dead letter's reason: how many
    tries and the last error. Cancellation (a stopping worker) is never
    swallowed.
    """
    last = ""
    for number in range(1, policy.attempts + 1):
        try:
            await work()
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.warning("%s: try %d of %d failed (%s)", what, number, policy.attempts, last)
            if number < policy.attempts:
                await sleep(policy.backoff_s * 2 ** (number - 1))
    return f"failed {policy.attempts} times ({what}): {last}"
