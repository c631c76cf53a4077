"""The search: which victims free room for every preemptor pod at the least cost.

Depth-first branch and bound over the preemptor's pods, largest first. At
each level the pod goes to one node, together with a *minimal* set of
evictions on that node that makes room for it (after gang closure, which may
take a whole job and so free other nodes too). When every pod has a node, a
second phase repairs queue rules that more evictions can fix (capability, the
preemptor's guarantee for reclaim) by adding victims from the offending
queue's subtree. Every leaf is reduced to a minimal plan (readings 0001 §9)
and compared by the exact objective.

Children are tried cheapest first, so the first leaf is the greedy plan and
later ones only improve on it; partial costs never decrease along a branch,
so a branch already costlier than the best plan is cut. Identical preemptor
pods take nodes in one fixed order, cheapest node first (``_identical_order``;
the plan states them in node order), and interchangeable pods of one job on
one node are taken in name order, so no plan is explored twice.

The work is bounded by a budget counted in steps (one candidate eviction set
evaluated, one packing move tried), never in seconds: a replay explores
exactly the same tree and returns the same bytes. When the budget runs out
the best plan found so far is returned and ``exhausted`` says so.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from gpuyield.agents.planner.bundles import (
    close_gang,
    is_whole,
    keeps_gang,
    reprieves,
    surplus_gpus,
)
from gpuyield.agents.planner.first_charges import FirstCharges, Touched, pod_sizes
from gpuyield.agents.planner.knapsack import further_slots, hull_marginals, knapsack_cover
from gpuyield.agents.planner.objective import Cost, cost_of
from gpuyield.agents.planner.pair_bound import Changed, PairTable
from gpuyield.agents.planner.placement import can_host, fit_key, pack
from gpuyield.agents.planner.queues import QueueViolation, violations
from gpuyield.agents.planner.session import CandidateFacts, PlanningSession

_FIRST_AFTER = 256
"""Steps before a search builds the first-node bound, whatever its size: most searches end
before, and the bound's set-up and tries would cost them more than it saves."""

_FIRST_TRIES = 64
"""Tries after which a first-node bound that has cut nothing is no longer computed: where it
cuts at all on the bench's 90 clusters, it first does within 40 tries."""

_TIE_TRIES = 32
"""Tries after which a tied repair bound (``Search._tied_repair``) that has cut nothing is no
longer computed: on the bench's 90 clusters, where it cuts at all it first does within 10
tries, and where it never cuts it was tried up to 4,160 times, 20 % of that search's time."""

_TIE_POOL_AT_MOST = 256
"""Candidates a tied repair (``Search._tied_repair``) sorts at most per queue and rank."""

_PAIR_TRIES = 16
"""Times the pair bound is asked (``Search._last_pair_bound`` with two or three pods left,
and per node tried with pods after: ``PairTable.cheapest_after``) before a search that it
cuts too seldom stops asking. Where it pays on the bench it cuts most of its asks from the
first ones (1,000 nodes seeds 5 and 10), and the bench's steps are the same with 8, 16 or
64; at 64 nodes, where it cut 0 of 72 asks on seed 13 and 22 of 605 on seed 7, 64 asks
cost up to a tenth of the plan."""

_PAIR_CUT_SHARE = 8
"""It goes on being asked while it cuts at least one ask in this many."""

Changes = dict[int, frozenset[int]]
DeltaCost = tuple[int, float, int, float]
_ZERO: DeltaCost = (0, 0.0, 0, 0.0)


@dataclass
class Budget:
    """Deterministic work counter."""

    limit: int
    steps: int = 0
    exhausted: bool = False

    def tick(self) -> bool:
        if self.steps >= self.limit:
            self.exhausted = True
            return False
        self.steps += 1
        return True


@dataclass(frozen=True, slots=True)
class State:
    evicted: Mapping[int, frozenset[int]]
    free: Mapping[str, int]  # overlay over session.node_free: only nodes that changed
    placement: tuple[tuple[str, str], ...]
    evicted_by_queue: Mapping[str, int]
    protected: int = 0
    lost: float = 0.0
    victims: int = 0
    weight: float = 0.0
    last_node: int = 0
    repair_from: int = 0
    reclaimed: frozenset[str] = frozenset()  # queues of the cross-queue victims
    partial: frozenset[int] = frozenset()  # victims that keep some of their pods
    # Per node where this branch evicted pods: what its other pods still offer (_left_on).
    left: Mapping[str, _Offer] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Found:
    cost: Cost
    evicted: Mapping[int, frozenset[int]]
    placement: Mapping[str, str]


class _Offer(NamedTuple):
    """What a node's candidate pods not evicted yet offer on one branch."""

    protected: int  # 0 if any of them is unprotected
    rate: float  # their lowest loss rate (infinite when none is left)
    room: int  # the GPUs they hold
    pods: tuple[tuple[int, float], ...]  # (GPUs, lost work) of each, sorted


class _Group(NamedTuple):
    """Pods of one candidate on one node with the same GPUs: interchangeable."""

    candidate: int
    gpus: int
    pods: tuple[int, ...]  # pod indexes, in name order


class _PodIndex(NamedTuple):
    """Per node, the eligible candidates' pods there and what the bounds read of them; per
    candidate, its nodes."""

    groups: dict[str, tuple[_Group, ...]]  # per candidate and pod size, in that order
    node_candidates: dict[str, tuple[int, ...]]  # in order
    candidate_nodes: dict[int, frozenset[str]]
    node_bound: dict[str, tuple[int, float]]  # (0 if one is unprotected else 1, lowest rate)
    node_weight: list[float]  # by node index: least W_eff there, what a new victim adds (or 0)
    node_held: dict[str, int]  # the GPUs they hold there: the most any plan frees there

    @classmethod
    def of(
        cls, session: PlanningSession, eligible: tuple[int, ...], protected: frozenset[int]
    ) -> _PodIndex:
        """One pass over the pods (at 10,000 nodes there are 50,000); ``eligible`` in order."""
        pods_at: dict[str, dict[tuple[int, int], list[int]]] = {}
        bound: dict[str, tuple[int, float]] = {}
        lightest: dict[str, float] = {}
        candidate_nodes: dict[int, frozenset[str]] = {}
        held: dict[str, int] = {}
        for i in eligible:  # in order, so each node's groups come in candidate order
            cand = session.candidates[i]
            for p, pod in enumerate(cand.pods):
                at = pods_at.get(pod.node)
                if at is None:
                    at = pods_at[pod.node] = {}
                at.setdefault((i, pod.gpus), []).append(p)
                held[pod.node] = held.get(pod.node, 0) + pod.gpus
            nodes = candidate_nodes[i] = frozenset(pod.node for pod in cand.pods)
            flag, rate, weight = int(i in protected), cand.lost_per_gpu_s, cand.w_eff
            for node in nodes:
                known = bound.get(node)
                if known is None:
                    bound[node], lightest[node] = (flag, rate), weight
                else:
                    bound[node] = (min(known[0], flag), min(known[1], rate))
                    lightest[node] = min(lightest[node], weight)
        return cls(
            {
                node: tuple([_Group(c, g, tuple(pods)) for (c, g), pods in sorted(by.items())])
                for node, by in pods_at.items()
            },
            {node: tuple(dict.fromkeys(c for c, _ in by)) for node, by in pods_at.items()},
            candidate_nodes,
            bound,
            [lightest.get(n, 0.0) for n in session.node_names],
            held,
        )


_WHOLES_AT_MOST = 4
"""``_floor_by_units`` tries every subset of a node's jobs that go only whole up to this many
(16 subsets); with more, ``_floor`` runs its knapsack."""

FloorJob = tuple[int, int, float, float]
"""One job on a node, as ``_floor`` costs it: (GPUs it may give there one by one, GPUs it holds
there, its loss rate, its whole job's lost work)."""


def _floor_knapsack(jobs: Sequence[FloorJob], need: int) -> float:
    """The least lost work of ``jobs`` that frees at least ``need`` GPUs: a knapsack in which
    each job gives up to its first number of GPUs at its rate, or all it holds at its whole
    cost. Freeing more than ``x`` at the rate never beats freeing ``x`` (rates are never
    negative), so only amounts up to ``x`` are tried for ``x``."""
    best = [0.0] + [math.inf] * need  # best[x]: least cost to free at least x GPUs
    for alone, on, rate, whole in jobs:
        nxt = list(best)
        for x in range(1, need + 1):
            least = nxt[x]
            for freed in range(1, min(alone, x) + 1):
                cost = best[x - freed] + freed * rate
                if cost < least:
                    least = cost
            cost = best[max(0, x - on)] + whole  # the whole job
            if cost < least:
                least = cost
            nxt[x] = least
        best = nxt
    return best[need]


def _floor_over(jobs: Sequence[FloorJob], need: int) -> float:
    """The least lost work of ``jobs`` (one node's) that frees at least ``need`` GPUs there,
    more than none and no more than they hold: ``_floor_by_units``, or the knapsack where
    that declines."""
    found = _floor_by_units(jobs, need)
    return _floor_knapsack(jobs, need) if found is None else found


def _floor_by_units(jobs: Sequence[FloorJob], need: int) -> float | None:
    """``_floor_knapsack``'s answer without the knapsack, when every job either gives any of
    its GPUs there one by one or only all of them at once (its gang breaks); None when one
    may give some but not all (its surplus), or more than ``_WHOLES_AT_MOST`` go only whole.

    GPUs that go one by one differ only in their rate, so the cheapest ``x`` of them free
    ``x`` GPUs for the least (a job's whole never beats its own GPUs at its rate: it costs
    the GPUs it holds elsewhere too). The answer is then the least, over the subsets of the
    jobs that go whole, of their cost plus the cheapest GPUs for the rest: on the bench most
    nodes are of this kind, and this takes half the knapsack's time. Sums may round
    apart from the knapsack's in the last bit: the floor is a bound and an order, and the
    search compares bounds with a tolerance.
    """
    rates: list[float] = []
    wholes: list[tuple[int, float]] = []
    for alone, held, rate, whole in jobs:
        if alone >= held:
            rates.extend([rate] * held)
        elif alone == 0:
            wholes.append((held, whole))
        else:
            return None
    if len(wholes) > _WHOLES_AT_MOST:
        return None
    rates.sort()
    cheapest = list(itertools.accumulate(rates[:need], initial=0.0))  # [x]: the x cheapest
    least = math.inf
    for taken in itertools.product((False, True), repeat=len(wholes)):
        freed, cost = 0, 0.0
        for (held, whole), take in zip(wholes, taken, strict=True):
            if take:
                freed += held
                cost += whole
        rest = max(0, need - freed)
        if rest < len(cheapest) and cost + cheapest[rest] < least:
            least = cost + cheapest[rest]
    return least


