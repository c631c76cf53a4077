"""A second bound for identical pods: each gang charged in full to the first node that breaks it.

The search's own bound on the pods still to place (``Search._slot_costs``)
splits a gang's lost work among its nodes, because two nodes of one plan may
share a gang and the plan pays for it once. Split so, a gang of two nodes is
half paid wherever the plan breaks it, and eight whole-node pods on a full
cluster get a bound of about 60 % of the best plan: the search then proves
that plan by trying tens of thousands of node sets (1,000 nodes, seeds 5 and
10 of the bench), and runs out of budget first.

Identical pods take nodes in one fixed order (``Search._identical_order``):
every pod still to place goes to a node of rank ``first`` or later. So charge
each job that holds GPUs in full to the *first* of its nodes, in that order,
that such a pod can still go to, and nothing to its other nodes. A plan that
breaks the gang on any of its nodes pays for the whole job once; a plan that
uses the first node pays for it there, and one that does not pays at least
nothing there. Summed over any plan's nodes the charges never exceed what the
plan loses, so the cheapest slots summed are a lower bound, as with the
split; it is a different bound, which the search asks before it frees room
on a node for a pod (``Search._children``: this pod there, the rest of its
size at that node's rank or later).
It is tight where the split is weak: a plan that takes a gang's cheap node
pays the whole gang there, and deeper in the search, as ``first`` passes a
gang's nodes, more of its nodes are the first left.

Jobs this branch already touched (they hold pods on a node it evicted on)
are charged nothing on the nodes it left alone: what the changed nodes'
remaining pods offer is costed at their own loss rates by the caller, and
the two must not both charge one job. A pod the search is about to send to
an untouched node pays that node's first slot in full (``cheapest_with``):
the node is then the first of every job on it.

Every shortcut only lowers the sum (a walk that bounds the rest by the last
key it passed), so the bound stays valid; ``tests/planner/test_first_charges.py``
checks it against the brute-force optimum and the search with it against
the search without it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from gpuyield.agents.planner.bundles import surplus_gpus
from gpuyield.agents.planner.knapsack import further_slots, hull_marginals, knapsack_cover
from gpuyield.agents.planner.session import PlanningSession

_NONE: frozenset[int] = frozenset()

_SKIPS_AT_MOST = 64
"""Nodes the walk passes over in a row before it bounds the rest by the last key it saw."""


class NodeJob(NamedTuple):
    """One job's pods on one node, as the first-node charges see them."""

    candidate: int
    sizes: tuple[int, ...]  # its pods' GPUs there, largest first
    after: int  # the last rank before this node's of its other nodes (-1: this node is first)


class PodGroup(Protocol):
    """Pods of one candidate on one node with the same GPUs (the search's groups)."""

    @property
    def candidate(self) -> int: ...

    @property
    def gpus(self) -> int: ...

    @property
    def pods(self) -> tuple[int, ...]: ...


def pod_sizes(groups: Iterable[PodGroup]) -> dict[int, list[int]]:
    """Per candidate, the GPUs of each of its pods in ``groups`` (one node's pods): the
    shape every per-node bound weighs a job's surplus and gang by (``surplus_gpus``)."""
    sizes: dict[int, list[int]] = {}
    for g in groups:
        sizes.setdefault(g.candidate, []).extend([g.gpus] * len(g.pods))
    return sizes


class _Jobs(NamedTuple):
    jobs: tuple[NodeJob, ...]
    afters: tuple[int, ...]  # their ``after``, sorted


class Touched(NamedTuple):
    """The untouched nodes that hold a job one branch touched elsewhere."""

    nodes: frozenset[str]
    entries: tuple[tuple[int, str, frozenset[int], tuple[int, ...]], ...]  # by rank
    ranks: list[int]
    mine: Mapping[str, frozenset[int]]  # per node, those jobs
    # Per (node, how many of its jobs are charged): its slots; one branch asks many times.
    slots: dict[tuple[str, int], list[float]]


