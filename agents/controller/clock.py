"""The decider's clock: trusted time, moved by no single message more than a bound.

Every input carries a time set by a gpuyield process: the watcher's
``observed_at``, the progress agent's ``updated_at`` (the worker's clock since
issue 11, not the trainer's), a node agent's ``acked_at``, a worker's tick.
Still, a skewed host or a forged message must not move the clock far, because
the clock is saved with the table and a jump never goes away by itself: one
heartbeat stamped ``1e308`` once broke every later snapshot, and a trainer a
year ahead put every yield deadline a year away.

So:

- ticks are the reference: the workers' own clocks (only the worker's
  principal may write ``gpuyield.ticks``; deploy/README.md shows the ACL).
  A tick moves the clock forward to its time, however far (a worker back
  after an outage), and a tick more than ``max_skew_s`` *behind* the clock
  means the clock itself was poisoned (before this rule, or by a skewed
  host): the clock is set back to the tick, and the times the table holds
  beyond it are clamped (``clamp_times``), so a hold or a cooldown stamped
  in that future ends instead of lasting a year;
- any other message (a watch event, a progress summary, an ack) stamped more
  than ``max_skew_s`` ahead of the clock moves it by ``max_skew_s`` only, and
  is flagged: an alert says which input and by how much. Between two ticks
  (2 s apart) such messages cannot take the clock further than the bound
  beyond the workers' time.

The rule is pure and the ticks are on their topic, so a replay derives the
same clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TIME_KEYS = frozenset(
    {
        "now",
        "at",
        "since",
        "until",
        "deadline",
        "issued_at",
        "acked_at",
        "settled_at",
        "done_at",
        "decided_at",
        "last_round",
        "raised_at",
        "resumed_at",
        "reported",
        "updated_at",
        "first_seen_at",
        "last_checkpoint_at",
        "started_at",
        "created_at",
        "resume_issued",
        "capacity_since",
        "resolved_at",
    }
)
"""Record fields that hold Unix times (a dict or list under one holds times too)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """The clock after one message, and what was wrong with the message's time."""

    now: float
    tick: float | None = None
    """The newest tick's time, after this message."""
    ahead_s: float | None = None
    """How far beyond the bound the message claimed to be (it was clamped)."""
    repaired_from: float | None = None
    """The poisoned clock a tick set back."""


def advance(
    clock: float | None, tick: float | None, at: float, *, is_tick: bool, max_skew_s: float
) -> Reading:
    """The clock after a message stamped ``at``; see the module docstring.

    ``tick`` is the newest tick's time (None before the first): other inputs
    may take the clock at most ``max_skew_s`` beyond it, so no run of them
    drifts the clock away from the workers' time. Before any tick (a decider
    fed by hand, a test) the bound is taken from the clock itself.
    """
    if clock is None:
        return Reading(now=at, tick=at if is_tick else None)
    if is_tick:
        if at < clock - max_skew_s:
            return Reading(now=at, tick=at, repaired_from=clock)
        return Reading(now=max(clock, at), tick=at)
    ceiling = (clock if tick is None else tick) + max_skew_s
    if at > ceiling:
        return Reading(now=max(clock, ceiling), tick=tick, ahead_s=at - ceiling)
    return Reading(now=max(clock, at), tick=tick)


def clamp_times(value: Any, limit: float, *, is_time: bool = False) -> Any:
    """``value`` (a JSON record) with every time beyond ``limit`` brought back to it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return min(value, limit) if is_time else value
    if isinstance(value, list):
        return [clamp_times(v, limit, is_time=is_time) for v in value]
    if isinstance(value, Mapping):
        return {
            k: clamp_times(v, limit, is_time=is_time or k in TIME_KEYS) for k, v in value.items()
        }
    return value
