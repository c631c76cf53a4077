"""The decider's state: JSON records under string keys, as its Faust table holds them.

One record per watched object, per job's progress, per issued command, per
demand, and a few cluster-wide ones. A step never changes a record in place:
it returns the records it writes (``None`` deletes), the worker assigns them
to the table (Faust persists only reassigned values) and the next step reads
them back. ``Overlay`` lets a step read its own writes before they land.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from typing import Any

Record = Any  # a JSON-able value: dict, list, number, string
Writes = dict[str, Record | None]

NODE = "node/"
POD = "pod/"
GROUP = "group/"
VJOB = "vjob/"
QUEUE = "queue/"
PROGRESS = "progress/"
EVICTIONS = "evictions/"
COMMAND = "command/"
LEAVING = "leaving/"
SUSPENDED = "suspended/"
RESERVATION = "reservation/"
DEMAND = "demand/"
ALERT = "alert/"
GUARD = "guard"
CLOCK = "clock"


class Overlay(Mapping[str, Record]):
    """``base`` with ``writes`` applied on top, without copying ``base``."""

    def __init__(self, base: Mapping[str, Record], writes: Writes) -> None:
        self.base = base
        self.writes = writes
        self._base_keys: list[str] | None = None

    def __getitem__(self, key: str) -> Record:
        if key in self.writes:
            value = self.writes[key]
            if value is None:
                raise KeyError(key)
            return value
        return self.base[key]

    def __iter__(self) -> Iterator[str]:
        for key in self.base:
            if key not in self.writes:
                yield key
        for key, value in self.writes.items():
            if value is not None:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        if key in self.writes:
            return self.writes[key] is not None
        return key in self.base

    def with_prefix(self, prefix: str) -> Iterator[tuple[str, Record]]:
        """Every live record whose key starts with ``prefix``, in key order."""
        if self._base_keys is None:
            # One pass over the (possibly large, table-backed) base per step;
            # every prefix lookup after that is a bisection.
            self._base_keys = sorted(self.base)
        base = self._base_keys
        start = bisect.bisect_left(base, prefix)
        stop = bisect.bisect_left(base, prefix + "\U0010ffff")
        keys = {k for k in base[start:stop] if k not in self.writes}
        keys.update(k for k, v in self.writes.items() if v is not None and k.startswith(prefix))
        for key in sorted(keys):
            yield key, self[key]
