"""Where the simulated Volcano puts a gang: all of it, or for an elastic job at least its minimum.

Volcano's allocate action with the gang and binpack plugins, reduced to what
the demo needs: a job's pods are placed together or not at all (``min_count``
of them at least, for an elastic job), each on the node with the fewest free
GPUs that still fit it (binpack keeps whole nodes free for 8-GPU pods), and a
queue never goes over its capability. Pure, so the rule is testable alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def place(
    free: Mapping[str, int],
    pods: Sequence[int],
    *,
    min_count: int,
    headroom: int | None = None,
) -> list[str] | None:
    """Nodes for the first pods of ``pods`` (GPUs each), or None when fewer than ``min_count`` fit.

    ``free`` is each schedulable node's free GPUs; ``headroom`` the GPUs the
    job's queue may still take (None: unlimited). Pods are placed in order; an
    elastic job gets as many as fit once its minimum does.
    """
    left = dict(free)
    budget = headroom
    chosen: list[str] = []
    for gpus in pods:
        if budget is not None and gpus > budget:
            break
        fitting = sorted((n for n, f in left.items() if f >= gpus), key=lambda n: (left[n], n))
        if not fitting:
            break
        node = fitting[0]
        left[node] -= gpus
        if budget is not None:
            budget -= gpus
        chosen.append(node)
    return chosen if len(chosen) >= max(1, min_count) else None
