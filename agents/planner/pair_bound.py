"""A bound for the last two or three identical pods: what nodes cost together.

The search's other bounds sum per-node charges. A gang on two nodes is then
charged in part (``Search._slot_costs``) or to one node only
(``first_charges``), and a plan that takes a node whose gangs also sit
elsewhere looks cheaper than it is. Eight whole-node pods on a full cluster
leave their proofs there: at 1,000 nodes (bench seed 5) every one of the
230 states with two pods left could not beat the best plan, and the
per-node bounds saw it in 81.

With two pods left that each need a node of their own, any completion
frees room on two distinct nodes ``a`` and ``b``. Lost work adds up per
evicted pod, so with ``E_a`` and ``E_b`` the pods evicted for each,
``cost(E_a | E_b) = cost(E_a) + cost(E_b) - cost(E_a & E_b)``. Each term is
at least the node's floor (the least any room there costs), and the common
part holds only pods of jobs on both nodes, so it costs at most those
jobs' remaining work. So a pair costs at least
``max(f_a, f_b, f_a + f_b - shared_ab)`` (``pair_floor``), and the cheapest
pair at least the least of:

- the two cheapest floors, for pairs that share no job;
- the cheapest pair that shares one (``PairTable.shared``, by that floor);
- for each node the branch changed, its own lower bound with the cheapest
  floor, or with each node it shares a job with.

With three pods left (``PairTable.cheapest_triple``), three nodes that share
no job cost at least the three cheapest floors; three with a pair that
shares one cost at least that pair's floor plus what the third evicts beyond
them (its floor less what it shares with each); and three with a node the
branch changed cost at least that node's bound plus the pair bound on the
other two, their floors less what they share with it. The last also bounds
a pod tried on a node with two more after it (``PairTable.cheapest_after``).

It applies only where no node can take two of the pods (each needs more than
half of every node that can host it): then the pods take distinct nodes. Scans
stop after a fixed count and bound what they did not read by the last key
they passed, which only lowers the bound. ``tests/planner/test_pair_bound.py``
checks it against the cheapest completion and the search with it against
the search without it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

_SCAN_AT_MOST = 128
"""Entries a scan passes over before it bounds the rest by the last key it read."""


class _Either:
    """Two containers as one: the branch's changed nodes and the ones a bound moved."""

    __slots__ = ("one", "two")

    def __init__(self, one: Container[str], two: Container[str]) -> None:
        self.one, self.two = one, two

    def __contains__(self, item: object) -> bool:
        return item in self.two or item in self.one


def pair_floor(first: float, second: float, shared: float) -> float:
    """The least two nodes cost together: each node's floor, or both less what they share."""
    return max(first, second, first + second - shared)


class Changed(NamedTuple):
    """A node the branch changed, as the pair bound sees it."""

    node: str
    rank: int
    floor: float  # the least room there costs on this branch
    shares: Mapping[str, float]  # per other node, the remaining work of the jobs on both


