"""Lower bounds on what freeing GPUs on one node costs, shared by the search's bounds.

A node's pods are grouped (one group per job, or per pod), each group
offering ways to free some GPUs at some charge; the cheapest cover of each
amount is a 0/1 knapsack, and a node's further slots for pods of one size
are costed by the lower convex hull of that cover, so that the cheapest
slots across nodes, summed, never exceed what a plan pays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable


def knapsack_cover(groups: Iterable[list[tuple[int, float]]], need: int) -> list[float]:
    """``cover[x]``: the least charge that frees at least ``x`` GPUs, one option per group.

    Option by option rather than amount by amount: an option that frees ``freed`` covers
    every amount up to it at its charge alone (``cover[0]`` is 0), so only larger amounts
    look back. The same minima, half the time of the loop over amounts (every node the
    search costs runs it; a 1,000-node plan runs it hundreds of times).
    """
    cover = [0.0] + [math.inf] * need
    for group in groups:
        nxt = list(cover)
        for freed, charge in group:
            for x in range(1, min(freed, need) + 1):
                if charge < nxt[x]:
                    nxt[x] = charge
            for x in range(freed + 1, need + 1):
                before = cover[x - freed] + charge
                if before < nxt[x]:
                    nxt[x] = before
        cover = nxt
    return cover


def further_slots(capacity: int, free: int, freeable: int, gpus: int) -> int:
    """How many more ``gpus``-slots a node of ``capacity`` GPUs, ``free`` of them free, offers
    once ``freeable`` more are freed (none where 0 or less): every per-node bound asks it
    before costing a node, and a node with none never offers a slot at any cost."""
    return min(capacity, free + freeable) // gpus - free // gpus


def hull_marginals(cover: list[float], free: int, gpus: int, more: int) -> list[float]:
    """Per further ``gpus``-slot, a non-decreasing cost: the lower convex hull of ``cover``'s steps.

    The j-th further slot on a node with ``free`` GPUs needs
    ``(free // gpus + j) * gpus - free`` of them freed; the hull's marginals
    never exceed the real costs summed and never decrease, so the cheapest
    slots across nodes stay a lower bound.
    """
    points = [cover[(free // gpus + j) * gpus - free] if j else 0.0 for j in range(more + 1)]
    hull = [0]  # indexes of the lower convex hull of (j, points[j])
    for j in range(1, more + 1):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (points[b] - points[a]) * (j - a) >= (points[j] - points[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(j)
    marginals: list[float] = []
    for a, b in itertools.pairwise(hull):
        marginals.extend([(points[b] - points[a]) / (b - a)] * (b - a))
    return marginals
