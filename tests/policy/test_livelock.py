"""The livelock guard: each cycle pattern is found, reported once, and slowed down."""

from __future__ import annotations

from gpuyield.agents.policy.livelock import LivelockGuard, Pattern

DAY = 86400.0


def test_a_third_eviction_inside_the_window_is_a_repeat_incident() -> None:
    guard = LivelockGuard(max_evictions=3)
    guard, first = guard.observe_eviction("sweep", "ft-a", 0.0)
    guard, second = guard.observe_eviction("sweep", "ft-b", 3600.0)
    guard, third = guard.observe_eviction("sweep", "ft-c", 7200.0)
    assert first == second == ()
    assert [i.pattern for i in third] == [Pattern.REPEAT]


def test_evictions_outside_the_window_do_not_count() -> None:
    guard = LivelockGuard(max_evictions=3, window_s=DAY)
    guard, _ = guard.observe_eviction("sweep", "ft-a", 0.0)
    guard, _ = guard.observe_eviction("sweep", "ft-b", 1.0)
    guard, found = guard.observe_eviction("sweep", "ft-c", DAY + 2.0)
    assert found == ()


def test_two_jobs_evicting_each_other_is_a_mutual_incident() -> None:
    guard = LivelockGuard()
    guard, _ = guard.observe_eviction("a", "b", 0.0)
    guard, found = guard.observe_eviction("b", "a", 60.0)
    assert [i.pattern for i in found] == [Pattern.MUTUAL]


def test_an_eviction_soon_after_a_resume_is_a_cycle_incident() -> None:
    guard = LivelockGuard(cycle_s=1800.0).observe_resume("sweep", 1000.0)
    guard, found = guard.observe_eviction("sweep", "ft", 1500.0)
    assert [i.pattern for i in found] == [Pattern.CYCLE]


def test_an_incident_is_reported_once_per_job_per_window() -> None:
    guard = LivelockGuard(max_evictions=1)
    guard, first = guard.observe_eviction("sweep", "ft-a", 0.0)
    guard, again = guard.observe_eviction("sweep", "ft-b", 60.0)
    assert len(first) == 1
    assert again == ()


def test_the_resume_backoff_doubles_with_each_recent_eviction() -> None:
    guard = LivelockGuard(backoff_base_s=300.0, backoff_max_s=4 * 3600.0, max_evictions=9)
    assert guard.resume_delay("sweep", 0.0) == 0.0
    delays = []
    for k in range(4):
        guard, _ = guard.observe_eviction("sweep", None, float(k))
        delays.append(guard.resume_delay("sweep", float(k)))
    assert delays == [300.0, 600.0, 1200.0, 2400.0]


def test_the_resume_backoff_is_capped() -> None:
    guard = LivelockGuard(backoff_base_s=300.0, backoff_max_s=900.0, max_evictions=99)
    for k in range(6):
        guard, _ = guard.observe_eviction("sweep", None, float(k))
    assert guard.resume_delay("sweep", 6.0) == 900.0
