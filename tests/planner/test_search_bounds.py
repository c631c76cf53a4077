"""The search's bounds never overestimate: a bound above a real cost would prune the optimum.

``Search._slot_costs`` gives, per node and pod size, a lower bound on the lost
work of each further slot; ``_remaining_bound`` sums the cheapest of them over
the nodes. Checked here against every subset of a node's candidate pods, so a
mistake shows on the node where it happens rather than as a rare suboptimal
plan in the optimality tests.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings

from gpuyield.agents.planner.search import Budget, Search, State
from gpuyield.agents.planner.session import PlanningSession
from planner.reference import reference_plan
from planner.strategies import Case, any_cases, examples, seeded_case


def least_share(search: Search, node: str, need: int) -> float:
    """The least lost work, counted on ``node``'s own pods, of freeing ``need`` GPUs there."""
    pods = [
        (g.gpus, g.gpus * search.s.candidates[g.candidate].lost_per_gpu_s)
        for g in search.groups.get(node, ())
        for _ in g.pods
    ]
    best = math.inf
    for n in range(len(pods) + 1):
        for chosen in itertools.combinations(pods, n):
            if sum(size for size, _ in chosen) >= need:
                best = min(best, sum(cost for _, cost in chosen))
    return best


def every_search(case: Case) -> Search:
    session = PlanningSession.open(case.snapshot, case.preemptor)
    return Search(session, range(len(session.candidates)), frozenset(), Budget(10_000))


def assert_slot_costs_are_lower_bounds(case: Case) -> None:
    search = every_search(case)
    s = search.s
    for gpus in {p.gpus for p in s.to_place if p.gpus}:
        for node in s.node_names:
            free = s.node_free[node]
            marginals = search._slot_costs(node, gpus)
            assert marginals == sorted(marginals), "slot costs must not decrease"
            for j in range(1, len(marginals) + 1):
                need = (free // gpus + j) * gpus - free
                real = least_share(search, node, need)
                assert math.fsum(marginals[:j]) <= real + 1e-6, (node, gpus, j)
            beyond = (free // gpus + len(marginals) + 1) * gpus - free
            if beyond <= s.node_gpus[node]:
                assert least_share(search, node, beyond) == math.inf, "a freeable slot was left out"


def assert_root_bound_is_below_the_optimal_loss(case: Case) -> None:
    """Below the brute-force optimum, which evicts from fewer candidates than the search here."""
    want = reference_plan(case.snapshot, case.preemptor)
    if not want.feasible:
        return
    root = State(evicted={}, free={}, placement=(), evicted_by_queue={})
    assert every_search(case)._remaining_bound(root, 0) <= want.lost_gpu_seconds + 1e-6


@settings(max_examples=examples(150), deadline=None)
@given(any_cases())
def test_each_further_slot_costs_at_least_its_bound(case: Case) -> None:
    assert_slot_costs_are_lower_bounds(case)


def test_each_further_slot_costs_at_least_its_bound_on_seeded_clusters() -> None:
    for seed in range(100):
        assert_slot_costs_are_lower_bounds(seeded_case(seed))


@settings(max_examples=examples(150), deadline=None)
@given(any_cases())
def test_the_bound_at_the_root_never_exceeds_the_optimal_loss(case: Case) -> None:
    assert_root_bound_is_below_the_optimal_loss(case)
