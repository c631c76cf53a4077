"""The pair bound: the last two identical pods pay for any two nodes together.

Two pods that each need a node of their own free room on two distinct
nodes; what the two evictions share is paid once. The bound
(``pair_bound``) stays below the cheapest completion of every state it is
asked at, and the search with it returns the plan the search without it
returns, in no more steps.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Set

import pytest
from builders import HOUR, NOW, a_job, a_node, a_pod, a_snapshot

from gpuyield.agents.planner import pair_bound as pair_bound_module
from gpuyield.agents.planner import search as search_module
from gpuyield.agents.planner.pair_bound import Changed, PairTable, pair_floor
from gpuyield.agents.planner.search import Budget, Search, State
from gpuyield.agents.planner.session import PlanningSession
from gpuyield.schemas import Snapshot
from planner.searches import cheapest_below, search_of, with_and_without
from planner.strategies import packed_case
from planner.two_node_gangs import gang_across_a_and_b, two_pod_preemptor

NO_NODE: frozenset[str] = frozenset()


def three_nodes(preemptor_gpus: int = 8) -> Snapshot:
    """Nodes a, b and c of 8 GPUs: a 16-GPU gang across a and b, an hour without a
    checkpoint; c full with one 8-GPU job two hours without one. The preemptor wants
    two nodes' worth."""
    single = a_job("single").with_pods(a_pod("single-0", 8, "c")).started(NOW - 2 * HOUR)
    return a_snapshot(
        nodes=[a_node("a"), a_node("b"), a_node("c")],
        jobs=[gang_across_a_and_b(), single, two_pod_preemptor(preemptor_gpus)],
    )


def search_for(snapshot: Snapshot) -> Search:
    session = PlanningSession.open(snapshot, "pre")
    return Search(session, range(len(session.candidates)), frozenset(), Budget(10_000))


def test_two_nodes_that_share_a_gang_cost_it_once() -> None:
    assert pair_floor(16.0, 16.0, 16.0) == 16.0


def test_a_pair_costs_at_least_its_dearer_node_whatever_they_share() -> None:
    assert pair_floor(5.0, 9.0, 12.0) == 9.0


def test_two_nodes_that_share_nothing_cost_both_floors() -> None:
    assert pair_floor(5.0, 9.0, 0.0) == 14.0


def test_the_cheapest_pair_is_the_two_nodes_of_one_gang_when_that_beats_two_floors() -> None:
    search = search_for(three_nodes())
    table = search._pair_table(8)
    assert table is not None
    gang = 16 * HOUR  # 16 GPUs an hour without a checkpoint
    assert table.floor == {"a": gang, "b": gang, "c": 16 * HOUR}
    assert table.shared == ((gang, "a", "b"),)
    assert table.cheapest(0, NO_NODE, []) == gang


