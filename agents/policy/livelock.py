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

from collections.abc import Iterable, Mapping
from dataclasses import FrozenInstanceError, dataclass
from enum import StrEnum
from typing import Any

from gpuyield.agents.policy.eviction_log import Eviction, EvictionLog

__all__ = ["Eviction", "Incident", "LivelockGuard", "Pattern"]


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


_COMPACT_AFTER = 4096  # evictions out of every guard's window before a log is copied smaller


class LivelockGuard:
    """Recent evictions and resumes; a pure value updated by ``observe_*``.

    ``evictions`` are those still inside the window, in the order observed.
    They live in an ``EvictionLog`` that successive guards share (each sees
    one range of it), so observing an eviction costs a few binary searches
    instead of a pass over the window's evictions.
    """

    __slots__ = (
        "_hi",
        "_lo",
        "_log",
        "backoff_base_s",
        "backoff_max_s",
        "cycle_s",
        "max_evictions",
        "reported",
        "resumed_at",
        "window_s",
    )

    window_s: float
    max_evictions: int
    cycle_s: float
    backoff_base_s: float
    backoff_max_s: float
    resumed_at: Mapping[str, float]
    reported: Mapping[str, float]  # job -> last incident time
    _log: EvictionLog
    _lo: int
    _hi: int

    def __init__(
        self,
        window_s: float = 86400.0,
        max_evictions: int = 3,
        cycle_s: float = 1800.0,
        backoff_base_s: float = 300.0,
        backoff_max_s: float = 4 * 3600.0,
        evictions: Iterable[Eviction] = (),
        resumed_at: Mapping[str, float] | None = None,
        reported: Mapping[str, float] | None = None,
    ) -> None:
        log = EvictionLog(evictions)
        self._set(
            window_s=window_s,
            max_evictions=max_evictions,
            cycle_s=cycle_s,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            resumed_at={} if resumed_at is None else resumed_at,
            reported={} if reported is None else reported,
            _log=log,
            _lo=0,
            _hi=len(log),
        )

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field '{name}'")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field '{name}'")

    def __reduce__(self) -> tuple[type[LivelockGuard], tuple[object, ...]]:
        """Copied and pickled by its settings and contents, never by its shared log."""
        return (LivelockGuard, self._key())

    def _with(
        self,
        log: EvictionLog,
        lo: int,
        hi: int,
        *,
        resumed_at: Mapping[str, float] | None = None,
        reported: Mapping[str, float] | None = None,
    ) -> LivelockGuard:
        """This guard's settings over ``log[lo:hi]``: the one way a new guard is derived."""
        guard = object.__new__(LivelockGuard)
        guard._set(
            window_s=self.window_s,
            max_evictions=self.max_evictions,
            cycle_s=self.cycle_s,
            backoff_base_s=self.backoff_base_s,
            backoff_max_s=self.backoff_max_s,
            resumed_at=self.resumed_at if resumed_at is None else resumed_at,
            reported=self.reported if reported is None else reported,
            _log=log,
            _lo=lo,
            _hi=hi,
        )
        return guard

    @property
    def evictions(self) -> tuple[Eviction, ...]:
        return tuple(self._log.entries[self._lo : self._hi])

    def _key(self) -> tuple[object, ...]:
        return (
            self.window_s,
            self.max_evictions,
            self.cycle_s,
            self.backoff_base_s,
            self.backoff_max_s,
            self.evictions,
            dict(self.resumed_at),
            dict(self.reported),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LivelockGuard):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # its mappings are not hashable

    def __repr__(self) -> str:
        return (
            f"LivelockGuard(window_s={self.window_s!r}, max_evictions={self.max_evictions!r}, "
            f"cycle_s={self.cycle_s!r}, backoff_base_s={self.backoff_base_s!r}, "
            f"backoff_max_s={self.backoff_max_s!r}, evictions={self.evictions!r}, "
            f"resumed_at={self.resumed_at!r}, reported={self.reported!r})"
        )

    def _recent(self, now: float) -> tuple[EvictionLog, int, int]:
        """The evictions inside the window at ``now``, as a range of a log.

        The guard's own log when they are one range of it; otherwise a new log
        of them, filtered in order (times that went back, or a time that is
        not finite).
        """
        log = self._log
        span = log.window(self._lo, self._hi, now, self.window_s)
        if span is not None:
            return log, span[0], span[1]
        recent = EvictionLog(
            e for e in log.entries[self._lo : self._hi] if 0 <= now - e.at <= self.window_s
        )
        return recent, 0, len(recent)

    def observe_eviction(
        self, victim: str, by: str | None, now: float
    ) -> tuple[LivelockGuard, tuple[Incident, ...]]:
        """Record that ``victim`` was evicted for ``by``; return any new incidents."""
        log, lo, hi = self._recent(now)
        if hi != len(log) or (lo > _COMPACT_AFTER and lo > hi - lo):
            # Another guard appended here, later evictions were dropped, or most
            # of the log is out of the window: this guard's range gets a log of its own.
            log, lo, hi = EvictionLog(log.entries[lo:hi]), 0, hi - lo
        log.append(Eviction(victim, by, now))
        hi += 1
        found: list[Incident] = []
        count = log.victim_count(victim, lo, hi)
        if count >= self.max_evictions:
            found.append(
                Incident(
                    victim,
                    Pattern.REPEAT,
                    now,
                    f"evicted {count} times in {self.window_s:.0f} s",
                )
            )
        if by is not None and log.has_pair(by, victim, lo, hi):
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
        reported: dict[str, float] | None = None
        new: list[Incident] = []
        for incident in found:
            last = (self.reported if reported is None else reported).get(incident.job)
            if last is None or now - last > self.window_s:
                if reported is None:
                    reported = dict(self.reported)
                reported[incident.job] = now
                new.append(incident)
        guard = self._with(log, lo, hi, reported=reported)
        return guard, tuple(new[:1])  # one alert per job per window, the first pattern

    def observe_resume(self, job: str, now: float) -> LivelockGuard:
        resumed = dict(self.resumed_at)
        resumed[job] = now
        return self._with(self._log, self._lo, self._hi, resumed_at=resumed)

    def pruned(self, now: float) -> LivelockGuard:
        """The guard without what none of its rules can read any more at ``now`` or later.

        An eviction outside the window counts for nothing, a report older than
        the window no longer silences a new one, and a resume longer than
        ``cycle_s`` ago cannot make a cycle: keeping them only grows the state.
        """
        log, lo, hi = self._recent(now)
        resumed = {j: t for j, t in self.resumed_at.items() if now - t < self.cycle_s}
        reported = {j: t for j, t in self.reported.items() if now - t <= self.window_s}
        if (
            hi - lo == self._hi - self._lo
            and len(resumed) == len(self.resumed_at)
            and len(reported) == len(self.reported)
        ):
            return self
        return self._with(log, lo, hi, resumed_at=resumed, reported=reported)

    def recent_evictions(self, job: str, now: float) -> int:
        log, lo, hi = self._recent(now)
        return log.victim_count(job, lo, hi)

    def resume_delay(self, job: str, now: float) -> float:
        """Seconds an evicted job waits before it may resume: 0, then base * 2^(n-1)."""
        n = self.recent_evictions(job, now)
        if n == 0:
            return 0.0
        return float(min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (n - 1)))