def _common_weight(shares: list[float], m: int) -> float:
    """The largest ``u`` with the ``m`` largest of ``max(share, u)`` summing to at most one.

    ``shares`` are sorted, largest first, and sum to one. Slightly less than
    exact, so that rounding never makes a charge exceed what it bounds.
    """
    taken = 0.0
    for j in range(m):
        u = (1.0 - taken) / (m - j)
        if j + 1 > len(shares) or u >= shares[j] - 1e-12:  # the rest weigh u: they sum to one
            return max(0.0, u * (1.0 - 1e-9))
        taken += shares[j]
    return shares[m - 1] * (1.0 - 1e-9)  # only by rounding: the shares alone sum to one


_SKIPS_AT_MOST = 64
"""Slots ``_SlotOrder.cheapest`` passes over in a row before it bounds the rest by the last."""


@dataclass(slots=True)
class _SlotOrder:
    """Further slots of one pod size by their lost bound, refined as far as some call read.

    ``weak`` holds one entry per node: the cheap bound of each of its slots
    (GPUs lacking times the node's lowest loss rate), which no slot of the
    node's costs less than. A node's slots are costed exactly
    (``Search._slot_costs``) only when a reader reaches its cheap bound, so a
    search over a thousand nodes costs the few cheapest ones. Entries are
    ``(bound, node index, node)``; a refined node's entries all sort after its
    weak entry, which sorts after everything handed out before it, so readers
    that started earlier never miss one.

    The costing function is handed to each read, not kept: kept, it would tie
    the search to itself in a reference cycle, and the whole search (tens of
    thousands of objects at 1,000 nodes) would wait for the cyclic collector
    instead of being freed when the plan returns.
    """

    weak: tuple[tuple[float, int, str], ...]
    gpus: int
    spread: int  # the most nodes the pods costed here can use
    refined: list[tuple[float, int, str]] = field(default_factory=list)
    next_weak: int = 0

    def cheapest(
        self,
        cost: Callable[[str, int, int], list[float]],
        fresh: list[float],
        short: int,
        first: int,
        skip: Container[str],
        rank: tuple[int, ...],
    ) -> float:
        """Sum of the ``short`` cheapest slots: ``fresh`` (sorted) and these, from rank ``first``.

        This order's slots come cheapest first, so the walk stops once enough
        are taken; nodes in ``skip`` are left out. Infinity when there are not
        enough. After ``_SKIPS_AT_MOST`` left-out slots in a row every slot
        still to come is taken at the one just passed, which none of them
        undercuts: still a lower bound, and deep in the search, where the
        cheapest nodes all lie before ``first``, the walk stays short.
        """
        weak, refined = self.weak, self.refined
        taken: list[float] = []
        k = r = skipped = 0
        while len(taken) < short:
            if self.next_weak < len(weak) and (
                r == len(refined) or weak[self.next_weak] <= refined[r]
            ):
                _, node_i, node = weak[self.next_weak]
                self.next_weak += 1
                for bound in cost(node, self.gpus, self.spread):
                    bisect.insort(refined, (bound, node_i, node))
                continue
            if r == len(refined):
                break
            value, node_i, node = refined[r]
            r += 1
            if rank[node_i] < first or node in skip:
                skipped += 1
                if skipped > _SKIPS_AT_MOST:
                    while len(taken) < short:
                        if k < len(fresh) and fresh[k] <= value:
                            taken.append(fresh[k])
                            k += 1
                        else:
                            taken.append(value)
                    break
                continue
            skipped = 0
            while k < len(fresh) and fresh[k] <= value and len(taken) < short:
                taken.append(fresh[k])
                k += 1
            if len(taken) < short:
                taken.append(value)
        taken.extend(fresh[k : k + short - len(taken)])
        return math.fsum(taken) if len(taken) >= short else math.inf


@dataclass(frozen=True, slots=True)
class _SizeTable:
    """Per pod size, what the snapshot's free GPUs offer (before any eviction)."""

    ready: tuple[int, ...]  # nodes (index) that host such a pod as they are
    bounds: tuple[tuple[int, float, int], ...]  # (protected, lost bound, node index), sorted
    bounds_unprotected: tuple[tuple[int, float, int], ...]  # the same with protected 0, sorted
    free_slots: tuple[int, ...]  # [k]: such pods that fit, as they are, on nodes of rank k on
    extra: _SlotOrder  # each further slot's lost bound, cheapest first
    rank: tuple[int, ...]  # [node index]: its place in the order identical pods take nodes in
    host_rank: Mapping[str, int]  # the rank of each node that can host such a pod
    by_floor: tuple[tuple[int, float, int], ...] | None  # (protected, floor, node), rank order
    by_floor_ranks: tuple[int, ...]  # the rank of each by_floor entry


@dataclass(slots=True)
class _FloorOrder:
    """One pod size's nodes by ``_floor_of``, refined as far as some call needed them."""

    weak: tuple[tuple[int, float, int], ...]  # (protected, cheap bound, node), sorted
    refined: list[tuple[int, float, int]] = field(default_factory=list)  # the tight bounds
    next_weak: int = 0  # weak[:next_weak] are in refined


@dataclass(slots=True)
class _Branch:
    """What the nodes one state changed offer pods of one size, for bounds from any rank."""

    spots: list[tuple[int, int, str, int]]  # (rank, free slots gained, node, its free GPUs)
    skip: Set[str]  # the nodes the state changed
    costs: list[list[float]] | None = None  # per spot, its further slots' costs
    touched: Touched | None = None  # untouched nodes holding a job it touched

    def short(self, free_slots: int, count: int, first: int) -> int:
        """How many of ``count`` pods on nodes of rank ``first`` on need a further slot,
        with ``free_slots`` free as the snapshot stands (none when 0 or less)."""
        return count - free_slots - sum(gained for at, gained, _, _ in self.spots if at >= first)

    def fresh(self, first: int, cost: Callable[[str, int], list[float]]) -> list[float]:
        """The changed nodes' further slots on nodes of rank ``first`` on, sorted. ``cost``
        gives a changed node's from its free GPUs, the first time a call needs them (handed
        in, not kept: see ``_SlotOrder``)."""
        if self.costs is None:
            self.costs = [cost(node, free) for _, _, node, free in self.spots]
        return sorted(
            v
            for (at, _, _, _), marginals in zip(self.spots, self.costs, strict=True)
            if at >= first
            for v in marginals
        )


@dataclass(slots=True)
class _Cutoff:
    """Set by a reader of ``_nodes_by_floor`` when further untouched nodes cannot win."""

    untouched: bool = False  # none of them
    past: tuple[int, float] | None = None  # none with this (protected, floor): skip past them


@dataclass(slots=True)
class _RepairFrame:
    """Where the repair walk stands at one state: which rank, which option next."""

    state: State
    found: list[QueueViolation]
    ranks: tuple[int, ...]
    next_rank: int = 0
    rank: int = 0
    options: list[Changes] = field(default_factory=list)
    option: int = 0