@dataclass(slots=True)
class FirstCharges:
    """The first-node charges of one pod size over one search's candidates.

    The walk (``_smallest``) reads nodes by a key no slot of the node costs
    less than at any ``first``: ``weak`` holds a cheap one for every node
    (the GPUs its first further slot lacks beyond what jobs charged elsewhere
    at rank 0 hold, at the lowest loss rate of the rest), and ``refined`` the
    node's first slot at rank 0 (charges only grow with ``first``), computed
    when a walk first reaches the node's cheap key. Entries are
    ``(key, rank, node)``.
    """

    s: PlanningSession
    gpus: int
    rank: Mapping[str, int]  # the rank of each node that can host such a pod
    groups: Mapping[str, Sequence[PodGroup]]  # each node's candidate pods, by candidate
    first_rank: Mapping[int, int]  # per job, the lowest rank of its nodes
    open_nodes: frozenset[str]  # the nodes whose jobs can make a further slot
    weak: tuple[tuple[float, int, str], ...]
    refined: list[tuple[float, int, str]] = field(default_factory=list)
    next_weak: int = 0
    jobs: dict[str, _Jobs] = field(default_factory=dict)  # per node, built when first read
    # Per (node, how many of its jobs are charged, which of them are freed): its slots.
    cache: dict[tuple[str, int, frozenset[int]], list[float]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        session: PlanningSession,
        gpus: int,
        rank: Mapping[str, int],
        groups: Mapping[str, Sequence[PodGroup]],
        candidate_nodes: Mapping[int, frozenset[str]],
        held: Mapping[str, int],
    ) -> FirstCharges:
        """The cheap key of every node that can host the pod and whose candidates, all
        evicted, would make a further slot for it (the others never offer one).

        ``groups`` holds each node's candidate pods, grouped by candidate in
        index order, and ``held`` the GPUs they hold on each node. The cheap
        key (the GPUs the first further slot lacks, beyond what the jobs
        charged elsewhere at rank 0 hold, at the lowest loss rate of the rest)
        is below every slot of the node at any ``first``. A node's jobs are
        gathered only when a walk reaches it.
        """
        candidates = session.candidates
        first_rank: dict[int, int] = {}
        weak: list[tuple[float, int, str]] = []
        open_nodes: list[str] = []
        for node, node_groups in groups.items():
            mine = rank.get(node)
            if mine is None:
                continue
            free = session.node_free[node]
            if further_slots(session.node_gpus[node], free, held[node], gpus) <= 0:
                # No further slot for such a pod here, whoever is charged: ``_marginals``
                # would find none at any ``first``. On the bench's full clusters that is
                # most nodes (jobs that are not candidates hold the rest), and the walk
                # refined each of them for nothing.
                continue
            open_nodes.append(node)
            free_at_0, rate = 0, math.inf
            for g in node_groups:
                c = g.candidate
                lowest = first_rank.get(c)
                if lowest is None:
                    lowest = min(rank[n] for n in candidate_nodes[c] if n in rank)
                    first_rank[c] = lowest
                if lowest < mine:  # charged where the pods reach it first, not here
                    free_at_0 += g.gpus * len(g.pods)
                else:
                    rate = min(rate, candidates[c].lost_per_gpu_s)
            lacking = gpus - free % gpus - free_at_0
            weak.append((lacking * rate if lacking > 0 else 0.0, mine, node))
        weak.sort()
        return cls(session, gpus, rank, groups, first_rank, frozenset(open_nodes), tuple(weak))

    def _jobs_of(self, node: str) -> _Jobs:
        """``node``'s jobs as the charges see them (each with its ``after``), and their
        ``after`` sorted: gathered the first time the node is costed."""
        found = self.jobs.get(node)
        if found is not None:
            return found
        rank, mine = self.rank, self.rank[node]
        jobs = []
        for c, held in pod_sizes(self.groups[node]).items():
            after = -1
            if self.first_rank[c] < mine:
                nodes = self.s.candidates[c].pods
                after = max(rank[p.node] for p in nodes if p.node in rank and rank[p.node] < mine)
            jobs.append(NodeJob(c, tuple(sorted(held, reverse=True)), after))
        found = _Jobs(tuple(jobs), tuple(sorted(job.after for job in jobs)))
        self.jobs[node] = found
        return found

    def slots(self, node: str, first: int, mine: frozenset[int] = _NONE) -> list[float]:
        """Each further slot's lower bound on ``node`` when pods go to ranks ``first`` on,
        with the jobs in ``mine`` (the branch touched them elsewhere) free."""
        charged = bisect.bisect_left(self._jobs_of(node).afters, first)
        key = (node, charged, mine)
        found = self.cache.get(key)
        if found is None:
            found = self._marginals(node, first, mine)
            self.cache[key] = found
        return found

    def touched(self, nodes: frozenset[str], freed: frozenset[int]) -> Touched:
        """The untouched ``nodes`` that hold a job in ``freed`` (one the branch touched
        elsewhere), as ``cheapest`` reads them: by rank, each with those jobs (and its jobs'
        ``after``)."""
        entries = []
        for node in nodes:
            if node in self.open_nodes:
                jobs = self._jobs_of(node)
                mine = frozenset(j.candidate for j in jobs.jobs if j.candidate in freed)
                entries.append((self.rank[node], node, mine, jobs.afters))
        entries.sort()
        return Touched(
            nodes,
            tuple(entries),
            [at for at, _, _, _ in entries],
            {node: mine for _, node, mine, _ in entries},
            {},
        )

    def _marginals(self, node: str, first: int, mine: frozenset[int]) -> list[float]:
        s, gpus = self.s, self.gpus
        free = s.node_free[node]
        options: list[list[tuple[int, float]]] = []
        freeable = 0
        for job in self._jobs_of(node).jobs:
            held = sum(job.sizes)
            freeable += held
            if job.after >= first or job.candidate in mine:  # charged elsewhere, or free
                options.append([(held, 0.0)])
                continue
            cand = s.candidates[job.candidate]
            rate = cand.lost_per_gpu_s
            some = surplus_gpus(cand, job.sizes)
            alone = held if some is None else some
            group = [(f, f * rate) for f in range(1, alone + 1)]
            if alone < held:
                group.append((held, cand.gpus * rate))  # the gang breaks: the whole job
            options.append(group)
        more = further_slots(s.node_gpus[node], free, freeable, gpus)
        if more <= 0:
            return []
        need = (free // gpus + more) * gpus - free
        return hull_marginals(knapsack_cover(options, need), free, gpus, more)

    def cheapest(
        self,
        fresh: list[float],
        short: int,
        first: int,
        skip: Container[str],
        touched: Touched,
    ) -> float:
        """Sum of the ``short`` cheapest slots: ``fresh`` (sorted), then the untouched nodes'.

        ``skip`` are the nodes the branch changed (costed in ``fresh``);
        ``touched`` the untouched nodes that hold a job the branch touched,
        costed with those jobs free. Infinity when there are not enough slots.
        """
        return _summed(self._smallest(fresh, [], short, first, skip, touched, None), short)

    def cheapest_with(
        self,
        forced: str,
        fresh: list[float],
        short: int,
        first: int,
        skip: Container[str],
        touched: Touched,
    ) -> tuple[float, float, list[float]]:
        """``cheapest`` when one pod goes to ``forced`` (untouched, of rank ``first``) for
        certain, and ``cheapest`` itself: (with, without, the slots ``without`` sums).

        With it, that node's first further slot is one of those summed, whatever the
        others cost (and is summed even when ``short`` is 0: free slots elsewhere do not
        make room on this node). One walk gives both.
        """
        marginals = self._slots_of(forced, first, touched)
        if not marginals:
            kept = self._smallest(fresh, [], short, first, skip, touched, None)
            return math.inf, _summed(kept, short), kept
        own = marginals[0]
        kept = self._smallest(fresh, marginals[1:], short, first, skip, touched, forced)
        rest = max(0, short - 1)
        with_it = own + _summed(kept[:rest], rest)
        if short <= 0:
            return own, 0.0, []
        without = sorted([*kept, own])[:short]
        return with_it, _summed(without, short), without

    def first_slot(self, node: str, first: int, touched: Touched) -> float:
        """What ``node``'s first further slot costs when pods go to ranks ``first`` on
        (infinity when its jobs cannot make one)."""
        marginals = self._slots_of(node, first, touched)
        return marginals[0] if marginals else math.inf

    def _slots_of(self, node: str, first: int, touched: Touched) -> list[float]:
        """``node``'s further slots as one branch sees them, with the jobs it touched
        elsewhere free (none where its jobs cannot make one)."""
        if node not in self.open_nodes:
            return []
        return self.slots(node, first, touched.mine.get(node, _NONE))

    def _smallest(
        self,
        fresh: list[float],
        extra: list[float],
        short: int,
        first: int,
        skip: Container[str],
        touched: Touched,
        forced: str | None,
    ) -> list[float]:
        """The ``short`` smallest slot costs (fewer if there are not as many), sorted:
        ``fresh`` and ``extra`` as given, then the untouched nodes' but ``forced``'s."""
        if short <= 0:
            return []
        best = sorted(fresh[:short] + extra[:short])[:short]  # the ``short`` smallest so far

        def take(values: Iterable[float]) -> None:
            """Keep the ``short`` smallest of ``best`` and ``values`` (non-decreasing)."""
            for value in values:
                if len(best) == short:
                    if value >= best[-1]:
                        return  # the rest are no cheaper
                    best.pop()
                bisect.insort(best, value)

        entries, kept = touched.entries, touched.slots
        for at in range(bisect.bisect_left(touched.ranks, first), len(entries)):
            _, node, jobs, afters = entries[at]
            if node == forced:
                continue
            asked = (node, bisect.bisect_left(afters, first))
            costs = kept.get(asked)
            if costs is None:
                costs = kept[asked] = self.slots(node, first, jobs)
            take(costs)
        weak, refined = self.weak, self.refined
        nodes = touched.nodes
        r = skipped = 0
        while True:
            if self.next_weak < len(weak) and (
                r == len(refined) or weak[self.next_weak] <= refined[r]
            ):
                _, mine, node = weak[self.next_weak]
                self.next_weak += 1
                at_0 = self.slots(node, 0)
                if at_0:
                    bisect.insort(refined, (at_0[0], mine, node))
                continue
            if r == len(refined):
                break
            key, mine, node = refined[r]
            r += 1
            if len(best) == short and key >= best[-1]:
                break  # no slot of this node or any after it is cheaper than those kept
            if mine < first or node in skip or node in nodes or node == forced:
                skipped += 1
                if skipped > _SKIPS_AT_MOST:
                    take(itertools.repeat(key, short))  # every slot still to come costs >= key
                    break
                continue
            skipped = 0
            take(self.slots(node, first))
        return best


def _summed(slots: list[float], count: int) -> float:
    """The sum of ``count`` slots, or infinity when there are fewer: the pods do not fit."""
    return math.fsum(slots) if len(slots) == count else math.inf
