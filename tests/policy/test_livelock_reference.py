"""The livelock guard finds what a plain filter over the window's evictions finds.

The guard keeps its evictions in a log that successive guards share, indexed
by victim and by pair (``eviction_log``). The reference here is the guard as
its rules read: the window's evictions as a tuple, filtered and counted on
every call. Random histories (times mostly moving on, sometimes going back,
an eviction reported at a time that is not finite, and older guards observed
again, so several guards append to one log) must give the same incidents, the
same evictions, reports and resumes, and the same resume delays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyield.agents.policy.livelock import Eviction, Incident, LivelockGuard, Pattern

JOBS = ("sweep", "ft-a", "ft-b", "prod")
WINDOW_S = 600.0


@dataclass(frozen=True)
class ReferenceGuard:
    """The livelock rules, read literally: every question a pass over the window."""

    window_s: float
    max_evictions: int
    cycle_s: float
    backoff_base_s: float = 300.0
    backoff_max_s: float = 4 * 3600.0
    evictions: tuple[Eviction, ...] = ()
    resumed_at: Mapping[str, float] = field(default_factory=dict)
    reported: Mapping[str, float] = field(default_factory=dict)

    def recent(self, now: float) -> tuple[Eviction, ...]:
        return tuple(e for e in self.evictions if 0 <= now - e.at <= self.window_s)

    def observe_eviction(
        self, victim: str, by: str | None, now: float
    ) -> tuple[ReferenceGuard, tuple[Incident, ...]]:
        recent = (*self.recent(now), Eviction(victim, by, now))
        found: list[Incident] = []
        count = sum(1 for e in recent if e.victim == victim)
        if count >= self.max_evictions:
            found.append(
                Incident(
                    victim, Pattern.REPEAT, now, f"evicted {count} times in {self.window_s:.0f} s"
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
                    victim, Pattern.CYCLE, now, f"evicted {now - resumed:.0f} s after it resumed"
                )
            )
        reported = dict(self.reported)
        new: list[Incident] = []
        for incident in found:
            last = reported.get(incident.job)
            if last is None or now - last > self.window_s:
                reported[incident.job] = now
                new.append(incident)
        return replace(self, evictions=recent, reported=reported), tuple(new[:1])

    def observe_resume(self, job: str, now: float) -> ReferenceGuard:
        return replace(self, resumed_at={**self.resumed_at, job: now})

    def pruned(self, now: float) -> ReferenceGuard:
        return replace(
            self,
            evictions=self.recent(now),
            resumed_at={j: t for j, t in self.resumed_at.items() if now - t < self.cycle_s},
            reported={j: t for j, t in self.reported.items() if now - t <= self.window_s},
        )

    def resume_delay(self, job: str, now: float) -> float:
        n = sum(1 for e in self.recent(now) if e.victim == job)
        if n == 0:
            return 0.0
        return float(min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (n - 1)))


def same(guard: LivelockGuard, reference: ReferenceGuard) -> bool:
    return (
        guard.evictions == reference.evictions
        and dict(guard.resumed_at) == dict(reference.resumed_at)
        and dict(guard.reported) == dict(reference.reported)
    )


# One step: (kind, which earlier guard, job, other job, seconds on from the latest time).
steps = st.lists(
    st.tuples(
        st.sampled_from(["evict", "evict", "evict", "evict-nobody", "resume", "prune", "delay"]),
        st.integers(min_value=0, max_value=1_000),
        st.sampled_from(JOBS),
        st.sampled_from(JOBS),
        st.one_of(
            st.integers(min_value=0, max_value=400).map(float),
            st.integers(min_value=-700, max_value=-1).map(float),  # a clock that went back
            st.just(math.inf),  # a time that is not finite
        ),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(min_value=1, max_value=4))
def test_the_guard_agrees_with_a_filter_over_the_window(
    history: list[tuple[str, int, str, str, float]], max_evictions: int
) -> None:
    guards = [LivelockGuard(window_s=WINDOW_S, max_evictions=max_evictions, cycle_s=300.0)]
    references = [ReferenceGuard(window_s=WINDOW_S, max_evictions=max_evictions, cycle_s=300.0)]
    now = 0.0
    for kind, which, job, other, step in history:
        # Mostly the latest guard (as the engine and the decider use it), sometimes an older one.
        pick = len(guards) - 1 if which % 3 else which % len(guards)
        guard, reference = guards[pick], references[pick]
        at = now + step if math.isfinite(step) else step
        if math.isfinite(at):
            now = at
        if kind in ("evict", "evict-nobody"):
            by = other if kind == "evict" else None
            guard, found = guard.observe_eviction(job, by, at)
            reference, expected = reference.observe_eviction(job, by, at)
            assert found == expected
        elif kind == "resume":
            guard, reference = guard.observe_resume(job, at), reference.observe_resume(job, at)
        elif kind == "prune":
            guard, reference = guard.pruned(at), reference.pruned(at)
        else:
            assert guard.resume_delay(job, at) == reference.resume_delay(job, at)
        assert same(guard, reference)
        guards.append(guard)
        references.append(reference)
    for guard, reference in zip(guards, references, strict=True):
        assert same(guard, reference), "a later guard changed an earlier one"


def test_a_day_of_thousands_of_evictions_counts_the_same_incidents() -> None:
    """An overloaded pool's day: the log outgrows its window many times over and is compacted."""
    guard = LivelockGuard(window_s=WINDOW_S, max_evictions=3, cycle_s=300.0)
    reference = ReferenceGuard(window_s=WINDOW_S, max_evictions=3, cycle_s=300.0)
    incidents: list[Incident] = []
    for k in range(12_000):
        victim, by = f"job-{k % 29}", f"job-{(k * 7) % 31}"
        at = k * 7.0
        guard, found = guard.observe_eviction(victim, by, at)
        reference, expected = reference.observe_eviction(victim, by, at)
        assert found == expected
        incidents.extend(found)
        if k % 5 == 0:
            guard = guard.observe_resume(by, at)
            reference = reference.observe_resume(by, at)
    assert same(guard, reference)
    assert {i.pattern for i in incidents} == set(Pattern)


def test_a_guard_read_back_from_its_record_equals_the_one_saved() -> None:
    """The decider saves evictions, resumes and reports, and builds the guard anew from them."""
    guard = LivelockGuard(window_s=WINDOW_S)
    guard, _ = guard.observe_eviction("sweep", "prod", 10.0)
    guard, _ = guard.observe_eviction("ft-a", "prod", 20.0)
    guard = guard.observe_resume("sweep", 30.0)
    again = LivelockGuard(
        window_s=WINDOW_S,
        evictions=guard.evictions,
        resumed_at=dict(guard.resumed_at),
        reported=dict(guard.reported),
    )
    assert again == guard
    assert again.resume_delay("sweep", 40.0) == guard.resume_delay("sweep", 40.0) == 300.0
