"""The frozen models of the last snapshot, reused by the next one where nothing they read changed.

A snapshot holds a ``Node`` per node and a ``Job`` per job holding GPUs: at
10,000 nodes, 40,000 pydantic models validated for each plan, most of a
planning step outside the planner, although between two plans only the jobs
and nodes that an input touched differ. ``cluster.snapshot`` asks this cache
for each model with everything the model is built from; an entry is reused
only when all of it is the same (the same objects: the index keeps a job's
view, and the table the record a step wrote, while they do not change; or
equal values), so a snapshot is equal, field for field, to one built afresh.

Only what the last snapshot used is kept: a job or node that left the
cluster is dropped at the next snapshot. The decider keeps one next to its
``RecordIndex``; the cache changes no result, so the step stays pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuyield.schemas import Job, Node

Key = tuple[Any, ...]


class SnapshotParts:
    """The ``Node`` and ``Job`` models of the last snapshot, with what each was built from."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Key, Node]] = {}
        self._jobs: dict[str, tuple[Key, Job]] = {}
        self._last_nodes: dict[str, tuple[Key, Node]] = {}
        self._last_jobs: dict[str, tuple[Key, Job]] = {}

    def start(self) -> None:
        """A snapshot begins: what the previous one used can be reused, the rest is let go."""
        if self._nodes or self._jobs:
            self._last_nodes, self._nodes = self._nodes, {}
            self._last_jobs, self._jobs = self._jobs, {}

    def node(self, name: str, key: Key, build: Callable[..., Node], *args: Any) -> Node:
        """Node ``name`` built from ``key`` (compared with ``==``, which tries ``is`` first).

        ``build(*args)`` makes it when it is not kept: the arguments are passed
        as they are, since a closure made for every node and job of every
        snapshot, mostly unused, cost more than the lookup.
        """
        hit = self._nodes.get(name) or self._last_nodes.get(name)
        if hit is None or hit[0] != key:
            hit = (key, build(*args))
        self._nodes[name] = hit
        return hit[1]

    def job(self, name: str, key: Key, build: Callable[..., Job], *args: Any) -> Job:
        """Job ``name`` (a job, or its ``~leaving`` part) built from ``key`` by ``build(*args)``."""
        hit = self._jobs.get(name) or self._last_jobs.get(name)
        if hit is None or hit[0] != key:
            hit = (key, build(*args))
        self._jobs[name] = hit
        return hit[1]
