"""Gang integrity (rule 4): which sets of a job's pods may be evicted together.

The Python form of Volcano's gang rule and its "safe" and "whole" bundles:
pods above ``min_available`` of an elastic job may go one by one; once fewer
than ``min_available`` would be left running, the whole job goes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

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


def surplus_gpus(
    candidate: CandidateFacts, sizes: Sequence[int], running: int | None = None
) -> int | None:
    """The most GPUs of ``sizes`` (its pods on one node) that ``candidate`` can lose
    without its gang breaking: its largest surplus pods there. None when every one of
    them can go (the surplus covers them, or they are all it runs). ``running``: the
    pods it still runs, where some are evicted already (all of them by default)."""
    if running is None:
        running = len(candidate.pods)
    surplus = running - candidate.min_running
    if surplus >= len(sizes) or len(sizes) == running:
        return None
    return sum(sorted(sizes, reverse=True)[: max(0, surplus)])


def is_whole(candidate: CandidateFacts, evicted: frozenset[int]) -> bool:
    return len(evicted) == len(candidate.pods)


def reprieves(candidate: CandidateFacts, evicted: frozenset[int]) -> Iterator[frozenset[int]]:
    """Smaller gang-valid subsets of ``evicted`` to try before accepting a plan (0001 §9).

    Spare the job entirely, then keep one more pod where the gang allows it.
    For a whole-job eviction of an elastic job that loses nothing, also the
    largest surplus-only subsets (exactly ``min_available`` pods kept running,
    interchangeable pods collapsed): with lost work above zero a smaller
    subset is strictly cheaper and the search itself prefers it, but at zero
    cost only this check keeps a needless whole-job eviction out.
    """
    yield frozenset()
    for pod in sorted(evicted):
        smaller = evicted - {pod}
        if smaller and keeps_gang(candidate, smaller):
            yield smaller
    if (
        is_whole(candidate, evicted)
        and candidate.lost_per_gpu_s == 0.0
        and 0 < candidate.min_running < len(candidate.pods)
    ):
        seen: set[tuple[tuple[str, int], ...]] = set()
        for kept in itertools.islice(
            itertools.combinations(range(len(candidate.pods)), candidate.min_running),
            MAX_SURPLUS_SUBSETS,
        ):
            shape = tuple(sorted((candidate.pods[k].node, candidate.pods[k].gpus) for k in kept))
            if shape not in seen:
                seen.add(shape)
                yield evicted - frozenset(kept)


MAX_SURPLUS_SUBSETS = 512
"""Cap on the surplus-only subsets tried for one zero-cost whole-job eviction."""
