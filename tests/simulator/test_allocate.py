"""The one model of Volcano's allocate step: gang, capability, best fit, reservations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuyield.agents.simulator.allocate import Holding, best_fit, place, usable

NODES = {"gpu-a": 8, "gpu-b": 4, "gpu-c": 2}


def test_a_pod_goes_to_the_node_it_fills_most_tightly() -> None:
    assert place(NODES, [2], min_count=1) == [(0, "gpu-c")]
    assert place(NODES, [4], min_count=1) == [(0, "gpu-b")]


def test_equals_are_broken_by_the_order_the_nodes_are_given() -> None:
    assert best_fit([("gpu-b", 8), ("gpu-a", 8)], 8) == "gpu-b"
    assert place([8, 8], [8], min_count=1) == [(0, 0)]


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    assert place(NODES, [8, 8], min_count=2) is None
    assert place({"gpu-a": 8, "gpu-b": 8}, [8, 8], min_count=2) == [(0, "gpu-a"), (1, "gpu-b")]


def test_an_elastic_job_starts_with_its_minimum_and_takes_what_else_fits() -> None:
    assert place(NODES, [4, 4, 4, 4], min_count=2) == [(0, "gpu-b"), (1, "gpu-a"), (2, "gpu-a")]


def test_the_queue_capability_caps_the_gang_and_its_growth() -> None:
    assert place(NODES, [4, 4], min_count=2, headroom=6) is None
    assert place(NODES, [4, 4], min_count=1, headroom=6) == [(0, "gpu-b")]


def test_held_gpus_are_not_for_other_jobs_but_the_rest_of_the_node_is() -> None:
    held = {"gpu-a": {"ft-llama": 4}}
    free = {"gpu-a": 8}
    assert place(free, [4], min_count=1, job="sweep", held=held) == [(0, "gpu-a")]
    assert place(free, [8], min_count=1, job="sweep", held=held) is None
    assert place(free, [8], min_count=1, job="ft-llama", held=held) == [(0, "gpu-a")]


def test_a_tainted_node_accepts_only_its_preemptors_pods() -> None:
    held = {"gpu-a": {"ft-llama": 4}}
    free = {"gpu-a": 8, "gpu-b": 4}
    # The taint is on the node: the 4 GPUs not held are closed to others too.
    assert place(free, [4], min_count=1, job="sweep", held=held, holding=Holding.NODE) == [
        (0, "gpu-b")
    ]
    assert place(free, [8], min_count=1, job="sweep", held=held, holding=Holding.NODE) is None
    assert place(free, [8], min_count=1, job="ft-llama", held=held, holding=Holding.NODE) == [
        (0, "gpu-a")
    ]


def test_two_preemptors_holding_one_node_share_it_and_keep_others_off() -> None:
    held = {"gpu-a": {"ft-llama": 4, "ft-mistral": 4}}
    for holding in Holding:
        assert usable("gpu-a", 8, "ft-llama", held, holding) == 4
        assert usable("gpu-a", 8, "ft-mistral", held, holding) == 4
    assert usable("gpu-a", 8, "sweep", held, Holding.NODE) == 0
    assert usable("gpu-a", 8, "sweep", held, Holding.GPUS) == 0


def test_a_pod_goes_to_its_nominated_node_and_falls_back_to_the_best_fit() -> None:
    free = {"gpu-a": 8, "gpu-b": 8}
    assert place(free, [8, 8], min_count=2, nominated={0: "gpu-b"}) == [(0, "gpu-b"), (1, "gpu-a")]
    assert place({"gpu-a": 8, "gpu-b": 0}, [8], min_count=1, nominated={0: "gpu-b"}) == [
        (0, "gpu-a")
    ]


free_gpus = st.dictionaries(st.sampled_from([f"gpu-{i}" for i in range(6)]), st.integers(0, 8))
holds = st.dictionaries(
    st.sampled_from([f"gpu-{i}" for i in range(6)]),
    st.dictionaries(st.sampled_from(["me", "ft-a", "ft-b"]), st.integers(1, 8), min_size=1),
)


@given(
    free=free_gpus,
    pods=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=6),
    min_count=st.integers(0, 6),
    headroom=st.one_of(st.none(), st.integers(0, 48)),
    held=holds,
    holding=st.sampled_from(list(Holding)),
)
def test_a_placement_never_overcommits_a_node_a_hold_or_the_queue(
    free: dict[str, int],
    pods: list[int],
    min_count: int,
    headroom: int | None,
    held: dict[str, dict[str, int]],
    holding: Holding,
) -> None:
    chosen = place(
        free, pods, min_count=min_count, job="me", headroom=headroom, held=held, holding=holding
    )
    if chosen is None:
        return
    assert len(chosen) >= max(1, min_count)
    assert len({position for position, _ in chosen}) == len(chosen)
    used: dict[str, int] = {}
    for position, node in chosen:
        used[node] = used.get(node, 0) + pods[position]
    for node, gpus in used.items():
        assert gpus <= usable(node, free[node], "me", held, holding)
        if holding is Holding.NODE and held.get(node):
            assert "me" in held[node]
    if headroom is not None:
        assert sum(used.values()) <= headroom
