"""The live view's pacing: fresh on a small cluster, never most of a big cluster's worker."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuyield.agents.worker.view_pacing import ViewPacer

SMALL_CLUSTER_BUILD_S = 0.004  # 64 nodes
BIG_CLUSTER_BUILD_S = 0.4  # 10,000 nodes


def test_the_first_input_builds_the_view() -> None:
    assert ViewPacer().due(100.0, decided=False)


def test_without_a_decision_the_view_waits_its_interval() -> None:
    pacer = ViewPacer(every_s=0.5)
    pacer.built(100.0, SMALL_CLUSTER_BUILD_S)
    assert not pacer.due(100.3, decided=False)
    assert pacer.due(100.5, decided=False)


def test_on_a_small_cluster_a_decision_is_shown_at_once() -> None:
    pacer = ViewPacer(every_s=0.5)
    pacer.built(100.0, SMALL_CLUSTER_BUILD_S)
    assert pacer.due(100.05, decided=True)


def test_on_a_big_cluster_rebuilds_wait_ten_times_their_cost() -> None:
    pacer = ViewPacer(every_s=0.5, max_share=0.1)
    pacer.built(100.0, BIG_CLUSTER_BUILD_S)
    assert not pacer.due(100.5, decided=False)
    assert not pacer.due(103.9, decided=True)
    assert pacer.due(104.0, decided=False)


def test_a_decision_held_back_is_shown_by_the_next_input_once_due() -> None:
    pacer = ViewPacer(every_s=5.0, max_share=0.1)
    pacer.built(100.0, BIG_CLUSTER_BUILD_S)
    assert not pacer.due(101.0, decided=True)
    # 4 s later the cost bound is met; without the pending decision the 5 s interval would wait
    assert pacer.due(104.0, decided=False)
    pacer.built(104.0, BIG_CLUSTER_BUILD_S)
    assert not pacer.due(108.5, decided=False)


@given(
    costs=st.lists(st.floats(min_value=0.0, max_value=2.0), min_size=1, max_size=60),
    gaps=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=60),
    decisions=st.lists(st.booleans(), min_size=1, max_size=60),
)
def test_rebuilding_never_takes_more_than_its_share_of_the_time(
    costs: list[float], gaps: list[float], decisions: list[bool]
) -> None:
    pacer = ViewPacer(every_s=0.5, max_share=0.1)
    now, spent, first_at, builds = 0.0, 0.0, None, 0
    for i, gap in enumerate(gaps):
        now += gap
        if pacer.due(now, decided=decisions[i % len(decisions)]):
            cost = costs[builds % len(costs)]
            first_at = now if first_at is None else first_at
            spent += cost
            builds += 1
            pacer.built(now, cost)
            now += cost
    if first_at is not None:
        last_cost = costs[(builds - 1) % len(costs)]
        # Every build but the last was followed by ten times its cost before the next.
        assert spent - last_cost <= 0.1 * (now - first_at) + 1e-9
