"""A search state carries what a step does not change, and the search's shortcuts give what the
long way gives.

``_evict`` and the placement step build each child ``State`` with every field
named (``dataclasses.replace`` was a tenth of a step); a field one of them
forgot would be reset to its default on every child. ``_evict`` takes the
changes' delta from ``_children``, which computed it to rank the child, and
``_offer`` keeps what a node offers per what is evicted of its candidates.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings

from gpuyield.agents.planner.search import Search, State, _Offer
from planner.searches import every_search
from planner.strategies import Case, any_cases, examples, seeded_case

CHANGED_BY_EVICTING = {
    "evicted",
    "free",
    "evicted_by_queue",
    "protected",
    "lost",
    "victims",
    "weight",
    "reclaimed",
    "partial",
    "left",
}
CARRIED_BY_EVICTING = {"placement", "last_node", "repair_from"}


def deep_state(search: Search) -> State:
    """A state deep in some branch: every field away from its default."""
    return State(
        evicted={},
        free={},
        placement=(("pod-a", search.s.node_names[0]),),
        evicted_by_queue={},
        protected=1,
        lost=1234.5,
        victims=2,
        weight=17.0,
        last_node=3,
        repair_from=4,
        reclaimed=frozenset({"elsewhere"}),
        partial=frozenset(),
        left={},
    )


def test_every_field_of_a_state_is_either_changed_or_carried_by_evicting() -> None:
    names = {f.name for f in dataclasses.fields(State)}
    assert names == CHANGED_BY_EVICTING | CARRIED_BY_EVICTING, (
        "a new State field: carry it in Search._evict and Search._place, then list it here"
    )


def assert_evicting_carries_and_counts(case: Case) -> None:
    search = every_search(case)
    state = deep_state(search)
    for c, cand in enumerate(search.s.candidates):
        changes = {c: frozenset(range(len(cand.pods)))}
        child = search._evict(state, changes)
        for name in CARRIED_BY_EVICTING:
            assert getattr(child, name) == getattr(state, name), name
        delta = search._delta(state, changes)
        assert child.lost == state.lost + delta[1]
        assert child.victims == state.victims + delta[2]
        assert search._evict(state, changes, delta) == child  # the delta handed in


@settings(max_examples=examples(100), deadline=None)
@given(any_cases())
def test_evicting_carries_what_it_does_not_change(case: Case) -> None:
    assert_evicting_carries_and_counts(case)


def test_evicting_carries_what_it_does_not_change_on_seeded_clusters() -> None:
    for seed in range(40):
        assert_evicting_carries_and_counts(seeded_case(seed))


def assert_kept_offers_equal_fresh_ones(case: Case) -> None:
    search = every_search(case)
    evicted_sets = [{}] + [
        {c: frozenset(range(len(cand.pods)))} for c, cand in enumerate(search.s.candidates)
    ]
    for evicted in evicted_sets * 2:  # the second round reads what the first kept
        for node in search.s.node_names:
            fresh: _Offer = search._compute_offer(evicted, search.groups.get(node, ()))
            assert search._offer(evicted, node) == fresh, (node, evicted)


@settings(max_examples=examples(100), deadline=None)
@given(any_cases())
def test_a_kept_offer_is_what_the_node_offers_with_those_victims_gone(case: Case) -> None:
    assert_kept_offers_equal_fresh_ones(case)
