"""When a suspended job may resume: when it fits, and without feeding a livelock.

A job gpuyield suspended resumes from its checkpoint when the planner says
it fits again without evicting anyone. Two guards keep that from flapping:

- the livelock guard's backoff (``LivelockGuard.resume_delay``): after n
  recent evictions the job waits base * 2^(n-1) before it may resume;
- no backfilling in front of a waiting heavier job: while a job of higher
  priority in the same or a reclaiming queue still waits for GPUs, a
  suspended job does not take them, since it would only be evicted again
  (the preempt -> requeue -> preempt cycle the field notes describe).
"""

from __future__ import annotations

from collections.abc import Iterable


def may_resume(
    priority: float,
    now: float,
    not_before: float,
    waiting_priorities: Iterable[float],
) -> bool:
    """True when a suspended job of ``priority`` may try to resume at ``now``."""
    if now < not_before:
        return False
    return all(p <= priority for p in waiting_priorities)
