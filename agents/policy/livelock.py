"""Livelock detection: preempt -> requeue -> preempt cycles, found and broken.

Three patterns are recognised over a sliding window:

- *repeat*: one job evicted ``max_evictions`` times inside the window;
- *mutual*: job A's demand evicted B and B's demand evicted A inside the window;
- *cycle*: a job evicted again less than ``cycle_s`` after it resumed.

Each incident is reported once per job per window, so an alert fires once.
The guard also answers how long an evicted job must wait before it resumes:
an exponential backoff in the number of recent evictions, so a cycle slows
down geometrically instead of spinning (the planner's eviction limit then
stops it for good).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum


class Pattern(StrEnum):
    REPEAT = "repeat"
    MUTUAL = "mutual"
    CYCLE = "cycle"


@dataclass(frozen=True, slots=True)
class Incident:
    job: str
    pattern: Pattern
    at: float
    detail: str


@dataclass(frozen=True, slots=True)
class Eviction:
    victim: str
    by: str | None  # the preemptor whose demand caused it
    at: float


@dataclass(frozen=True, slots=True)
class LivelockGuard:
    """Recent evictions and resumes; a pure value updated by ``observe_*``."""

    window_s: float = 86400.0
    max_evictions: int = 3
    cycle_s: float = 1800.0
    backoff_base_s: float = 300.0
    backoff_max_s: float = 4 * 3600.0
    evictions: tuple[Eviction, ...] = ()
    resumed_at: Mapping[str, float] = field(default_factory=dict)
    reported: Mapping[str, float] = field(default_factory=dict)  # job -> last incident time

    def _recent(self, now: float) -> tuple[Eviction, ...]:
        return tuple(e for e in self.evictions if 0 <= now - e.at <= self.window_s)

    def observe_eviction(
        self, victim: str, by: str | None, now: float
    ) -> tuple[LivelockGuard, tuple[Incident, ...]]:
        """Record that ``victim`` was evicted for ``by``; return any new incidents."""
        recent = (*self._recent(now), Eviction(victim, by, now))
        found: list[Incident] = []
        count = sum(1 for e in recent if e.victim == victim)
        if count >= self.max_evictions:
            found.append(
                Incident(
                    victim,
                    Pattern.REPEAT,
                    now,
                    f"evicted {count} times in {self.window_s:.0f} s",
                )
            )
        if by is not None and any(e.victim == by and e.by == victim for e in recent):
            found.append(
                Incident(victim, Pattern.MUTUAL, now, f"'{victim}' and '{by}' evict each other")
            )
        resumed = self.resumed_at.get(victim)
        if resumed is not None and 0 <= now - resumed < self.cycle_s:
            found.append(
                Incident(
                    victim,
                    Pattern.CYCLE,
                    now,
                    f"evicted {now - resumed:.0f} s after it resumed",
                )
            )
        reported = dict(self.reported)
        new: list[Incident] = []
        for incident in found:
            last = reported.get(incident.job)
            if last is None or now - last > self.window_s:
                reported[incident.job] = now
                new.append(incident)
        guard = replace(self, evictions=recent, reported=reported)
        return guard, tuple(new[:1])  # one alert per job per window, the first pattern

    def observe_resume(self, job: str, now: float) -> LivelockGuard:
        resumed = dict(self.resumed_at)
        resumed[job] = now
        return replace(self, resumed_at=resumed)

    def pruned(self, now: float) -> LivelockGuard:
        """The guard without what none of its rules can read any more at ``now`` or later.

        An eviction outside the window counts for nothing, a report older than
        the window no longer silences a new one, and a resume longer than
        ``cycle_s`` ago cannot make a cycle: keeping them only grows the state.
        """
        evictions = self._recent(now)
        resumed = {j: t for j, t in self.resumed_at.items() if now - t < self.cycle_s}
        reported = {j: t for j, t in self.reported.items() if now - t <= self.window_s}
        if (
            len(evictions) == len(self.evictions)
            and len(resumed) == len(self.resumed_at)
            and len(reported) == len(self.reported)
        ):
            return self
        return replace(self, evictions=evictions, resumed_at=resumed, reported=reported)

    def recent_evictions(self, job: str, now: float) -> int:
        return sum(1 for e in self._recent(now) if e.victim == job)

    def resume_delay(self, job: str, now: float) -> float:
        """Seconds an evicted job waits before it may resume: 0, then base * 2^(n-1)."""
        n = self.recent_evictions(job, now)
        if n == 0:
            return 0.0
        return float(min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (n - 1)))
