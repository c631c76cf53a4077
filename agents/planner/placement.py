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
    free_of: Callable[[str], int],
    tick: Callable[[], bool],
    fixed: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """Place every pod, or None when no placement exists (or ``tick`` says stop).

    ``fixed`` is tried first as a whole: when it is still valid it is kept, so
    a plan's placement does not move for no reason.
    """
    free = {n: free_of(n) for n in session.node_names if session.node_schedulable[n]}
    if fixed is not None and _fits(session, pods, free, fixed):
        return dict(fixed)
    placement: dict[str, str] = {}
    if _place(session, pods, 0, free, placement, tick):
        return placement
    return None


def _fits(
    session: PlanningSession,
    pods: Sequence[PodToPlace],
    free: Mapping[str, int],
    placement: Mapping[str, str],
) -> bool:
    left = dict(free)
    for pod in pods:
        node = placement.get(pod.name)
        if node is None or node not in left or not can_host(session, node, pod.gpus):
            return False
        left[node] -= pod.gpus
        if left[node] < 0:
            return False
    return True


def _place(
    session: PlanningSession,
    pods: Sequence[PodToPlace],
    i: int,
    free: dict[str, int],
    placement: dict[str, str],
    tick: Callable[[], bool],
) -> bool:
    if i == len(pods):
        return True
    pod = pods[i]
    groups = frozenset(session.node_group[n] for n in placement.values())
    options = sorted(
        (fit_key(session, n, f, pod.gpus, groups), n)
        for n, f in free.items()
        if f >= pod.gpus and session.node_gpus[n] >= pod.gpus
    )
    tried: set[int] = set()
    for _, node in options:
        if free[node] in tried:
            continue
        tried.add(free[node])
        if not tick():
            return False
        free[node] -= pod.gpus
        placement[pod.name] = node
        if _place(session, pods, i + 1, free, placement, tick):
            return True
        free[node] += pod.gpus
        del placement[pod.name]
    return False
