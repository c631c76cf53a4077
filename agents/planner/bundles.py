"""Gang integrity (rule 4): which sets of a job's pods may be evicted together.

The Python form of Volcano's gang rule and its "safe" and "whole" bundles:
pods above ``min_available`` of an elastic job may go one by one; once fewer
than ``min_available`` would be left running, the whole job goes.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuyield.agents.planner.session import CandidateFacts


def close_gang(candidate: CandidateFacts, evicted: frozenset[int]) -> frozenset[int]:
    """``evicted`` grown to the whole job when it would leave a broken gang."""
    remaining = len(candidate.pods) - len(evicted)
    if 0 < remaining < candidate.min_running:
        return frozenset(range(len(candidate.pods)))
    return evicted


def keeps_gang(candidate: CandidateFacts, evicted: frozenset[int]) -> bool:
    """True when the job runs none of its pods, or at least ``min_available``."""
    remaining = len(candidate.pods) - len(evicted)
    return remaining == 0 or remaining >= candidate.min_running


def is_whole(candidate: CandidateFacts, evicted: frozenset[int]) -> bool:
    return len(evicted) == len(candidate.pods)


def reprieves(candidate: CandidateFacts, evicted: frozenset[int]) -> Iterator[frozenset[int]]:
    """The single-step reductions of readings 0001 §9, most generous first.

    Spare the job entirely, then spare one evicted pod where the job still
    keeps its gang afterwards (pods in name order).
    """
    yield frozenset()
    for pod in sorted(evicted):
        smaller = evicted - {pod}
        if smaller and keeps_gang(candidate, smaller):
            yield smaller
