"""Counts kept one item at a time equal the counts made afresh, key for key."""

from __future__ import annotations

from gpuyield.schemas.counts import count, count_rows, count_twice, rows


def test_a_key_leaves_with_its_last_count() -> None:
    counts: dict[str, int] = {}
    assert count(counts, "q", 1) == 1
    assert count(counts, "q", 1) == 2
    assert count(counts, "q", -1) == 1
    assert count(counts, "q", -1) == 0
    assert counts == {}


def test_keys_counted_twice_are_known_until_one_goes() -> None:
    counts: dict[str, int] = {}
    twice: set[str] = set()
    count_twice(counts, twice, "worker-0", 1)
    count_twice(counts, twice, "worker-0", 1)
    assert twice == {"worker-0"}
    count_twice(counts, twice, "worker-0", -1)
    assert twice == set()
    assert counts == {"worker-0": 1}


def test_a_node_keeps_its_gpus_while_a_pod_is_on_it_even_at_zero() -> None:
    pods: dict[str, int] = {}
    gpus: dict[str, int] = {}
    count_rows(pods, gpus, (("gpu-01", 2, 16), ("gpu-02", 1, 0)), 1)
    count_rows(pods, gpus, (("gpu-01", 1, 8),), -1)
    assert (pods, gpus) == ({"gpu-01": 1, "gpu-02": 1}, {"gpu-01": 8, "gpu-02": 0})
    count_rows(pods, gpus, (("gpu-01", 1, 8), ("gpu-02", 1, 0)), -1)
    assert (pods, gpus) == ({}, {})


def test_rows_count_the_items_and_their_amounts_per_key_in_first_seen_order() -> None:
    pods = [("gpu-02", 8), ("gpu-01", 4), ("gpu-02", 0), ("gpu-01", 4)]
    assert rows(pods) == (("gpu-02", 2, 8), ("gpu-01", 2, 8))
    assert rows([]) == ()
