"""The livelock guard's evictions: one append-only log, indexed by victim and by pair.

The guard is a value, and each eviction it observes returns a new guard that
holds the window's evictions. Filtering a tuple of the window's evictions on
every eviction (and counting a victim's by a scan) made a day of stock
Volcano's thousands of evictions in an overloaded pool quadratic. Guards
derived from one another instead share one log and each sees one range of
it; the per-victim and per-pair position lists turn the guard's counts into
two binary searches.

A log is only ever appended to by the guard whose range ends at its end; any
other guard copies its range into a new log first (copy on write), so no
guard ever sees another's later evictions.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Eviction:
    victim: str
    by: str | None  # the preemptor whose demand caused it
    at: float


class EvictionLog:
    """Evictions in the order they were added, with where each victim and pair occurs."""

    __slots__ = ("at", "by_pair", "by_victim", "entries", "ordered")

    def __init__(self, entries: Iterable[Eviction] = ()) -> None:
        self.entries: list[Eviction] = []
        self.at: list[float] = []
        self.by_victim: dict[str, list[int]] = {}
        self.by_pair: dict[tuple[str, str | None], list[int]] = {}
        # Finite times that never go back: a time window is then one range of positions.
        self.ordered = True
        for eviction in entries:
            self.append(eviction)

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, eviction: Eviction) -> None:
        at = eviction.at
        if self.ordered and (not math.isfinite(at) or (self.at and not at >= self.at[-1])):
            self.ordered = False
        position = len(self.entries)
        self.entries.append(eviction)
        self.at.append(at)
        self.by_victim.setdefault(eviction.victim, []).append(position)
        self.by_pair.setdefault((eviction.victim, eviction.by), []).append(position)

    def window(self, lo: int, hi: int, now: float, window_s: float) -> tuple[int, int] | None:
        """The positions in ``[lo, hi)`` with ``0 <= now - at <= window_s``, if they are a range.

        They are when the times are ordered and ``now`` is finite: ``now - at``
        then never grows along the log, so the evictions too old form a prefix
        and those after ``now`` a suffix. None when the caller must filter.
        """
        if not self.ordered or not math.isfinite(now):
            return None
        at = self.at
        start = bisect_left(at, True, lo, hi, key=lambda t: now - t <= window_s)
        end = bisect_left(at, True, start, hi, key=lambda t: now - t < 0)
        return start, end

    def victim_count(self, victim: str, lo: int, hi: int) -> int:
        """How many of the evictions at positions ``[lo, hi)`` evicted ``victim``."""
        positions = self.by_victim.get(victim)
        if not positions:
            return 0
        return bisect_left(positions, hi) - bisect_left(positions, lo)

    def has_pair(self, victim: str, by: str | None, lo: int, hi: int) -> bool:
        """Whether ``by``'s demand evicted ``victim`` at a position in ``[lo, hi)``."""
        positions = self.by_pair.get((victim, by))
        if not positions:
            return False
        first = bisect_left(positions, lo)
        return first < len(positions) and positions[first] < hi