class Search:
    """One run of the branch and bound over a session's eligible candidates."""

    def __init__(
        self,
        session: PlanningSession,
        eligible: Iterable[int],
        protected: frozenset[int],
        budget: Budget,
    ) -> None:
        self.s = session
        self.eligible = tuple(sorted(eligible))
        self.protected = protected
        self.budget = budget
        self.best: Found | None = None
        # Repairs add victims in this order only (cheapest GPUs first), so that
        # each set of repairs is explored once and the bound sees what is left.
        self.repair_order = tuple(
            sorted(self.eligible, key=lambda i: (session.candidates[i].lost_per_gpu_s, i))
        )
        # For each queue, the repair ranks of the eligible candidates in its subtree.
        subtree_ranks: dict[str, list[int]] = {}
        for rank, i in enumerate(self.repair_order):
            for queue in session.tree.ancestors[session.candidates[i].queue]:
                subtree_ranks.setdefault(queue, []).append(rank)
        self.subtree_ranks = {q: tuple(r) for q, r in subtree_ranks.items()}
        # Per queue: its subtree's ranks, and prefix sums of their GPUs and lost work.
        self.subtree_prefix: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]]
        self.subtree_prefix = {}
        for queue, ranks in self.subtree_ranks.items():
            gpus, lost = [0], [0.0]
            for rank in ranks:
                cand = session.candidates[self.repair_order[rank]]
                gpus.append(gpus[-1] + cand.gpus)
                lost.append(lost[-1] + cand.gpus * cand.lost_per_gpu_s)
            self.subtree_prefix[queue] = (ranks, tuple(gpus), tuple(lost))
        # Per queue: prefix sums of its subtree's candidates' GPUs, biggest first.
        self.subtree_biggest: dict[str, tuple[int, ...]] = {}
        for queue, ranks in self.subtree_ranks.items():
            sizes = sorted(
                (session.candidates[self.repair_order[r]].gpus for r in ranks), reverse=True
            )
            self.subtree_biggest[queue] = tuple(itertools.accumulate(sizes, initial=0))
        # Per queue: its subtree's loss rates in rank order (never decreasing), for the
        # repairs that can add no lost work (``_tied_repair``).
        self.subtree_rates = {
            queue: tuple(session.candidates[self.repair_order[r]].lost_per_gpu_s for r in ranks)
            for queue, ranks in self.subtree_ranks.items()
        }
        self.tie_tries = self.tie_cuts = 0  # the tied repair bound: computed, and cut
        self.tie_pools: dict[tuple[str, int, int], tuple[tuple[int, ...], tuple[float, ...]]] = {}
        self.node_index = {n: i for i, n in enumerate(session.node_names)}
        pods = _PodIndex.of(session, self.eligible, protected)
        self.groups, self.node_candidates = pods.groups, pods.node_candidates
        self.candidate_nodes, self.node_bound = pods.candidate_nodes, pods.node_bound
        self.node_weight, self.node_held = pods.node_weight, pods.node_held
        self.room_cache: dict[object, list[tuple[Changes, int]]] = {}
        self.floor_cache: dict[tuple[str, int], float] = {}
        self.slot_cache: dict[tuple[str, int, int], list[float]] = {}
        self.job_shares: dict[int, dict[str, float]] = {}
        self.job_floors: dict[tuple[int, int], float] = {}
        self.left_cache: dict[str, _Offer] = {}
        self.offer_cache: dict[tuple[str, tuple[frozenset[int] | None, ...]], _Offer] = {}
        self.cover_cache: dict[tuple[tuple[tuple[int, float], ...], int], list[float]] = {}
        self.floor_orders: dict[tuple[int, bool], _FloorOrder] = {}
        self.first_charges: dict[int, FirstCharges] = {}
        self.first_tries = self.first_cuts = 0  # the first-node bound: computed, and cut
        self.pair_tables: dict[int, PairTable | None] = {}
        self.pair_tries = self.pair_cuts = 0  # the pair bound: computed, and cut
        self.last_branch: tuple[State, int, _Branch] | None = None
        self.spot_cache: dict[tuple[_Offer, int, int], list[float]] = {}
        self.tables = {size: self._size_table(size) for size in {p.gpus for p in session.to_place}}

    def _size_table(self, gpus: int) -> _SizeTable:
        s = self.s
        ready: list[int] = []
        bounds: list[tuple[int, float, int]] = []
        weak: list[tuple[float, int, str]] = []
        slots = [0] * (len(s.node_names) + 1)
        rank, by_floor, by_floor_ranks = self._identical_order(gpus)
        for node_i, node in enumerate(s.node_names):
            if not can_host(s, node, gpus):
                continue
            free = s.node_free[node]
            if gpus == 0:
                ready.append(node_i)
                continue
            slots[rank[node_i]] = free // gpus
            if free >= gpus:
                ready.append(node_i)
            if node in self.node_bound:
                protected, rate = self.node_bound[node]
                if free < gpus:
                    bounds.append((protected, (gpus - free) * rate, node_i))
                # Only where its candidates, all evicted, make a further slot: elsewhere
                # ``_slot_costs`` finds none, and on full clusters that is most nodes.
                if further_slots(s.node_gpus[node], free, self.node_held[node], gpus) > 0:
                    weak.append(((gpus - free % gpus) * rate, node_i, node))
        return _SizeTable(
            tuple(ready),
            tuple(sorted(bounds)),
            tuple(sorted((0, lost, node_i) for _, lost, node_i in bounds)),
            tuple(itertools.accumulate(reversed(slots)))[::-1],
            _SlotOrder(tuple(sorted(weak)), gpus, sum(1 for p in s.to_place if p.gpus == gpus)),
            rank,
            {n: rank[i] for i, n in enumerate(s.node_names) if can_host(s, n, gpus)},
            by_floor,
            by_floor_ranks,
        )

    def _identical_order(
        self, gpus: int
    ) -> tuple[tuple[int, ...], tuple[tuple[int, float, int], ...] | None, tuple[int, ...]]:
        """The order identical pods of ``gpus`` take nodes in; the floor order that goes with it.

        Identical pods are interchangeable, so each plan is explored once if
        they take nodes in some fixed order (``first`` in ``_children``). Node
        order would do, but then the cheapest node for the first pod shuts out
        every cheaper-named node for the rest, and the first plans found are
        poor. So the order is the nodes' own cost: those that host the pod
        as they are, then by ``_floor_of`` (protected ones last), then those
        that cannot host it; the first dive then takes the cheapest nodes in
        turn. Returns each node's rank, and for the nodes with a finite floor
        their (protected, floor, node) in rank order with their ranks, which
        is the order ``_nodes_by_floor`` hands them out in. Nodes of one floor
        come lightest candidate first: once one of them loses on weight, the
        rest of them do too (``_Cutoff.past``). A single pod of a size needs
        neither: node order, and no floor computed.
        """
        s = self.s
        if gpus == 0 or sum(1 for p in s.to_place if p.gpus == gpus) < 2:
            return tuple(range(len(s.node_names))), None, ()
        keys: list[tuple[int, int, float, float, int]] = []
        for node_i, node in enumerate(s.node_names):
            free = s.node_free[node]
            if not can_host(s, node, gpus) or (free < gpus and node not in self.node_bound):
                keys.append((2, 0, 0.0, 0.0, node_i))
            elif free >= gpus:
                keys.append((0, 0, 0.0, 0.0, node_i))
            else:
                floor = self._floor_of(node, gpus - free)
                keys.append((1, self.node_bound[node][0], floor, self.node_weight[node_i], node_i))
        keys.sort()
        rank = [0] * len(keys)
        for r, key in enumerate(keys):
            rank[key[4]] = r
        by_floor = [(r, key) for r, key in enumerate(keys) if key[0] == 1 and key[2] < math.inf]
        return (
            tuple(rank),
            tuple((protected, floor, node_i) for _, (_, protected, floor, _, node_i) in by_floor),
            tuple(r for r, _ in by_floor),
        )

    def _slot_costs(self, node: str, gpus: int, spread: int) -> list[float]:
        """Lower bounds on the lost work of each further ``gpus``-slot on ``node``, non-decreasing.

        ``spread`` is the most nodes the pods being costed can use (one per pod).

        Lost work is a sum over evicted pods, so the pods of an untouched node
        carry their own share of any plan's cost, whatever else the plan
        evicts; ``cover[x]`` is the least such share that frees ``x`` GPUs
        there (a 0/1 knapsack over the node's candidate pods). A gang broken
        here costs its whole job, and the pods can reach at most ``spread``
        of its nodes, so the node may carry a larger part of that job
        (``_closure_charge``) when the slot breaks the gang: a second
        knapsack over the node's jobs, surplus pods at their loss rate, the
        rest at that part, and ``cover`` is the larger of the two. The j-th
        further slot needs ``(free // gpus + j) * gpus - free`` GPUs. The
        marginals of the lower convex hull of those costs never exceed the
        real ones summed and never decrease, so taking the cheapest slots
        across nodes (as ``_remaining_bound`` does) stays a lower bound. Slots
        the node's candidates cannot free are left out: no plan has them.
        """
        key = (node, gpus, spread)
        cached = self.slot_cache.get(key)
        if cached is not None:
            return cached
        free = self.s.node_free[node]
        more = further_slots(self.s.node_gpus[node], free, self.node_held.get(node, 0), gpus)
        if more <= 0:
            self.slot_cache[key] = []
            return []
        pods = [
            [(g.gpus, g.gpus * self.s.candidates[g.candidate].lost_per_gpu_s)]
            for g in self.groups.get(node, ())
            for _ in g.pods
        ]
        need = (free // gpus + more) * gpus - free
        cover = knapsack_cover(pods, need)
        by_job = knapsack_cover(self._job_options(node, spread), need)
        cover = [max(a, b) for a, b in zip(cover, by_job, strict=True)]
        marginals = hull_marginals(cover, free, gpus, more)
        self.slot_cache[key] = marginals
        return marginals

    def _job_options(self, node: str, spread: int) -> list[list[tuple[int, float]]]:
        """Per job on ``node``: (GPUs freed there, least charge) for each way to free them.

        Up to its surplus pods go at their loss rate (any amount up to their
        GPUs, a relaxation); all of its pods there, when that breaks the gang,
        at ``_closure_charge``.
        """
        out: list[list[tuple[int, float]]] = []
        for c, sizes in pod_sizes(self.groups.get(node, ())).items():
            cand = self.s.candidates[c]
            held = sum(sizes)
            some = surplus_gpus(cand, sizes)
            alone = held if some is None else some
            options = [(f, f * cand.lost_per_gpu_s) for f in range(1, alone + 1)]
            if alone < held:
                options.append((held, self._closure_charge(c, node, spread)))
            out.append(options)
        return out

    def _closure_charge(self, c: int, node: str, spread: int) -> float:
        """The part of job ``c``'s whole lost work that ``node`` may carry when it breaks the gang.

        Each of the job's nodes carries a weight ``max(share, u)``, its share
        being its part of the job's GPUs; a plan's pods reach at most
        ``m = min(nodes of the job, spread)`` of them, and ``u`` is the
        largest value that keeps the ``m`` largest weights summing to at most
        one. So the charges of any plan's nodes never add up to more than the
        job costs, and a job spread thin over many nodes is charged in full
        to the few a small plan can use. Shares alone (``u`` = 0) are what
        the pods' own lost work charges.
        """
        cand = self.s.candidates[c]
        shares = self.job_shares.get(c)
        if shares is None:
            by_node: dict[str, int] = {}
            for pod in cand.pods:
                by_node[pod.node] = by_node.get(pod.node, 0) + pod.gpus
            total = sum(by_node.values()) or 1
            shares = {n: held / total for n, held in by_node.items()}
            self.job_shares[c] = shares
        m = min(len(shares), spread)
        u = self.job_floors.get((c, m))
        if u is None:
            u = _common_weight(sorted(shares.values(), reverse=True), m)
            self.job_floors[(c, m)] = u
        return max(shares[node], u) * cand.gpus * cand.lost_per_gpu_s

    # -- driving -------------------------------------------------------------

    def run(self) -> Found | None:
        start = State(evicted={}, free={}, placement=(), evicted_by_queue={})
        self._place(start, 0)
        return self.best

    def _place(self, state: State, i: int) -> None:
        pods = self.s.to_place
        if i == len(pods):
            self._repair(state)
            return
        for changes, node, node_i, delta in self._children(state, i):
            if not self.budget.tick():
                return
            child = self._evict(state, changes, delta) if changes else state
            if changes and self._dominated(child):
                continue  # the best plan improved since this child was ranked
            gpus = pods[i].gpus
            free = dict(child.free)
            free[node] = self._free(child, node) - gpus
            child = State(
                evicted=child.evicted,
                free=free,
                placement=(*child.placement, (pods[i].name, node)),
                evicted_by_queue=child.evicted_by_queue,
                protected=child.protected,
                lost=child.lost,
                victims=child.victims,
                weight=child.weight,
                last_node=self.tables[gpus].rank[node_i],
                repair_from=child.repair_from,
                reclaimed=child.reclaimed,
                partial=child.partial,
                left=child.left,
            )
            self._place(child, i + 1)
            if self.budget.exhausted or self._dominated(state):
                return

    def _repair(self, root: State) -> None:
        """Fix the queue rules that more evictions can fix, cheapest GPUs first.

        A knapsack-style branch and bound over the candidates in
        ``repair_order`` (lowest loss rate first): at each rank from
        ``repair_from`` on, either take more of that candidate (the whole
        job, or one more surplus pod) and continue from the same rank, or
        pass it by. Before each rank, the fractional bound over what is left
        from there cuts what cannot beat the best plan. A repair can take
        thousands of victims, so the depth-first walk keeps its own stack.
        """
        first = self._open_repair(root)
        stack = [first] if first is not None else []
        while stack:
            frame = stack[-1]
            child = None
            if not self.budget.exhausted and not self._dominated(frame.state):
                child = self._next_repair(frame)
            if child is None:
                stack.pop()
                continue
            opened = self._open_repair(child)
            if opened is not None:
                stack.append(opened)

    def _open_repair(self, state: State) -> _RepairFrame | None:
        """A frame to branch from, or None when ``state`` is a leaf or a dead end.

        A rule more evictions cannot repair (a victim's queue below its
        guarantee) ends the branch at once, before it costs a step.
        """
        found = violations(self.s, state.evicted_by_queue, state.reclaimed)
        if any(not v.repairable for v in found):
            return None
        if not self.budget.tick():
            return None
        if not found:
            self._leaf(state)
            return None
        tails = []  # each violated queue's subtree ranks from repair_from on (sorted slices)
        for queue in {v.queue for v in found}:
            ranks = self.subtree_ranks.get(queue, ())
            tails.append(ranks[bisect.bisect_left(ranks, state.repair_from) :])
        if len(tails) == 1:
            return _RepairFrame(state, found, tails[0])
        return _RepairFrame(state, found, tuple(sorted(set().union(*tails))))

    def _next_repair(self, frame: _RepairFrame) -> State | None:
        """The next child of ``frame`` worth exploring, or None when it has no more."""
        state = frame.state
        while True:
            if frame.option < len(frame.options):
                changes = frame.options[frame.option]
                frame.option += 1
                if not self.budget.tick():
                    return None
                child = self._evict(state, changes)
                if self._dominated(child):
                    continue
                return replace(child, repair_from=frame.rank)
            if frame.next_rank >= len(frame.ranks):
                return None
            frame.rank = frame.ranks[frame.next_rank]
            frame.next_rank += 1
            partial = {c: state.evicted[c] for c in state.partial}
            needs = self._repair_needs(frame.found, partial)
            lost, victims = self._repair_bound(frame.found, frame.rank, needs)
            if self._beyond_best(state, 0, lost, victims):
                return None
            left = None  # until it has cut once, for ``_TIE_TRIES`` tries; after, always
            if self.tie_cuts or self.tie_tries < _TIE_TRIES:
                left = self._tie_budget(state, lost)
            if left is not None:
                self.tie_tries += 1
                tied = self._tied_repair(left, frame.found, frame.rank, needs)
                if tied is None or self._beyond_best(state, 0, lost, *tied):
                    self.tie_cuts += 1
                    return None
            i = self.repair_order[frame.rank]
            options = self._repair_options(self.s.candidates[i], state.evicted.get(i, frozenset()))
            options.sort(key=lambda changes: (self._delta(state, changes), self._names(changes)))
            frame.options, frame.option = options, 0

    # -- children --------------------------------------------------------------

    def _children(self, state: State, i: int) -> Iterator[tuple[Changes, str, int, DeltaCost]]:
        """Placements of pod ``i``, cheapest first, evaluated lazily.

        Each node gets a lower bound first (the GPUs it lacks times the lowest
        loss rate among its candidate pods); nodes are evaluated in that order,
        and an evaluated child is handed out once no unevaluated node could
        beat it. Nodes whose bound is already worse than the best plan are
        never evaluated. Per-node facts are precomputed for the snapshot's
        free GPUs (``_SizeTable``); only nodes whose free GPUs changed on this
        branch are looked at again.
        """
        s, pod = self.s, self.s.to_place[i]
        if self._beyond_best(state, 0, self._remaining_bound(state, i)):
            return
        pair = self._last_pair_bound(state, i)
        if pair is not None:
            self.pair_tries += 1
            if self._beyond_best(state, 0, pair):
                self.pair_cuts += 1
                return
        first = 0
        if i > 0 and s.to_place[i - 1].gpus == pod.gpus:
            first = state.last_node  # identical pods go to nodes in order: no mirror plans
        gpus, table, changed = pod.gpus, self.tables[pod.gpus], state.free
        rank = table.rank
        placed_groups = frozenset(s.node_group[n] for _, n in state.placement)
        names, node_gpus, group_of = s.node_names, s.node_gpus, s.node_group
        # (key, fit, pod names, node, changes, their delta): the delta goes with the child
        # to ``_evict``, which would compute it again.
        ready: list[
            tuple[DeltaCost, tuple[int, int, str], tuple[str, ...], int, Changes, DeltaCost]
        ] = []
        idle_seen: set[tuple[int, int, bool]] = set()

        # A node's protected bound is 1 only while no protected job is a victim yet:
        # once one is, more of its pods cost no further protected victim.
        count_protected = state.protected == 0
        fits: list[tuple[int, int]] = [
            (node_i, self.s.node_free[names[node_i]])
            for node_i in table.ready
            if rank[node_i] >= first and names[node_i] not in changed
        ]
        bounds: list[tuple[int, float, int, bool]] = []
        for node, free in changed.items():
            node_i = self.node_index[node]
            if rank[node_i] < first or node_gpus[node] < gpus or not s.node_schedulable[node]:
                continue
            if free >= gpus:
                fits.append((node_i, free))
            else:
                left = self._bound_left(state, node, gpus - free)
                if left is not None:
                    protected, lacking = left
                    bounds.append((protected if count_protected else 0, lacking, node_i, False))
        fits.sort(key=lambda fit: rank[fit[0]])
        for node_i, free in fits:
            node = names[node_i]
            near = group_of[node] in placed_groups
            if node not in self.groups:
                # Nodes with no candidate pods and the same room are interchangeable;
                # the first in rank order keeps the most room for identical pods.
                twin = (free, node_gpus[node], near)
                if twin in idle_seen:
                    continue
                idle_seen.add(twin)
            ready.append((_ZERO, (free - gpus, 0 if near else 1, node), (), node_i, {}, _ZERO))
        if gpus == 0:
            ready.sort(key=lambda r: (r[0], r[1]))
            for _, _, _, node_i, child, delta in ready[:1]:
                yield child, names[node_i], node_i, delta
            return
        heapq.heapify(ready)
        heapq.heapify(bounds)
        cutoff = _Cutoff()
        branch: _Branch | None = None  # for the first-node bound, once it pays
        earlier: tuple[int, list[float]] | None = None  # its last try here: rank, slots summed
        # For the last pod of its size the node's own floor, checked above, is that bound.
        more_of_size = i + 1 < len(s.to_place) and s.to_place[i + 1].gpus == gpus
        nodes = self._nodes_by_floor(state, gpus, first, count_protected, bounds, cutoff)
        # With one to three more pods of this size after this one, the pair bound on this
        # pod's node and theirs (``PairTable.cheapest_after``); the changed nodes it reads,
        # gathered the first time it is asked here.
        more = len(s.to_place) - i - 1
        pairs = self._pair_ready(i) if 1 <= more <= 3 else None
        changed_nodes: list[Changed] | None = None
        for protected, lost, node_i, tight in nodes:
            while ready and (ready[0][0][0], ready[0][0][1]) <= (protected, lost):
                _, _, _, at, child, delta = heapq.heappop(ready)
                yield child, names[at], at, delta
            if self._beyond_best(state, protected, lost) or self.budget.exhausted:
                break
            if tight and self._beyond_best(state, protected, lost, 1, None):
                # A new victim and no less lost work lose to the best plan; the untouched
                # nodes after this one lose no less (the best only improves): stop them.
                cutoff.untouched = True
                continue
            if tight and self._beyond_best(state, protected, lost, 1, self.node_weight[node_i]):
                cutoff.past = (protected, lost)  # every way to make room here loses to the best
                continue
            node = names[node_i]
            if more_of_size and self.best is not None and self._first_bound_pays(gpus):
                branch = branch or self._branch(state, gpus)
                self.first_tries += 1
                reused = self._reused_first_bound(branch, gpus, node, rank[node_i], earlier)
                if reused is not None and self._beyond_best(state, 0, reused):
                    self.first_cuts += 1  # where it cuts, so would the walk
                    continue
                here, later, summed = self._first_bounds(state, branch, i, node, rank[node_i])
                if len(summed) > 1:
                    earlier = (rank[node_i], summed)
                if self._beyond_best(state, 0, here):
                    self.first_cuts += 1
                    # This pod here, and the rest of its size from this node's rank on, lose
                    # to the best. Without this node's own slot, ``later`` bounds every plan
                    # whose pods all lie at this rank or later; untouched nodes come in rank
                    # order while no protected victim is taken, so when it loses too, every
                    # untouched node after this one does.
                    if tight and count_protected and self._beyond_best(state, 0, later):
                        cutoff.untouched = True
                    continue
            # After the first-node walk, whose slots the next try reuses: asked before it,
            # it saved that walk where it cut but left the reuse stale (seed 5 3 % slower).
            if pairs is not None and node in pairs.rank:
                branch = branch or self._branch(state, gpus)
                if node not in branch.skip:
                    if changed_nodes is None:
                        changed_nodes = self._changed(state, gpus, first)
                    self.pair_tries += 1
                    after = self._pair_after(
                        state, i, node, pairs, branch.skip, changed_nodes, more
                    )
                    if self._beyond_best(state, 0, after):
                        self.pair_cuts += 1  # this node, and any for the pods after it, lose
                        continue
            free = self._free(state, node)
            for changes, freed in self._room(state, node, gpus - free):
                if not self.budget.tick():
                    break
                delta = self._delta(state, changes)
                repair = self._repair_floor(state, changes, delta)
                if repair is None:
                    continue
                key = (delta[0], delta[1] + repair[0], delta[2] + repair[1], delta[3])
                fit = fit_key(s, node, free + freed, gpus, placed_groups)
                heapq.heappush(ready, (key, fit, self._names(changes), node_i, changes, delta))
        while ready:
            _, _, _, at, child, delta = heapq.heappop(ready)
            yield child, names[at], at, delta

    def _nodes_by_floor(
        self,
        state: State,
        gpus: int,
        first: int,
        count_protected: bool,
        final: list[tuple[int, float, int, bool]],
        cutoff: _Cutoff,
    ) -> Iterator[tuple[int, float, int, bool]]:
        """Nodes to free room on, by their best known lower bound: (protected, lost, node, tight).

        Once the reader sets ``cutoff.untouched``, only the nodes this branch
        touched are handed out still.

        ``final`` holds the bounds of the nodes this branch changed. A node
        that hosts a victim's pods keeps the cheap bound (GPUs lacking times
        the lowest loss rate) as well; every other node is ordered by the
        tighter ``_floor_of``, which depends on the snapshot alone.
        That order is built lazily and shared by every call of the search
        (``_FloorOrder``): a call reads it only up to the first node that
        cannot beat the best plan, and nodes whose cheap bound lies beyond
        that are never refined.
        """
        s, names = self.s, self.s.node_names
        rank = self.tables[gpus].rank
        changed = state.free
        touched: set[str] = set()
        for c in state.evicted:
            touched.update(self.candidate_nodes[c])
        for node in touched:
            node_i = self.node_index[node]
            free = s.node_free[node]
            if (
                node in changed
                or rank[node_i] < first
                or free >= gpus
                or not can_host(s, node, gpus)
            ):
                continue
            left = self._bound_left(state, node, gpus - free)
            if left is not None:
                protected, lacking = left
                final.append((protected if count_protected else 0, lacking, node_i, False))
        heapq.heapify(final)
        table = self.tables[gpus]
        if count_protected and table.by_floor is not None:
            at = bisect.bisect_left(table.by_floor_ranks, first)
            entries = table.by_floor
            while at < len(entries):
                entry = entries[at]
                at += 1
                while final and final[0][:3] < entry:
                    yield heapq.heappop(final)
                if cutoff.untouched:
                    break
                node = names[entry[2]]
                if node not in changed and node not in touched:
                    yield (*entry, True)
                    if cutoff.past is not None:  # the rest of this floor weigh no less
                        while at < len(entries) and entries[at][:2] == cutoff.past:
                            at += 1
                        cutoff.past = None
            while final:
                yield heapq.heappop(final)
            return
        order = self.floor_orders.get((gpus, count_protected))
        if order is None:
            table = self.tables[gpus]
            order = _FloorOrder(table.bounds if count_protected else table.bounds_unprotected)
            self.floor_orders[(gpus, count_protected)] = order
        weak, refined = order.weak, order.refined
        r = 0
        while not cutoff.untouched:
            if order.next_weak < len(weak) and (
                r == len(refined) or weak[order.next_weak] < refined[r]
            ):
                protected, lost, node_i = weak[order.next_weak]
                order.next_weak += 1
                node = names[node_i]
                floor = self._floor_of(node, gpus - s.node_free[node])
                if floor < math.inf:  # else its jobs cannot make the room: never a choice
                    # Lands at r or later: everything before r was at most this weak bound.
                    bisect.insort(refined, (protected, max(lost, floor), node_i))
                continue
            if final and (r == len(refined) or final[0][:3] < refined[r]):
                yield heapq.heappop(final)
                continue
            if r == len(refined):
                return
            protected, lost, node_i = refined[r]
            r += 1
            node = names[node_i]
            if rank[node_i] >= first and node not in changed and node not in touched:
                yield protected, lost, node_i, True
        while final:
            yield heapq.heappop(final)

    def _bound_left(self, state: State, node: str, need: int) -> tuple[int, float] | None:
        """(protected, lost) lower bounds on freeing ``need`` more GPUs on ``node`` on this branch.

        Only the pods this branch has not evicted yet can free them, each at
        its own lost work (a knapsack over them); None when they cannot free
        that many at all (the node is then no choice here).
        """
        offer = self._left_on(state, node)
        if offer.room < need:
            return None
        return offer.protected, self._cover(offer.pods, need)[need]

    def _cover(self, pods: tuple[tuple[int, float], ...], need: int) -> list[float]:
        """``cover[x]``: the least lost work of ``pods`` that frees at least x GPUs, x <= need."""
        key = (pods, need)
        found = self.cover_cache.get(key)
        if found is None:
            found = knapsack_cover(([pod] for pod in pods), need)
            self.cover_cache[key] = found
        return found

    def _partly_taken(self, state: State) -> frozenset[str]:
        """Nodes of the victims that keep some pods: a slot there costs less than a new gang's."""
        if not state.partial:
            return frozenset()
        return frozenset().union(*(self.candidate_nodes[c] for c in state.partial))

    def _left_on(self, state: State, node: str) -> _Offer:
        """What the pods on ``node`` this branch has not evicted offer.

        Kept per state for the nodes the branch evicted on (``_evict``); the
        others offer what the snapshot holds.
        """
        found = state.left.get(node)
        if found is None:
            found = self.left_cache.get(node)
            if found is None:
                found = self._offer(state.evicted, node)
                self.left_cache[node] = found
        return found

    def _offer(self, evicted: Mapping[int, frozenset[int]], node: str) -> _Offer:
        """What ``node``'s candidate pods offer with ``evicted`` gone; kept per node and what
        is evicted of its candidates, which many branches share."""
        groups = self.groups.get(node, ())
        key = (node, tuple([evicted.get(g.candidate) for g in groups]))
        found = self.offer_cache.get(key)
        if found is None:
            found = self.offer_cache[key] = self._compute_offer(evicted, groups)
        return found

    def _compute_offer(
        self, evicted: Mapping[int, frozenset[int]], groups: tuple[_Group, ...]
    ) -> _Offer:
        protected, rate, room = 1, math.inf, 0
        pods: list[tuple[int, float]] = []
        for g in groups:
            taken = evicted.get(g.candidate)
            left = len(g.pods) if taken is None else sum(1 for p in g.pods if p not in taken)
            if left:
                cand_rate = self.s.candidates[g.candidate].lost_per_gpu_s
                room += left * g.gpus
                rate = min(rate, cand_rate)
                pods.extend([(g.gpus, g.gpus * cand_rate)] * left)
                if g.candidate not in self.protected:
                    protected = 0
        return _Offer(protected, rate, room, tuple(sorted(pods)))

    def _floor_of(self, node: str, need: int) -> float:
        """The least lost work of freeing ``need`` GPUs on ``node`` while its jobs are untouched.

        Valid while no job with pods on ``node`` is a victim yet (each one
        taken is then a new victim, and nothing of it is already paid for).
        Per job on the node: up to its surplus pods there go at their GPUs'
        loss rate; more than that breaks the gang and costs the whole job. A
        small knapsack over the node's jobs, with any amount up to the surplus
        allowed (a relaxation), gives a lower bound on every eviction set that
        ``_room`` could return, gang closure included; it depends on the
        snapshot alone, so it is computed once per node and need.
        """
        key = (node, need)
        found = self.floor_cache.get(key)
        if found is None:
            found = self._floor(node, need)
            self.floor_cache[key] = found
        return found

    def _floor(self, node: str, need: int) -> float:
        """See ``_floor_of``: the knapsack over the jobs on ``node``, computed.

        When ``need`` takes every GPU the candidates hold there, every pod
        goes and there is no choice: each job's pods there at their loss
        rate, or the whole job where that many break its gang. Otherwise a
        job offers any amount up to its surplus pods' GPUs at its loss rate,
        or its whole job for all its GPUs there. Freeing more than ``x`` at
        the rate never beats freeing ``x`` (rates are never negative), so
        only amounts up to ``x`` are tried for ``x``: at 10,000 nodes this
        runs for every node once per search, and most nodes' jobs take the
        shortcut of ``_floor_by_units``.
        """
        held = self.node_held.get(node, 0)
        if need > held:
            # Its candidates cannot free that many: no plan makes the room here. For
            # whole-node pods on a full cluster that is most nodes (a job that may not go
            # holds part of each), and each was costed job by job to learn it.
            return math.inf
        per = pod_sizes(self.groups.get(node, ()))
        clear = 0.0
        jobs: list[tuple[int, int, float, float]] = []  # (alone, held, rate, whole job)
        candidates = self.s.candidates
        for c, sizes in per.items():
            cand = candidates[c]
            on = sum(sizes)
            rate = cand.lost_per_gpu_s
            whole = cand.gpus * rate
            some = surplus_gpus(cand, sizes)
            alone = on if some is None else some
            # Every pod here goes: at its rate where its surplus pods hold all its GPUs here
            # (every pod may go, or the rest hold none), else its gang breaks.
            clear += on * rate if alone >= on else whole
            jobs.append((alone, on, rate, whole))
        if need == held:  # every pod there goes (a whole-node pod on a full node)
            return clear
        return _floor_over(jobs, need)

    def _remaining_bound(self, state: State, i: int) -> float:
        """A lower bound on the lost work still needed to place pods ``i`` onwards.

        For each pod size: the slots nodes already have for free cover some
        pods; every further pod needs GPUs freed on some node. On a node this
        branch left untouched, a slot costs at least its pods' own share of
        lost work (``_slot_costs``); on one it changed, at least the GPUs it
        lacks times its lowest loss rate. Summing the cheapest such slots
        never overestimates, because lost work adds up per evicted pod.
        Pods the same size as the one placed last go to nodes from its node
        on (``_children``), so only those nodes' slots count for them.
        The largest bound over the sizes is returned; infinity when the pods
        cannot fit even with every candidate evicted. (Identical pods also
        meet the first-node bound, asked by ``_children`` before a child is
        made; asked here as well, it cut nothing that was not cut anyway.)
        """
        s = self.s
        sizes: dict[int, int] = {}
        for pod in s.to_place[i:]:
            if pod.gpus:
                sizes[pod.gpus] = sizes.get(pod.gpus, 0) + 1
        same = s.to_place[i - 1].gpus if i > 0 else None
        bound = 0.0
        for gpus, count in sizes.items():
            table = self.tables[gpus]
            first = state.last_node if gpus == same else 0
            branch = self._branch(state, gpus)
            short = branch.short(table.free_slots[first], count, first)
            if short <= 0:
                continue
            fresh = branch.fresh(first, self._spot_costs(state, gpus))
            bound = max(
                bound,
                table.extra.cheapest(
                    self._slot_costs, fresh, short, first, branch.skip, table.rank
                ),
            )
        return bound

    def _branch(self, state: State, gpus: int) -> _Branch:
        """What the nodes ``state`` changed offer pods of ``gpus``, for bounds from any rank.

        ``_children`` asks for the state's right after ``_remaining_bound`` did: the last
        one is kept.
        """
        last = self.last_branch
        if last is not None and last[0] is state and last[1] == gpus:
            return last[2]
        branch = self._compute_branch(state, gpus)
        self.last_branch = (state, gpus, branch)
        return branch

    def _compute_branch(self, state: State, gpus: int) -> _Branch:
        host_rank, node_free = self.tables[gpus].host_rank, self.s.node_free
        partly = self._partly_taken(state)
        spots: list[tuple[int, int, str, int]] = []
        for node, free in itertools.chain(
            state.free.items(), ((n, node_free[n]) for n in partly if n not in state.free)
        ):
            at = host_rank.get(node)
            if at is not None:
                spots.append((at, free // gpus - node_free[node] // gpus, node, free))
        return _Branch(spots, state.free.keys() | partly)

    def _spot_costs(self, state: State, gpus: int) -> Callable[[str, int], list[float]]:
        """The further slots of ``gpus`` on a node ``state`` changed, from its free GPUs."""

        def costs(node: str, free: int) -> list[float]:
            if node not in self.node_bound:
                return []
            offer = self._left_on(state, node)
            key = (offer, free, gpus)
            found = self.spot_cache.get(key)
            if found is None:
                more = further_slots(self.s.node_gpus[node], free, offer.room, gpus)
                if more > 0:
                    need = (free // gpus + more) * gpus - free
                    found = hull_marginals(self._cover(offer.pods, need), free, gpus, more)
                else:
                    found = []
                self.spot_cache[key] = found
            return found

        return costs

    def _first_bound_pays(self, gpus: int) -> bool:
        """Whether the first-node bound is worth its set-up for pods of ``gpus`` now.

        It holds for identical pods only (they take nodes in rank order). Its
        set-up walks every node's jobs, about an eighth of a search step per
        node; a search that has already taken a quarter as many steps as there
        are nodes has spent twice that, and is the kind that runs on (the 8 x
        8-GPU searches at 1,000 nodes take thousands). Quick searches, most
        of them, never pay for it, nor does the 10,000-node one (2,000 steps).
        Once built it pays only by cutting: a search where it has cut nothing
        in its first ``_FIRST_TRIES`` tries stops computing it.
        """
        if self.tables[gpus].by_floor is None:
            return False
        if self.first_tries >= _FIRST_TRIES and not self.first_cuts:
            return False
        return gpus in self.first_charges or self.budget.steps >= max(
            len(self.s.node_names) // 4, _FIRST_AFTER
        )

    def _reused_first_bound(
        self,
        branch: _Branch,
        gpus: int,
        node: str,
        at: int,
        earlier: tuple[int, list[float]] | None,
    ) -> float | None:
        """The first-node bound with a pod of ``gpus`` on ``node`` (of rank ``at``) from the
        slots the last try summed (``earlier``: its rank, and those slots), or None where
        they do not bound it.

        The slots summed from a rank no higher than ``at``, with no more charges, bound
        those from ``at`` on: with this node's own slot, a bound that needs no walk. From a
        higher rank they do not: fewer nodes competed there, so their sum can exceed the
        cheapest from ``at`` (nodes come in rank order only while no protected victim is
        taken; after, in floor order). Nor for a node the branch changed: its slots are
        among those summed.
        """
        if earlier is None or earlier[0] > at or node in branch.skip:
            return None
        charges = self._first_charges(gpus)
        own = charges.first_slot(node, at, self._touched_of(branch, charges))
        return own + math.fsum(earlier[1][:-1])

    def _first_bounds(
        self, state: State, branch: _Branch, i: int, node: str, first: int
    ) -> tuple[float, float, list[float]]:
        """First-node bounds on pod ``i`` and the later pods of its size, all on nodes of
        rank ``first`` on (``first_charges``): with pod ``i`` on ``node`` (of that rank),
        and without saying where, with the slots the latter sums; identical pods only."""
        gpus = self.s.to_place[i].gpus
        count = sum(1 for pod in self.s.to_place[i:] if pod.gpus == gpus)
        short = branch.short(self.tables[gpus].free_slots[first], count, first)
        fresh = branch.fresh(first, self._spot_costs(state, gpus)) if short > 0 else []
        if node in branch.skip:  # a changed node: its slots are in ``fresh``
            later = self._first_charged(branch, gpus, fresh, short, first) if short > 0 else 0.0
            return later, later, []
        charges = self._first_charges(gpus)
        touched = self._touched_of(branch, charges)
        return charges.cheapest_with(node, fresh, short, first, branch.skip, touched)

    def _first_charged(
        self, branch: _Branch, gpus: int, fresh: list[float], short: int, first: int
    ) -> float:
        charges = self._first_charges(gpus)
        touched = self._touched_of(branch, charges)
        return charges.cheapest(fresh, short, first, branch.skip, touched)

    def _touched_of(self, branch: _Branch, charges: FirstCharges) -> Touched:
        if branch.touched is None:
            branch.touched = charges.touched(*self._touched(branch.skip))
        return branch.touched

    def _first_charges(self, gpus: int) -> FirstCharges:
        """The first-node charges of ``gpus``-pods, built the first time a bound needs them."""
        found = self.first_charges.get(gpus)
        if found is None:
            found = FirstCharges.build(
                self.s,
                gpus,
                self.tables[gpus].host_rank,
                self.groups,
                self.candidate_nodes,
                self.node_held,
            )
            self.first_charges[gpus] = found
        return found

    def _last_pair_bound(self, state: State, i: int) -> float | None:
        """The pair bound (``pair_bound``) on the last two or three pods, or None where it is
        not asked (``_pair_ready``)."""
        left = len(self.s.to_place) - i
        table = self._pair_ready(i) if left in (2, 3) else None
        if table is None:
            return None
        gpus = self.s.to_place[i].gpus
        first = state.last_node if i > 0 and self.s.to_place[i - 1].gpus == gpus else 0
        skip, changed = self._branch(state, gpus).skip, self._changed(state, gpus, first)
        if left == 2:
            return table.cheapest(first, skip, changed)
        return table.cheapest_triple(first, skip, changed)

    def _pair_after(
        self,
        state: State,
        i: int,
        node: str,
        table: PairTable,
        skip: Set[str],
        changed: list[Changed],
        more: int,
    ) -> float:
        """The pair bound on pod ``i`` going to ``node`` (untouched) and the ``more`` after it
        to as many more nodes of its rank on (``PairTable.cheapest_after``). ``state`` and
        ``i`` name what it bounds: the completions of ``state`` with pod ``i`` there."""
        return table.cheapest_after(node, skip, changed, more)

    def _pair_ready(self, i: int) -> PairTable | None:
        """The pair table when pods ``i`` on, the last ones, are identical and each needs a
        node of its own, and the search has run long enough for it to pay (the rule of
        ``_first_bound_pays``); None otherwise, or once ``_PAIR_TRIES`` asks or more cut
        fewer than one in ``_PAIR_CUT_SHARE``."""
        s = self.s
        if self.best is None:
            return None
        gpus = s.to_place[i].gpus
        if gpus == 0 or any(pod.gpus != gpus for pod in s.to_place[i + 1 :]):
            return None
        if self.pair_tries >= _PAIR_TRIES and self.pair_cuts * _PAIR_CUT_SHARE < self.pair_tries:
            return None
        if gpus not in self.pair_tables and self.budget.steps < max(
            len(s.node_names) // 4, _FIRST_AFTER
        ):
            return None
        return self._pair_table(gpus)

    def _pair_table(self, gpus: int) -> PairTable | None:
        """The pair bound's table for pods of ``gpus``, built the first time it is asked;
        None where some node could take two such pods."""
        if gpus in self.pair_tables:
            return self.pair_tables[gpus]
        s, host_rank = self.s, self.tables[gpus].host_rank
        table = None
        if all(s.node_gpus[node] < 2 * gpus for node in host_rank):
            floors: dict[str, tuple[float, int]] = {}
            for node, at in host_rank.items():
                free = s.node_free[node]
                floor = 0.0 if free >= gpus else math.inf
                if free < gpus and node in self.node_bound:
                    floor = self._floor_of(node, gpus - free)
                if floor < math.inf:
                    floors[node] = (floor, at)
            candidates = s.candidates
            jobs = (
                (candidates[c].gpus * candidates[c].lost_per_gpu_s, nodes)
                for c, nodes in self.candidate_nodes.items()
                if len(nodes) > 1
            )
            table = PairTable.build(floors, jobs)
        self.pair_tables[gpus] = table
        return table

    def _changed(self, state: State, gpus: int, first: int) -> list[Changed]:
        """The nodes ``state`` changed that can still take a pod of ``gpus`` at rank ``first``
        on: what room there costs at least, and per other node the remaining work of the
        jobs on both.

        Room on such a node is costed as ``_floor`` costs an untouched one, with what the
        branch evicted gone: a job's pods there go at its loss rate while its gang holds
        (as many as it has beyond ``min_available`` still running), and beyond that all
        its remaining pods go, at its remaining work. Costing each pod at its own rate
        alone (what ``_spot_costs`` offers the remaining pods' bound) missed the gangs:
        on 1,000 nodes seed 5 a changed node cost 6,833 GPU-s so, where its cheapest room
        costs more, and 14 states the pair bound could not cut took a sixth of the plan.
        """
        s, host_rank = self.s, self.tables[gpus].host_rank
        out = []
        for node in sorted(self._branch(state, gpus).skip):
            at = host_rank.get(node)
            if at is None or at < first:
                continue
            need = gpus - self._free(state, node)
            if need > self.node_held.get(node, 0):
                continue  # not even all its candidates make the room (seed 5: 333 of 601)
            jobs: list[FloorJob] = []
            shares: dict[str, float] = {}
            held = 0
            for c in self.node_candidates.get(node, ()):
                cand = s.candidates[c]
                taken = state.evicted.get(c, frozenset())
                left = [pod for p, pod in enumerate(cand.pods) if p not in taken]
                here = [pod.gpus for pod in left if pod.node == node]
                if not here:
                    continue
                rate = cand.lost_per_gpu_s
                work = sum(pod.gpus for pod in left) * rate
                for other in {pod.node for pod in left} - {node}:
                    shares[other] = shares.get(other, 0.0) + work
                on = sum(here)
                held += on
                some = surplus_gpus(cand, here, len(left))  # None: all may go, the gang kept
                jobs.append((on if some is None else some, on, rate, work))
            if need > held:
                continue  # its pods cannot make the room: no choice
            out.append(Changed(node, at, _floor_over(jobs, need) if need > 0 else 0.0, shares))
        return out

    def _touched(self, skip: Set[str]) -> tuple[frozenset[str], frozenset[int]]:
        """The jobs with pods on a node in ``skip``, and their nodes outside it."""
        out: set[str] = set()
        jobs: set[int] = set()
        for node in skip:
            for c in self.node_candidates.get(node, ()):
                if c not in jobs:
                    jobs.add(c)
                    out.update(self.candidate_nodes[c])
        return frozenset(out.difference(skip)), frozenset(jobs)

    def _beyond_best(
        self,
        state: State,
        protected: int,
        lost: float,
        victims: int = 0,
        weight: float | None = 0.0,
    ) -> bool:
        """No plan below ``state`` can beat the best: it adds at least these amounts.

        ``weight`` None leaves the victims' weight out: the answer then never
        turns from yes to no as ``(protected, lost)`` grow.
        """
        if lost == math.inf:
            return True
        if self.best is None:
            return False
        best = self.best.cost
        if state.protected + protected != best.protected:
            return state.protected + protected > best.protected
        slack = 1e-9 * max(1.0, abs(best.lost_gpu_seconds))
        floor = state.lost + lost
        if floor > best.lost_gpu_seconds + slack:
            return True
        if floor < best.lost_gpu_seconds - slack:
            return False
        # Lost work at least the best's: then more victims than the best loses too, and as
        # many loses when they weigh more (``weight`` is the least the new ones add).
        if state.victims + victims != best.victim_jobs or weight is None:
            return state.victims + victims > best.victim_jobs
        return state.weight + weight > best.victim_weight + 1e-9 * max(1.0, abs(best.victim_weight))

    def _room(self, state: State, node: str, need: int) -> list[tuple[Changes, int]]:
        """Minimal eviction sets on ``node`` that free at least ``need`` GPUs there.

        The answer depends only on the node, the need and what is already
        evicted of the jobs there, so it is computed once per such key.
        """
        on_node = self.node_candidates.get(node, ())
        key = (node, need, tuple(state.evicted.get(c, frozenset()) for c in on_node))
        cached = self.room_cache.get(key)
        if cached is None:
            cached = self._compute_room(state, node, need)
            self.room_cache[key] = cached
        return cached

    def _compute_room(self, state: State, node: str, need: int) -> list[tuple[Changes, int]]:
        groups = []
        for g in self.groups.get(node, ()):
            taken = state.evicted.get(g.candidate, frozenset())
            free_pods = tuple(p for p in g.pods if p not in taken)
            if free_pods:
                groups.append((g, free_pods))
        if not groups:
            return []
        vectors = sorted(
            itertools.product(*(range(len(pods) + 1) for _, pods in groups)),
            key=lambda v: (sum(v), v),
        )
        solutions: list[tuple[int, ...]] = []
        out: list[tuple[Changes, int]] = []
        for vector in vectors:
            if sum(vector) == 0 or any(
                all(a >= b for a, b in zip(vector, sol, strict=True)) for sol in solutions
            ):
                continue
            if not self.budget.tick():
                break
            changes: Changes = {}
            for (g, pods), count in zip(groups, vector, strict=True):
                if count:
                    base = changes.get(g.candidate, state.evicted.get(g.candidate, frozenset()))
                    changes[g.candidate] = base | frozenset(pods[:count])
            freed = 0
            for c, chosen in changes.items():
                cand = self.s.candidates[c]
                closed = close_gang(cand, chosen)
                changes[c] = closed
                before = state.evicted.get(c, frozenset())
                freed += sum(
                    cand.pods[p].gpus for p in closed - before if cand.pods[p].node == node
                )
            if freed >= need:
                solutions.append(vector)
                out.append((changes, freed))
        return out

    def _repair_needs(
        self, found: list[QueueViolation], partial: Mapping[int, frozenset[int]]
    ) -> list[int]:
        """Per violation, the GPUs new victims must free: its excess less what the victims
        that keep some pods (``partial``) still hold in its subtree, since more of theirs
        adds no victim."""
        if not partial:
            return [violation.excess for violation in found]
        ancestors, candidates = self.s.tree.ancestors, self.s.candidates
        needs = []
        for violation in found:
            need = violation.excess
            for c, taken in partial.items():
                cand = candidates[c]
                if violation.queue in ancestors[cand.queue]:
                    need -= cand.gpus - sum(cand.pods[k].gpus for k in taken)
            needs.append(need)
        return needs

    def _repair_bound(
        self, found: list[QueueViolation], first: int, needs: list[int]
    ) -> tuple[float, int]:
        """Lower bounds on the lost work and new victims of repairing every violation.

        A queue over its bound by D GPUs needs D more GPUs evicted in its
        subtree from the candidates still open (rank ``repair_from`` on).
        Taking the D cheapest of them, as if jobs could be split (the
        fractional knapsack), never costs more than a real repair; GPUs
        already evicted are counted as still on offer, which only lowers the
        bound, so it comes from prefix sums in logarithmic time. New victims:
        the biggest jobs that cover each of ``needs``, what is left once
        today's victims there give up what they still hold (``_repair_needs``).
        Infinite lost work when the subtree cannot cover D at all.
        """
        lost_bound, victims_bound = 0.0, 0
        for violation, need in zip(found, needs, strict=True):
            ranks, gpus, lost = self.subtree_prefix.get(violation.queue, ((), (0,), (0.0,)))
            at = bisect.bisect_left(ranks, first)
            target = gpus[at] + violation.excess
            if target > gpus[-1]:
                return math.inf, 0
            end = bisect.bisect_left(gpus, target)  # the candidate that covers the need
            rate = self.s.candidates[self.repair_order[ranks[end - 1]]].lost_per_gpu_s
            last = (target - gpus[end - 1]) * rate
            lost_bound = max(lost_bound, lost[end - 1] - lost[at] + last)
            biggest = self.subtree_biggest.get(violation.queue, (0,))
            victims_bound = max(victims_bound, bisect.bisect_left(biggest, need))
        return lost_bound, victims_bound

    def _tie_budget(self, state: State, lost: float) -> float | None:
        """The lost work a plan below ``state`` may still add and tie the best plan, when
        adding at least ``lost`` it can at best tie the best's protected victims and lost
        work (so that victims and weight decide); else None. The tie's tolerance is
        ``_beyond_best``'s."""
        if self.best is None:
            return None
        best = self.best.cost
        slack = 1e-9 * max(1.0, abs(best.lost_gpu_seconds))
        if state.protected != best.protected or state.lost + lost < best.lost_gpu_seconds - slack:
            return None
        return best.lost_gpu_seconds + slack - state.lost

    def _tied_repair(
        self,
        budget: float,
        found: list[QueueViolation],
        first: int,
        needs: list[int],
    ) -> tuple[int, float] | None:
        """New victims and their least weight for a repair that must not lose more work
        than the best plan, or None when no such repair exists.

        Called when a branch already ties the best plan's lost work with the
        repair's own floor, with ``budget`` left to lose (``_tie_budget``): then
        only candidates whose GPUs cost at most that can help (at least one GPU
        each), and in a
        typical tie that is the jobs that lose nothing. The fewest of them that
        cover each excess, biggest first, and the lightest that many, bound the
        victims and their weight far more tightly than all the subtree's jobs do.
        Pools of over ``_TIE_POOL_AT_MOST`` candidates keep the looser bound.
        ``needs``: per violation, the GPUs new victims must free (``_repair_needs``).
        """
        victims_bound, weight_bound = 0, 0.0
        for violation, need in zip(found, needs, strict=True):
            if need <= 0:
                continue  # no new victim needed here: 0 victims, 0 weight
            ranks = self.subtree_ranks.get(violation.queue, ())
            rates = self.subtree_rates.get(violation.queue, ())
            at = bisect.bisect_left(ranks, first)
            end = bisect.bisect_right(rates, budget, lo=at)
            if end - at > _TIE_POOL_AT_MOST:
                return victims_bound, weight_bound
            biggest, lightest = self._tie_pool(violation.queue, at, end)
            if need > biggest[-1]:
                return None
            k = bisect.bisect_left(biggest, need)
            if k > victims_bound:
                victims_bound, weight_bound = k, lightest[k]
            elif k == victims_bound:
                weight_bound = max(weight_bound, lightest[k])
        return victims_bound, weight_bound

    def _tie_pool(self, queue: str, at: int, end: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Prefix sums of the GPUs (biggest first) and W_eff (lightest first) of ``queue``'s
        subtree candidates from position ``at`` to ``end``."""
        key = (queue, at, end)
        pool = self.tie_pools.get(key)
        if pool is None:
            cands = [
                self.s.candidates[self.repair_order[r]] for r in self.subtree_ranks[queue][at:end]
            ]
            biggest = sorted((c.gpus for c in cands), reverse=True)
            lightest = sorted(c.w_eff for c in cands)
            pool = (
                tuple(itertools.accumulate(biggest, initial=0)),
                tuple(itertools.accumulate(lightest, initial=0.0)),
            )
            self.tie_pools[key] = pool
        return pool

    def _repair_options(self, cand: CandidateFacts, taken: frozenset[int]) -> list[Changes]:
        if is_whole(cand, taken):
            return []
        whole = frozenset(range(len(cand.pods)))
        options: list[Changes] = [{cand.index: whole}]
        seen_sizes: set[int] = set()
        for p, pod in enumerate(cand.pods):
            if p in taken or pod.gpus in seen_sizes:
                continue
            seen_sizes.add(pod.gpus)
            more = close_gang(cand, taken | {p})
            if more != whole and keeps_gang(cand, more):
                options.append({cand.index: more})
        return options

    # -- state ---------------------------------------------------------------

    def _free(self, state: State, node: str) -> int:
        return state.free.get(node, self.s.node_free[node])

    def _delta(self, state: State, changes: Changes) -> DeltaCost:
        protected, lost, victims, weight = 0, 0.0, 0, 0.0
        for c, new in changes.items():
            cand = self.s.candidates[c]
            old = state.evicted.get(c, frozenset())
            lost += sum(cand.pods[p].gpus for p in new - old) * cand.lost_per_gpu_s
            if not old:
                victims += 1
                weight += cand.w_eff
                protected += c in self.protected
        return (protected, lost, victims, weight)

    def _names(self, changes: Changes) -> tuple[str, ...]:
        return tuple(
            sorted(self.s.candidates[c].pods[p].name for c, pods in changes.items() for p in pods)
        )

    def _evict(self, state: State, changes: Changes, delta: DeltaCost | None = None) -> State:
        """The state after ``changes``; ``delta``: their ``_delta`` on ``state``, if known."""
        evicted = dict(state.evicted)
        free = dict(state.free)
        by_queue = dict(state.evicted_by_queue)
        protected, lost, victims, weight = (
            delta if delta is not None else self._delta(state, changes)
        )
        nodes: set[str] = set()
        for c, new in changes.items():
            cand = self.s.candidates[c]
            for p in new - evicted.get(c, frozenset()):
                pod = cand.pods[p]
                free[pod.node] = free.get(pod.node, self.s.node_free[pod.node]) + pod.gpus
                by_queue[cand.queue] = by_queue.get(cand.queue, 0) + pod.gpus
                nodes.add(pod.node)
            evicted[c] = new
        left = dict(state.left)
        for node in nodes:
            left[node] = self._offer(evicted, node)
        reclaimed, partial = state.reclaimed, state.partial
        for c, new in changes.items():
            cand = self.s.candidates[c]
            if not cand.same_queue and cand.queue not in reclaimed:
                reclaimed = reclaimed | {cand.queue}
            if len(new) < len(cand.pods):
                partial = partial | {c}
            elif c in partial:
                partial = partial - {c}
        # Every field named: ``dataclasses.replace`` walks the fields for the ones not
        # given, a tenth of a search step.
        return State(
            evicted=evicted,
            free=free,
            placement=state.placement,
            evicted_by_queue=by_queue,
            protected=state.protected + protected,
            lost=state.lost + lost,
            victims=state.victims + victims,
            weight=state.weight + weight,
            last_node=state.last_node,
            repair_from=state.repair_from,
            reclaimed=reclaimed,
            partial=partial,
            left=left,
        )

    def _repair_floor(
        self, state: State, changes: Changes, delta: DeltaCost
    ) -> tuple[float, int] | None:
        """What repairing the queue rules after ``changes`` must at least cost, or None.

        None when a rule is broken for good (a victim's queue below its
        guarantee), the subtree cannot cover the excess, or the plan would
        already lose to the best one. Works from the changes alone, without
        building the child state.
        """
        by_queue = dict(state.evicted_by_queue)
        reclaimed = state.reclaimed
        for c, new in changes.items():
            cand = self.s.candidates[c]
            old = state.evicted.get(c, frozenset())
            by_queue[cand.queue] = by_queue.get(cand.queue, 0) + sum(
                cand.pods[p].gpus for p in new - old
            )
            if not cand.same_queue:
                reclaimed = reclaimed | {cand.queue}
        found = violations(self.s, by_queue, reclaimed)
        if not found:
            floor: tuple[float, int] = (0.0, 0)
        elif any(not v.repairable for v in found):
            return None
        else:
            # The victims that keep some pods after ``changes``, for the repair's bound.
            partial = {c: state.evicted[c] for c in state.partial}
            for c, new in changes.items():
                if len(new) < len(self.s.candidates[c].pods):
                    partial[c] = new
                else:
                    partial.pop(c, None)
            floor = self._repair_bound(found, state.repair_from, self._repair_needs(found, partial))
        if self._beyond_best(state, delta[0], delta[1] + floor[0], delta[2] + floor[1]):
            return None
        return floor

    def _dominated(self, state: State) -> bool:
        """The branch cannot beat the best plan.

        Either its partial cost is already higher, or it already evicts
        everything the best plan evicts: every leaf below is then that plan
        or reduces to a minimal plan reached elsewhere in the search.
        """
        if self.best is None:
            return False
        evicted, best_evicted = state.evicted, self.best.evicted
        # Evicting everything the best evicts needs at least as many victims: most
        # states have fewer, and the walk over the best's victims is skipped.
        if len(evicted) >= len(best_evicted) and all(
            pods <= evicted.get(c, frozenset()) for c, pods in best_evicted.items()
        ):
            return True
        best = self.best.cost
        if state.protected != best.protected:
            return state.protected > best.protected
        slack = 1e-9 * max(1.0, abs(best.lost_gpu_seconds))
        if state.lost > best.lost_gpu_seconds + slack:
            return True
        if state.lost < best.lost_gpu_seconds - slack:
            return False
        if state.victims != best.victim_jobs:
            return state.victims > best.victim_jobs
        # Same victims count: more victims can only follow, so a higher W_eff sum is final.
        return state.weight > best.victim_weight + 1e-9 * max(1.0, abs(best.victim_weight))

    # -- leaves --------------------------------------------------------------

    def _leaf(self, state: State) -> None:
        """Reduce a feasible plan to a minimal one (0001 §9), then keep it if it is the best.

        Victims are spared in name order, each as far as it can be, in passes
        until none can; the accounting is updated as pods are spared rather
        than recomputed for every trial.
        """
        plan = _LeafPlan.of(self.s, state)
        changed = True
        while changed:
            changed = False
            for c in sorted(plan.evicted, key=lambda c: self.s.candidates[c].name):
                smaller_plan = self._spare(plan, c)
                if smaller_plan is not None:
                    plan, changed = smaller_plan, True
            changed = changed and not self.budget.exhausted
        cost = cost_of(self.s, plan.evicted, self.protected)
        if self.best is None or cost < self.best.cost:
            self.best = Found(cost, dict(plan.evicted), self._in_node_order(plan.placement))

    def _in_node_order(self, placement: Mapping[str, str]) -> dict[str, str]:
        """``placement`` with each run of identical pods on its nodes in node order.

        Identical pods are interchangeable, so this is the same plan; the
        search takes their nodes in its own order (``_SizeTable.rank``), and
        the plan states them the one way a reader (and a replay) expects.
        """
        out = dict(placement)
        pods = self.s.to_place
        for _, run in itertools.groupby(pods, key=lambda pod: pod.gpus):
            names = [pod.name for pod in run if pod.name in out]
            nodes = sorted((out[name] for name in names), key=self.node_index.__getitem__)
            out.update(zip(names, nodes, strict=True))
        return out

    def _spare(self, plan: _LeafPlan, c: int) -> _LeafPlan | None:
        """``plan`` with victim ``c`` spared as far as it stays feasible, or None."""
        if c not in plan.evicted:
            return None
        for smaller in reprieves(self.s.candidates[c], plan.evicted[c]):
            if not self.budget.tick():
                return None
            trial = plan.spare(self.s, c, smaller)
            if violations(self.s, trial.by_queue, trial.reclaimed):
                continue
            fits = pack(self.s, self.s.to_place, trial.freed, self.budget.tick, trial.placement)
            if fits is not None:
                return replace(trial, placement=fits)
        return None


@dataclass(frozen=True, slots=True)
class _LeafPlan:
    """A complete plan and its accounting, for trying smaller versions of it."""

    evicted: Mapping[int, frozenset[int]]
    placement: Mapping[str, str]
    by_queue: Mapping[str, int]
    freed: Mapping[str, int]
    reclaimed: frozenset[str]

    @classmethod
    def of(cls, session: PlanningSession, state: State) -> _LeafPlan:
        freed: dict[str, int] = {}
        for c, pods in state.evicted.items():
            cand = session.candidates[c]
            for p in pods:
                node = cand.pods[p].node
                freed[node] = freed.get(node, 0) + cand.pods[p].gpus
        return cls(
            evicted={c: pods for c, pods in state.evicted.items() if pods},
            placement=dict(state.placement),
            by_queue=dict(state.evicted_by_queue),
            freed=freed,
            reclaimed=state.reclaimed,
        )

    def spare(self, session: PlanningSession, c: int, smaller: frozenset[int]) -> _LeafPlan:
        """This plan with candidate ``c`` evicting only ``smaller``."""
        cand = session.candidates[c]
        evicted = dict(self.evicted)
        spared = evicted[c] - smaller
        if smaller:
            evicted[c] = smaller
        else:
            del evicted[c]
        by_queue = dict(self.by_queue)
        freed = dict(self.freed)
        for p in spared:
            pod = cand.pods[p]
            by_queue[cand.queue] -= pod.gpus
            freed[pod.node] -= pod.gpus
        reclaimed = self.reclaimed
        if not smaller and not cand.same_queue:
            still = any(
                session.candidates[o].queue == cand.queue and not session.candidates[o].same_queue
                for o in evicted
            )
            if not still:
                reclaimed = reclaimed - {cand.queue}
        return replace(self, evicted=evicted, by_queue=by_queue, freed=freed, reclaimed=reclaimed)