@dataclass(frozen=True, slots=True)
class PairTable:
    """One pod size's untouched nodes: their floors, and the pairs that share a job.

    ``floors`` holds (floor, rank, node) for every node that can host the pod
    (0 where it does as it stands), cheapest first; ``shared`` holds
    (pair floor, node, node) for every two of them that share a job, each
    job counted at its whole lost work, cheapest first. Both depend on the
    snapshot alone.
    """

    floors: tuple[tuple[float, int, str], ...]
    floor: Mapping[str, float]
    rank: Mapping[str, int]
    shared: tuple[tuple[float, str, str], ...]
    neighbours: Mapping[str, Mapping[str, float]]  # per node, the work it shares with others

    @classmethod
    def build(
        cls,
        floors: Mapping[str, tuple[float, int]],
        jobs: Iterable[tuple[float, Iterable[str]]],
    ) -> PairTable:
        """``floors``: per node that can host the pod, its floor and rank; ``jobs``: each
        job's whole lost work and its nodes."""
        together: dict[tuple[str, str], float] = {}
        for work, nodes in jobs:
            mine = sorted({n for n in nodes if n in floors})
            for pair in itertools.combinations(mine, 2):
                together[pair] = together.get(pair, 0.0) + work
        shared = sorted(
            (pair_floor(floors[a][0], floors[b][0], work), a, b)
            for (a, b), work in together.items()
        )
        neighbours: dict[str, dict[str, float]] = {}
        for (a, b), work in together.items():
            neighbours.setdefault(a, {})[b] = work
            neighbours.setdefault(b, {})[a] = work
        return cls(
            tuple(sorted((f, r, n) for n, (f, r) in floors.items())),
            {n: f for n, (f, _) in floors.items()},
            {n: r for n, (_, r) in floors.items()},
            tuple(shared),
            neighbours,
        )

    def cheapest_after(
        self, node: str, skip: Container[str], changed: Iterable[Changed], more: int = 2
    ) -> float:
        """A lower bound on the lost work of freeing room on ``node`` (untouched) for one
        pod, then on ``more`` (1 to 3) more distinct nodes of its rank on for the rest.

        Room on ``node`` costs at least its floor. What the others evict beyond it
        costs at least their own bound less the work they share with ``node`` (its
        jobs may be gone already); the single, pair or triple bound over those reduced floors
        bounds the rest. Only the nodes that share a job with ``node`` change, so they
        join the changed ones and the scans pass them by.
        """
        mine = self.neighbours.get(node, {})
        first = self.rank[node]
        return self._after(node, self.floor[node], mine, first, skip, list(changed), more)

    def _after(
        self,
        node: str,
        floor: float,
        shares: Mapping[str, float],
        first: int,
        skip: Container[str],
        changed: list[Changed],
        more: int = 2,
    ) -> float:
        """``floor`` (room on ``node``) plus the bound on ``more`` more nodes of rank
        ``first`` on, less what each shares with ``node`` (``shares``)."""
        moved = [
            Changed(c.node, c.rank, max(0.0, c.floor - c.shares.get(node, 0.0)), c.shares)
            for c in changed
            if c.rank >= first and c.node != node
        ]
        hidden = {node}
        for other, work in shares.items():
            at = self.rank.get(other)
            if at is not None and at >= first and other not in skip:
                hidden.add(other)
                reduced = max(0.0, self.floor[other] - work)
                moved.append(Changed(other, at, reduced, self.neighbours.get(other, {})))
        rest = (self.cheapest_single, self.cheapest, self.cheapest_triple)[more - 1]
        return floor + rest(first, _Either(skip, hidden), moved)

    def cheapest_single(
        self, first: int, skip: Container[str], changed: Iterable[Changed]
    ) -> float:
        """A lower bound on the lost work of freeing room on one node of rank ``first`` on:
        the cheapest untouched floor, or a changed node's bound."""
        lowest = self._lowest(1, first, skip)
        return min([*lowest, *(c.floor for c in changed)], default=math.inf)

    def cheapest_triple(
        self, first: int, skip: Container[str], changed: Iterable[Changed]
    ) -> float:
        """A lower bound on the lost work of freeing room on three distinct nodes of rank
        ``first`` on (``skip`` and ``changed`` as for ``cheapest``).

        Three untouched nodes that share no job cost at least the three cheapest
        floors. Three with a pair ``a``, ``b`` that shares one cost at least that
        pair's floor plus what the third evicts beyond them: its floor less what it
        shares with each, or the cheapest floor when it shares nothing. Three with a
        changed node cost at least that node's bound plus the pair bound after it
        (``_after``).
        """
        changed = list(changed)
        rank, floor = self.rank, self.floor

        def untouched(node: str) -> bool:
            return rank[node] >= first and node not in skip

        lowest = self._lowest(3, first, skip)
        single = lowest[0] if lowest else math.inf
        best = math.fsum(lowest) if len(lowest) == 3 else math.inf
        for read, (value, a, b) in enumerate(self.shared):
            if value >= best:
                break
            if read >= _SCAN_AT_MOST:
                best = value  # what any unread pair adds to its floor is never negative
                break
            if not (untouched(a) and untouched(b)):
                continue
            third = single
            on_a, on_b = self.neighbours[a], self.neighbours[b]
            for c in on_a.keys() | on_b.keys():
                if c != a and c != b and untouched(c):
                    third = min(third, max(0.0, floor[c] - on_a.get(c, 0.0) - on_b.get(c, 0.0)))
            best = min(best, value + third)
        for one in changed:
            best = min(best, self._after(one.node, one.floor, one.shares, first, skip, changed))
        return best

    def _lowest(self, count: int, first: int, skip: Container[str]) -> list[float]:
        """The ``count`` cheapest untouched floors of rank ``first`` on (fewer if there are
        not as many); a scan that stops early repeats the last key it read for the rest."""
        lowest: list[float] = []
        for read, (value, at, node) in enumerate(self.floors):
            if read >= _SCAN_AT_MOST:
                lowest.extend([value] * (count - len(lowest)))
                break
            if at >= first and node not in skip:
                lowest.append(value)
                if len(lowest) == count:
                    break
        return lowest

    def cheapest(self, first: int, skip: Container[str], changed: Iterable[Changed]) -> float:
        """A lower bound on the lost work of freeing room on two distinct nodes of rank
        ``first`` on: ``skip`` are the nodes the branch changed, ``changed`` those of
        them of rank ``first`` on, with what they cost on this branch."""
        rank, floor = self.rank, self.floor

        def untouched(node: str) -> bool:
            return rank[node] >= first and node not in skip

        lowest = self._lowest(2, first, skip)  # the two cheapest untouched floors
        single = lowest[0] if lowest else math.inf
        best = math.fsum(lowest) if len(lowest) == 2 else math.inf
        for read, (value, a, b) in enumerate(self.shared):
            if value >= best:
                break
            if read >= _SCAN_AT_MOST:
                best = value
                break
            if untouched(a) and untouched(b):
                best = value
                break
        nodes = list(changed)
        for i, one in enumerate(nodes):
            best = min(best, one.floor + single)
            for other, work in one.shares.items():
                if other in floor and untouched(other):
                    best = min(best, pair_floor(one.floor, floor[other], work))
            for two in nodes[i + 1 :]:
                best = min(best, pair_floor(one.floor, two.floor, one.shares.get(two.node, 0.0)))
        return best
