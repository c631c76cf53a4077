"""The knapsack every per-node bound is built on: the cheapest cover of each amount of GPUs.

``knapsack_cover`` is held to a brute force over every choice of at most one
option per group, on small random nodes.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyield.agents.planner.knapsack import further_slots, knapsack_cover
from planner.strategies import examples

Option = tuple[int, float]

options = st.lists(
    st.tuples(st.integers(0, 8), st.sampled_from([0.0, 1.5, 3.0, 3600.0, 7200.0, 28_800.5])),
    min_size=1,
    max_size=3,
)


def cheapest_cover(groups: list[list[Option]], x: int) -> float:
    """Every choice of one option or none per group; the least charge freeing at least ``x``."""
    best = math.inf
    for choice in itertools.product(*[[None, *group] for group in groups]):
        taken = [option for option in choice if option is not None]
        if sum(freed for freed, _ in taken) >= x:
            best = min(best, sum(charge for _, charge in taken))
    return best


@settings(max_examples=examples(300), deadline=None)
@given(groups=st.lists(options, max_size=4), need=st.integers(0, 12))
def test_each_amount_costs_the_cheapest_choice_of_one_option_per_group(
    groups: list[list[Option]], need: int
) -> None:
    cover = knapsack_cover(groups, need)
    assert cover == [cheapest_cover(groups, x) for x in range(need + 1)]


def test_an_option_larger_than_the_need_covers_it_at_its_own_charge() -> None:
    assert knapsack_cover([[(8, 5.0)], [(2, 1.0)]], 4) == [0.0, 1.0, 1.0, 5.0, 5.0]


def test_an_amount_no_choice_frees_costs_infinity() -> None:
    assert knapsack_cover([[(2, 1.0)]], 3) == [0.0, 1.0, 1.0, math.inf]


def test_further_slots_count_what_freeing_adds_up_to_the_nodes_capacity() -> None:
    assert further_slots(8, 2, 6, 4) == 2  # 2 free -> 8: two 4-GPU slots where none was
    assert further_slots(8, 0, 4, 8) == 0  # half a node freed: no whole-node slot
    assert further_slots(8, 4, 16, 4) == 1  # never past the node's capacity
