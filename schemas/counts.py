"""Counts kept up to date one item at a time, for sums a caller keeps instead of walking.

The decider's snapshot parts and the snapshot's reference check both keep
sums over jobs that come, go and change (``agents.controller.snapshot_parts``,
``schemas.snapshot.ReferenceTotals``); a key leaves its mapping with its last
count, so a sum kept this way equals the sum made afresh, key for key.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def count(counts: dict[K, int], key: K, sign: int) -> int:
    """Count ``key`` in (``sign`` 1) or out (-1); the count left (the key goes at 0)."""
    n = counts.get(key, 0) + sign
    if n:
        counts[key] = n
    else:
        del counts[key]
    return n


def count_twice(counts: dict[K, int], twice: set[K], key: K, sign: int) -> None:
    """``count``, keeping in ``twice`` the keys counted more than once."""
    if count(counts, key, sign) > 1:
        twice.add(key)
    else:
        twice.discard(key)


def count_rows(
    items: dict[str, int],
    amounts: dict[str, int],
    rows: tuple[tuple[str, int, int], ...],
    sign: int,
) -> None:
    """Count ``(key, items, amount)`` rows in or out: a key keeps an amount while it has
    items (a node with a pod on it has a key in ``amounts``, even at 0 GPUs)."""
    for key, n, amount in rows:
        if count(items, key, sign * n):
            amounts[key] = amounts.get(key, 0) + sign * amount
        else:
            del amounts[key]


def rows(amounts: Iterable[tuple[str, int]]) -> tuple[tuple[str, int, int], ...]:
    """``(key, items, amount)`` rows of ``(key, amount)`` items, a row per key in first-seen
    order: what ``count_rows`` counts in and out."""
    by_key: dict[str, list[int]] = {}
    for key, amount in amounts:
        row = by_key.get(key)
        if row is None:
            by_key[key] = [1, amount]
        else:
            row[0] += 1
            row[1] += amount
    return tuple((key, n, total) for key, (n, total) in by_key.items())
