"""Stock Volcano's node order in the simulator: Python's shuffle, drawn the same way."""

from __future__ import annotations

import random

import pytest

from gpuyield.agents.simulator.volcano_native import shuffled_range


@pytest.mark.parametrize("nodes", [0, 1, 2, 3, 8, 32, 64, 1000])
def test_the_node_order_is_what_random_shuffle_gives(nodes: int) -> None:
    ours, python = random.Random("volcano-native:0"), random.Random("volcano-native:0")
    for _ in range(200):
        expected = list(range(nodes))
        python.shuffle(expected)
        assert shuffled_range(ours, nodes) == expected


def test_the_random_stream_goes_on_where_random_shuffle_leaves_it() -> None:
    ours, python = random.Random(7), random.Random(7)
    for nodes in (32, 5, 64, 1, 32):
        shuffled_range(ours, nodes)
        python.shuffle(list(range(nodes)))
    assert ours.getstate() == python.getstate()
