"""The search's bounds never overestimate: a bound above a real cost would prune the optimum.

``Search._slot_costs`` gives, per node and pod size, a lower bound on the lost
work of each further slot; ``_remaining_bound`` sums the cheapest of them over
the nodes. A node that breaks a gang may carry more than its own pods' share
of that job (``_closure_charge``), as long as the nodes any plan can use
never carry more than the whole job. Checked here against every subset of a
node's candidate pods and of a job's nodes, so a mistake shows where it
happens rather than as a rare suboptimal plan in the optimality tests.
"""

from __future__ import annotations

import itertools
import math

from builders import HOUR, NOW, a_job, a_node, a_pod, a_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyield.agents.planner.search import (
    _WHOLES_AT_MOST,
    Budget,
    FloorJob,
    Search,
    State,
    _common_weight,
    _floor_by_units,
    _floor_knapsack,
)
from gpuyield.agents.planner.session import PlanningSession
from gpuyield.schemas import JobState
from planner.reference import reference_plan
from planner.searches import every_search, search_of
from planner.strategies import Case, any_cases, examples, seeded_case
from planner.two_node_gangs import a_and_b_and_a_pinned_half_c


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


def assert_slot_costs_are_lower_bounds(case: Case) -> None:
    search = every_search(case)
    s = search.s
    for gpus in {p.gpus for p in s.to_place if p.gpus}:
        for spread in sorted({1, 2, 3, len(s.node_names)}):
            for node in s.node_names:
                free = s.node_free[node]
                marginals = search._slot_costs(node, gpus, spread)
                assert marginals == sorted(marginals), "slot costs must not decrease"
                for j in range(1, len(marginals) + 1):
                    need = (free // gpus + j) * gpus - free
                    real = least_charge(search, node, need, spread)
                    assert math.fsum(marginals[:j]) <= real + 1e-6, (node, gpus, spread, j)
                beyond = (free // gpus + len(marginals) + 1) * gpus - free
                if beyond <= s.node_gpus[node]:
                    assert least_share(search, node, beyond) == math.inf, "a slot was left out"


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


def least_charge(search: Search, node: str, need: int, spread: int) -> float:
    """The least charge on ``node`` of freeing ``need`` GPUs there, gangs broken at their part."""
    s = search.s
    pods = [(g.candidate, g.gpus) for g in search.groups.get(node, ()) for _ in g.pods]
    best = math.inf
    for n in range(len(pods) + 1):
        for chosen in itertools.combinations(pods, n):
            if sum(size for _, size in chosen) < need:
                continue
            charge = 0.0
            for c in {c for c, _ in chosen}:
                cand = s.candidates[c]
                taken = [size for d, size in chosen if d == c]
                if len(taken) > len(cand.pods) - cand.min_running:  # the gang breaks
                    charge += search._closure_charge(c, node, spread)
                else:
                    charge += sum(taken) * cand.lost_per_gpu_s
            best = min(best, charge)
    return best


def assert_closure_charges_never_exceed_the_job(case: Case) -> None:
    search = every_search(case)
    s = search.s
    for c, cand in enumerate(s.candidates):
        nodes = sorted({pod.node for pod in cand.pods})
        whole = cand.gpus * cand.lost_per_gpu_s
        for spread in range(1, len(nodes) + 2):
            for n in range(1, min(spread, len(nodes)) + 1):
                for chosen in itertools.combinations(nodes, n):
                    charged = math.fsum(search._closure_charge(c, node, spread) for node in chosen)
                    assert charged <= whole + 1e-6, (cand.name, spread, chosen)
            for node in nodes:
                share = sum(p.gpus for p in cand.pods if p.node == node) * cand.lost_per_gpu_s
                assert search._closure_charge(c, node, spread) >= share * (1 - 1e-6)


def least_loss(search: Search, node: str, need: int) -> float:
    """The least lost work of freeing ``need`` GPUs on ``node``, a broken gang going whole."""
    s = search.s
    pods = [(g.candidate, g.gpus) for g in search.groups.get(node, ()) for _ in g.pods]
    best = math.inf
    for n in range(len(pods) + 1):
        for chosen in itertools.combinations(pods, n):
            if sum(size for _, size in chosen) < need:
                continue
            loss = 0.0
            for c in {c for c, _ in chosen}:
                cand = s.candidates[c]
                taken = [size for d, size in chosen if d == c]
                if len(taken) > len(cand.pods) - cand.min_running:
                    loss += cand.gpus * cand.lost_per_gpu_s
                else:
                    loss += sum(taken) * cand.lost_per_gpu_s
            best = min(best, loss)
    return best


def assert_floors_are_lower_bounds(case: Case) -> None:
    search = every_search(case)
    s = search.s
    for node in s.node_names:
        held = sum(g.gpus * len(g.pods) for g in search.groups.get(node, ()))
        for need in range(1, held + 2):
            floor, real = search._floor_of(node, need), least_loss(search, node, need)
            assert floor <= real + 1e-6, (node, need)
            if need >= held:  # every pod there goes: nothing is relaxed
                assert floor == real or math.isclose(floor, real), (node, need)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.integers(1, 64), min_size=1, max_size=12),
    st.integers(1, 12),
)
def test_the_common_weight_keeps_the_heaviest_nodes_within_the_whole_job(
    held: list[int], spread: int
) -> None:
    shares = sorted((h / sum(held) for h in held), reverse=True)
    m = min(spread, len(shares))
    u = _common_weight(shares, m)
    weights = sorted((max(share, u) for share in shares), reverse=True)
    assert math.fsum(weights[:m]) <= 1.0 + 1e-12
    bigger = sorted((max(share, u * 1.001 + 1e-9) for share in shares), reverse=True)
    assert math.fsum(bigger[:m]) > 1.0, "the weight could have been larger"


