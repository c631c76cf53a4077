"""Placing the preemptor's pods: each on one schedulable node with enough free GPUs.

Exact bin packing by backtracking. Nodes with the same free capacity are
interchangeable for feasibility, so only one of them is tried per pod and
level; that keeps the search small even on thousands of nodes. Among equally
good nodes the order is best fit (fewest GPUs left idle), then the rack or
NVLink domain the gang already uses, then the node's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpuyield.agents.planner.session import PlanningSession, PodToPlace


def can_host(session: PlanningSession, node: str, gpus: int) -> bool:
    """A node the pod may go to at all: schedulable and big enough."""
    return session.node_schedulable[node] and session.node_gpus[node] >= gpus


def fit_key(
    session: PlanningSession, node: str, free: int, gpus: int, groups: frozenset[str]
) -> tuple[int, int, str]:
    """Order of preference between nodes that cost the same."""
    return (free - gpus, 0 if session.node_group[node] in groups else 1, node)


def pack(
    session: PlanningSession,
    pods: Sequence[PodToPlace],
    freed: Mapping[str, int],
    tick: Callable[[], bool],
    fixed: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """Place every pod, or None when no placement exists (or ``tick`` says stop).

    ``freed`` adds GPUs to the snapshot's free GPUs on some nodes. ``fixed``
    is tried first as a whole: when it is still valid it is kept, so a plan's
    placement does not move for no reason. Otherwise feasibility is decided
    on how many nodes have each amount of free GPUs (nodes with the same room
    are interchangeable), then pods are given concrete nodes in name order.
    """

    def free_of(node: str) -> int:
        return session.node_free[node] + freed.get(node, 0)

    if fixed is not None and _fits(session, pods, free_of, fixed):
        return dict(fixed)
    counts = dict(session.free_counts)
    for node, more in freed.items():
        if more and session.node_schedulable[node]:
            base = session.node_free[node]
            counts[base] -= 1
            counts[base + more] = counts.get(base + more, 0) + 1
    sizes: list[int] = []
    if not _assign(pods, 0, counts, sizes, tick):
        return None
    return _materialise(session, pods, sizes, freed)


def _assign(
    pods: Sequence[PodToPlace],
    i: int,
    counts: dict[int, int],
    sizes: list[int],
    tick: Callable[[], bool],
) -> bool:
    """Choose, for each pod, the free amount of the node it goes to (best fit first)."""
    if i == len(pods):
        return True
    gpus = pods[i].gpus
    for free in sorted(f for f, n in counts.items() if n > 0 and f >= gpus):
        if not tick():
            return False
        counts[free] -= 1
        counts[free - gpus] = counts.get(free - gpus, 0) + 1
        sizes.append(free)
        if _assign(pods, i + 1, counts, sizes, tick):
            return True
        sizes.pop()
        counts[free - gpus] -= 1
        counts[free] += 1
    return False


def _materialise(
    session: PlanningSession,
    pods: Sequence[PodToPlace],
    sizes: Sequence[int],
    freed: Mapping[str, int],
) -> dict[str, str]:
    """Concrete nodes for pods whose free amounts were chosen by ``_assign``."""
    current = {n: session.node_free[n] + more for n, more in freed.items() if more}
    placement: dict[str, str] = {}
    for pod, free in zip(pods, sizes, strict=True):
        node = min(
            (n for n, f in current.items() if f == free and session.node_schedulable[n]),
            default=None,
        )
        if node is None:
            node = next(n for n in session.free_buckets.get(free, ()) if n not in current)
        placement[pod.name] = node
        current[node] = free - pod.gpus
    return placement


def _fits(
    session: PlanningSession,
    pods: Sequence[PodToPlace],
    free_of: Callable[[str], int],
    placement: Mapping[str, str],
) -> bool:
    left: dict[str, int] = {}
    for pod in pods:
        node = placement.get(pod.name)
        if node is None or node not in session.node_gpus or not can_host(session, node, pod.gpus):
            return False
        if node not in left:
            left[node] = free_of(node)
        left[node] -= pod.gpus
        if left[node] < 0:
            return False
    return True
