"""Volcano's allocate step for one job: where its waiting pods go, all of its gang or none.

The one model of allocate that the simulator (``engine.Simulation.try_place``),
the demo's simulated cluster (``agents/demo/cluster.py``) and the benchmarks
(``bench/``) place pods with. It is what the plugins of the scheduler
configuration gpuyield ships do to one job in one session, reduced to GPUs:

- **gang** (``gang.go``, JobReady): the job starts only with at least
  ``min_count`` pods placed (and at least one); an elastic job then takes as
  many more as fit, in order;
- **proportion** (``proportion.go``, allocatable): the queue never goes over
  its capability: ``headroom`` is what the queue may still take;
- **predicates + binpack/nodeorder**: each pod goes to the node it fills most
  tightly (the fewest free GPUs left; the first of equals in the order the
  nodes are given, so callers pass a stable order), which keeps whole nodes
  free for whole-node pods;
- **reservations**: GPUs held for a preemptor on a node (``held``: node ->
  preemptor -> GPUs) are not for anyone else, in one of two ways:

  - ``Holding.GPUS``, a nomination inside the scheduler (what the
    simulator's gpuyield models: Volcano's ``pipelined`` GPUs of a victim
    released for the preemptor): the held GPUs are taken out of what every
    other job may use there, the rest of the node stays open;
  - ``Holding.NODE``, a ``NoSchedule`` taint on the node plus a matching
    toleration on the preemptor's pods (what gpuyield applies on a real
    cluster, and what the demo's cluster honours): the predicates plugin
    rejects every pod that does not tolerate the taint, so a held node
    accepts only the pods of the preemptors it is held for, whatever else is
    free on it. Where two preemptors hold GPUs on one node (two 4-GPU
    fine-tunes on an 8-GPU node), both tolerate its taint, and each may take
    what is free less the other's held GPUs, as with ``Holding.GPUS``: the
    decider's placement never books a node twice, and keeping both off the
    node would strand the GPUs freed for them.

  ``nominated`` pins pods to the nodes held for them (the preemptor's
  placement in the decision), falling back to the best fit when the pinned
  node has no room.

Pure and deterministic; nodes are any hashable names (the simulator's
indexes, the demo's node names).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from enum import StrEnum
from typing import TypeVar, cast

N = TypeVar("N", bound=Hashable)


class Holding(StrEnum):
    """How a hold on a node's GPUs keeps other jobs off them."""

    GPUS = "gpus"  # only the held GPUs (a nomination inside the scheduler)
    NODE = "node"  # the whole node (a NoSchedule taint the preemptor tolerates)


def _nodes(free: Mapping[N, int] | Sequence[int]) -> list[tuple[N, int]]:
    if isinstance(free, Mapping):
        return list(free.items())
    return cast("list[tuple[N, int]]", list(enumerate(free)))


def usable(
    node: N,
    free: int,
    job: str,
    held: Mapping[N, Mapping[str, int]],
    holding: Holding = Holding.GPUS,
) -> int:
    """The free GPUs on ``node`` that ``job``'s pods may take; 0 where a taint keeps it off."""
    holds = held.get(node)
    if not holds:
        return free
    if holding is Holding.NODE and job not in holds:
        return 0
    return free - sum(gpus for holder, gpus in holds.items() if holder != job)


def best_fit(
    free: Sequence[tuple[N, int]],
    gpus: int,
    *,
    job: str = "",
    held: Mapping[N, Mapping[str, int]] | None = None,
    taken: Mapping[N, int] | None = None,
    holding: Holding = Holding.GPUS,
) -> N | None:
    """The node one pod of ``gpus`` GPUs fills most tightly (the first of equals), or None.

    ``free`` is each node's free GPUs in the order ties are broken; ``taken``
    what this job's earlier pods already took in this session.
    """
    best: N | None = None
    best_left = math.inf
    holds = held or {}
    for node, room in free:
        if room < gpus:
            continue  # what the job may use there is at most what is free
        left = room - gpus
        if holds and node in holds:
            left = usable(node, room, job, holds, holding) - gpus
        if taken:
            left -= taken.get(node, 0)
        if 0 <= left < best_left:
            best, best_left = node, left
            if left == 0:
                break
    return best


def place(
    free: Mapping[N, int] | Sequence[int],
    pods: Sequence[int],
    *,
    min_count: int,
    job: str = "",
    headroom: float | None = None,
    held: Mapping[N, Mapping[str, int]] | None = None,
    nominated: Mapping[int, N] | None = None,
    holding: Holding = Holding.GPUS,
) -> list[tuple[int, N]] | None:
    """Where ``job``'s waiting pods go: ``(position in pods, node)`` pairs, or None.

    ``free``: each node's free GPUs (a mapping, or a list indexed by node);
    ``pods``: the GPUs of each waiting pod, in the order they are placed;
    ``min_count``: how many of them the gang needs placed at once (None is
    returned when fewer fit, and nothing is placed); ``headroom``: GPUs the
    job's queue may still take (None: no capability); ``held``/``holding``:
    the reservations (see the module docstring); ``nominated``: pod position
    -> the node held for it.
    """
    nodes = _nodes(free)
    holds: Mapping[N, Mapping[str, int]] = held or {}
    room = math.inf if headroom is None else headroom
    need = max(1, min_count)
    if sum(sorted(pods)[: max(0, min_count)]) > room:
        return None  # the queue's capability: the gang cannot start (proportion first)
    chosen: list[tuple[int, N]] = []
    taken: dict[N, int] = {}
    spent = 0
    by_node = dict(nodes) if nominated else {}
    for position, gpus in enumerate(pods):
        if spent + gpus > room:
            break
        node: N | None = None
        if nominated is not None and position in nominated:
            candidate = nominated[position]
            if candidate in by_node:
                left = usable(candidate, by_node[candidate], job, holds, holding)
                if left - taken.get(candidate, 0) >= gpus:
                    node = candidate
        if node is None:
            node = best_fit(nodes, gpus, job=job, held=holds, taken=taken, holding=holding)
        if node is None:
            continue
        taken[node] = taken.get(node, 0) + gpus
        spent += gpus
        chosen.append((position, node))
    return chosen if len(chosen) >= need else None