@settings(max_examples=examples(150), deadline=None)
@given(any_cases())
def test_the_nodes_a_plan_can_use_never_carry_more_than_the_whole_job(case: Case) -> None:
    assert_closure_charges_never_exceed_the_job(case)


def test_the_nodes_a_plan_can_use_never_carry_more_than_the_whole_job_on_seeded_clusters() -> None:
    for seed in range(100):
        assert_closure_charges_never_exceed_the_job(seeded_case(seed))


@settings(max_examples=examples(150), deadline=None)
@given(any_cases())
def test_a_node_never_frees_room_for_less_than_its_floor(case: Case) -> None:
    assert_floors_are_lower_bounds(case)


@st.composite
def node_jobs(draw: st.DrawFn, kinds: tuple[str, ...] = ("one by one", "whole")) -> FloorJob:
    """A job on a node as ``_floor`` costs it: its GPUs there go one by one, only whole
    (its gang breaks), or a surplus of them one by one and the rest only with the whole."""
    kind = draw(st.sampled_from(kinds))
    held = draw(st.integers(1, 8))
    rate = draw(st.sampled_from([0.0, 1.0, 37.5, 600.0, 3601.25]))
    elsewhere = draw(st.integers(0, 16))  # its GPUs on other nodes
    if kind == "one by one":
        alone = held
    elif kind == "whole":
        alone = 0
    else:
        alone = draw(st.integers(1, max(1, held - 1)))
    return (alone, held, rate, (held + elsewhere) * rate)


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(node_jobs(), max_size=_WHOLES_AT_MOST + 2), st.integers(1, 8))
def test_the_floor_without_a_knapsack_is_the_knapsacks_answer(
    jobs: list[FloorJob], need: int
) -> None:
    found = _floor_by_units(jobs, need)
    if sum(1 for alone, _, _, _ in jobs if alone == 0) > _WHOLES_AT_MOST:
        assert found is None, "too many jobs that go whole: the knapsack answers"
        return
    assert found is not None
    expected = _floor_knapsack(jobs, need)
    assert found == expected or math.isclose(found, expected, rel_tol=1e-12), (found, expected)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(node_jobs(("surplus",)), min_size=1, max_size=3), st.integers(1, 8))
def test_a_job_that_gives_part_of_its_gpus_leaves_the_floor_to_the_knapsack(
    jobs: list[FloorJob], need: int
) -> None:
    if all(alone in (0, held) for alone, held, _, _ in jobs):
        return  # single-GPU jobs: no part to give
    assert _floor_by_units(jobs, need) is None


def test_a_pod_without_gpus_does_not_make_a_job_break_its_gang_for_the_floor() -> None:
    """A job of three pods that needs two running: 4 GPUs and a pod with none on node n,
    4 GPUs on m. Freeing n's 4 GPUs evicts its 4-GPU pod alone (two keep running), an hour
    of 4 GPUs; the floor once charged the whole job there, 8 GPU-hours, above the room
    that costs 4, and so could cut the plan that takes it."""
    elastic = (
        a_job("elastic")
        .with_pods(
            a_pod("elastic-0", 4, "n"), a_pod("elastic-1", 0, "n"), a_pod("elastic-2", 4, "m")
        )
        .min_available(2)
        .started(NOW - HOUR)
        .submitted(NOW - 2 * HOUR)
    )
    preemptor = a_job("pre").priority(5000).with_pods(a_pod("pre-0", 4)).in_state(JobState.PENDING)
    snapshot = a_snapshot(
        nodes=[a_node("n", gpus=4), a_node("m", gpus=4)], jobs=[elastic, preemptor]
    )
    session = PlanningSession.open(snapshot, "pre")
    search = Search(session, range(len(session.candidates)), frozenset(), Budget(1_000))
    root = State(evicted={}, free={}, placement=(), evicted_by_queue={})
    cheapest = min(search._delta(root, changes)[1] for changes, _ in search._room(root, "n", 4))
    assert cheapest == 4 * HOUR
    assert search._floor_of("n", 4) == cheapest


def test_a_node_its_candidates_cannot_empty_is_never_costed_for_the_pods_still_to_place() -> None:
    """``_slot_costs`` finds no slot there, so the remaining pods' bound never walks it."""
    search = search_of(Case(a_and_b_and_a_pinned_half_c(), "pre"), 10_000)
    assert sorted(node for _, _, node in search.tables[8].extra.weak) == ["a", "b"]
    assert search._slot_costs("c", 8, 2) == []


def test_a_floor_is_infinite_exactly_where_the_candidates_hold_too_few_gpus() -> None:
    search = search_of(Case(a_and_b_and_a_pinned_half_c(), "pre"), 10_000)
    assert search.node_held["c"] == 4  # "half"; "pinned" may not go
    assert search._floor("c", 5) == math.inf
    assert search._floor("c", 4) == 4 * HOUR  # all of "half", an hour since its start