def test_nodes_before_the_first_rank_and_changed_ones_take_no_part() -> None:
    table = PairTable.build(
        {"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2), "d": (4.0, 3)}, [(2.5, ["a", "b"])]
    )
    assert table.cheapest(0, NO_NODE, []) == 2.0  # a and b share the 2.5 of their job
    assert table.cheapest(1, NO_NODE, []) == 5.0  # b and c
    assert table.cheapest(0, {"a"}, []) == 5.0  # a changed, and not asked
    assert table.cheapest(0, {"a"}, [Changed("a", 0, 0.5, {"b": 2.5})]) == 2.0


def test_a_changed_node_pairs_with_the_cheapest_untouched_floor() -> None:
    table = PairTable.build({"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2)}, [])
    assert table.cheapest(0, {"c"}, [Changed("c", 2, 0.25, {})]) == 1.25


def test_a_scan_that_stops_early_bounds_the_rest_by_the_last_key_it_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pair_bound_module, "_SCAN_AT_MOST", 1)
    table = PairTable.build({"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2)}, [])
    assert table.cheapest(1, NO_NODE, []) == 4.0  # b and c cost 5: the bound is lower
    assert table.cheapest(0, NO_NODE, []) == 3.0  # read a, then stopped at b: 1 + 2


def test_after_a_node_the_nodes_it_shares_a_job_with_cost_what_they_add() -> None:
    table = PairTable.build(
        {"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2), "d": (4.0, 3)}, [(1.5, ["a", "b"])]
    )
    # a, then b (its 1.5 shared with a already gone: 0.5 more) and c: 1 + 0.5 + 3.
    assert table.cheapest_after("a", NO_NODE, []) == 4.5
    assert table.cheapest_after("b", NO_NODE, []) == 2.0 + 3.0 + 4.0  # a lies before b


def test_after_a_node_a_changed_node_costs_less_what_it_shares_with_it() -> None:
    table = PairTable.build({"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2)}, [])
    changed = [Changed("d", 3, 2.5, {"a": 2.0})]
    assert table.cheapest_after("a", {"d"}, changed) == 1.0 + 0.5 + 2.0


def test_three_nodes_that_share_nothing_cost_the_three_cheapest_floors() -> None:
    table = PairTable.build({"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2), "d": (4.0, 3)}, [])
    assert table.cheapest_triple(0, NO_NODE, []) == 6.0
    assert table.cheapest_triple(1, NO_NODE, []) == 9.0


def test_three_nodes_with_a_pair_that_shares_a_job_cost_that_pair_and_what_the_third_adds() -> None:
    table = PairTable.build(
        {"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2), "d": (4.0, 3), "e": (10.0, 4)},
        [(1.5, ["a", "b"]), (1.0, ["b", "c"])],
    )
    # a and b cost at least 2 together; c shares 1.0 with b, so adds at least 2; a node that
    # shares nothing adds at least the cheapest floor (1). The three together cost 3.5.
    assert table.cheapest_triple(0, NO_NODE, []) == 2.0 + 1.0
    # From b on: b and c cost 4, and a third adds at least the cheapest floor there (b's
    # own 2: the bound does not ask which node it is). b, c and d cost 8.
    assert table.cheapest_triple(1, NO_NODE, []) == 4.0 + 2.0


def test_three_nodes_with_a_changed_one_cost_its_bound_and_the_pair_after_it() -> None:
    table = PairTable.build({"a": (1.0, 0), "b": (2.0, 1), "c": (3.0, 2)}, [])
    changed = [Changed("d", 3, 0.5, {"a": 1.0})]
    # d (0.5), then a (1.0 shared with d: nothing more) and b (2.0).
    assert table.cheapest_triple(0, {"d"}, changed) == 0.5 + 0.0 + 2.0


def test_a_changed_node_pays_for_the_gang_its_pods_would_break() -> None:
    """A 4-pod job of 4 GPUs, two pods on a and two on b, that needs 3 running, has lost
    one pod on a: room for 8 GPUs on b breaks it, and its 3 remaining pods' work is lost,
    not only the 2 pods' there."""
    wide = (
        a_job("wide")
        .with_pods(*(a_pod(f"wide-{p}", 4, "ab"[p // 2]) for p in range(4)))
        .min_available(3)
        .started(NOW - HOUR)
        .submitted(NOW - 2 * HOUR)
    )
    search = search_for(
        a_snapshot(nodes=[a_node("a"), a_node("b")], jobs=[wide, two_pod_preemptor()])
    )
    job = search.s.candidates[0]
    on_a = next(p for p, pod in enumerate(job.pods) if pod.node == "a")
    state = search._evict(
        State(evicted={}, free={}, placement=(), evicted_by_queue={}),
        {job.index: frozenset({on_a})},
    )
    by_node = {c.node: c for c in search._changed(state, 8, 0)}
    assert by_node["b"].floor == 3 * 4 * HOUR
    assert by_node["b"].shares == {"a": 3 * 4 * HOUR}


def test_no_table_where_a_node_could_take_both_pods() -> None:
    assert search_for(three_nodes(preemptor_gpus=4))._pair_table(4) is None


def asked_bounds(search: Search) -> list[tuple[State, int, float]]:
    """Every pair bound ``search`` computes from now on: (state, pod, bound)."""
    asked: list[tuple[State, int, float]] = []
    bound = search._last_pair_bound

    def record(state: State, i: int) -> float | None:
        found = bound(state, i)
        if found is not None:
            asked.append((state, i, found))
        return found

    search._last_pair_bound = record  # type: ignore[method-assign]
    return asked


def asked_after(search: Search) -> list[tuple[State, int, str, int, float]]:
    """Every bound on a pod and the pods after it ``search`` computes from now on: (state,
    pod, its node, how many after it, bound)."""
    asked: list[tuple[State, int, str, int, float]] = []
    bound = search._pair_after

    def record(
        state: State,
        i: int,
        node: str,
        table: PairTable,
        skip: Set[str],
        changed: list[Changed],
        more: int,
    ) -> float:
        found = bound(state, i, node, table, skip, changed, more)
        asked.append((state, i, node, more, found))
        return found

    search._pair_after = record  # type: ignore[method-assign]
    return asked


def on_node(node: str) -> Callable[[str, int], bool]:
    return lambda name, _rank: name == node


def always_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound from the first step on, never given up."""
    monkeypatch.setattr(search_module, "_FIRST_AFTER", 0)
    monkeypatch.setattr(search_module, "_PAIR_TRIES", 10**9)


def test_inside_the_search_the_bound_never_exceeds_the_cheapest_completion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every state where the search asked the bound (two or three pods left), on 150 packed
    clusters, against the cheapest completion of that state (exhaustive, without it)."""
    always_asked(monkeypatch)
    checked = cut = 0
    for seed in range(150):
        search = search_of(packed_case(seed), 200_000)
        session, eligible, protected = search.s, list(search.eligible), search.protected
        asked = asked_bounds(search)
        search.run()
        for state, i, bound in asked:
            cheapest = cheapest_below(session, eligible, protected, state, i, lambda _n, _r: True)
            if cheapest is None:
                continue
            tolerance = 1e-6 * max(1.0, bound)
            assert bound <= cheapest - state.lost + tolerance, (seed, i, bound, cheapest)
            checked += 1
            cut += cheapest < math.inf and bound > 0
    assert checked > 100
    assert cut > checked // 4, "the bound should say something on most of them"


def test_a_pod_and_the_pods_after_it_never_cost_less_than_the_bound_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every node the search asked the bound for with two or three pods after (3-4
    identical pods), on 150 packed clusters, against the cheapest completion that puts
    the pod there."""
    always_asked(monkeypatch)
    checked = Counter[int]()
    for seed in range(150):
        search = search_of(packed_case(seed), 200_000)
        session, eligible, protected = search.s, list(search.eligible), search.protected
        asked = asked_after(search)
        search.run()
        for state, i, node, more, bound in asked:
            on_it = cheapest_below(session, eligible, protected, state, i, on_node(node))
            if on_it is None:
                continue
            assert bound <= on_it - state.lost + 1e-6 * max(1.0, bound), (seed, i, node)
            checked[more] += 1
    assert checked[2] > 100
    assert checked[3] > 20


def compare_with_and_without(monkeypatch: pytest.MonkeyPatch, seeds: int = 400) -> tuple[int, int]:
    """Plan each packed cluster with the bound (always asked) and without it."""

    def switch_off(off: pytest.MonkeyPatch) -> None:
        off.setattr(Search, "_pair_ready", lambda self, i: None)

    return with_and_without(monkeypatch, packed_case, seeds, switch_off)


def test_the_search_with_the_bound_returns_the_plan_it_returns_without_in_no_more_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """400 full clusters of 8-14 nodes whose preemptor has 2-4 identical pods, whole
    nodes on most of them."""
    compared, shorter = compare_with_and_without(monkeypatch)
    assert compared > 350
    assert shorter > 10, "the bound should cut on some of these clusters"


def test_the_bound_keeps_the_plan_when_its_scans_stop_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scans bound what they did not read by the last key (after 128 entries in a
    plan; 1 here, so that these small clusters reach it)."""
    monkeypatch.setattr(pair_bound_module, "_SCAN_AT_MOST", 1)
    compared, _ = compare_with_and_without(monkeypatch, seeds=200)
    assert compared > 150
