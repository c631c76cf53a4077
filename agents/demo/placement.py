"""Where the simulated Volcano puts a gang: the one allocate model, with the demo's conventions.

``gpuyield.agents.simulator.allocate.place`` decides (gang all-or-nothing,
an elastic job's minimum, binpack's tightest node, the queue's capability);
this adapter gives it the demo's two conventions: nodes are tried in name
order (so ties go to the first name, whatever order the scenario lists
them), and a reservation is a taint on the whole node (``Holding.NODE``), as
gpuyield applies it on a real cluster, so a held node takes only its
preemptors' pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuyield.agents.simulator.allocate import Holding
from gpuyield.agents.simulator.allocate import place as allocate


def place(
    free: Mapping[str, int],
    pods: Sequence[int],
    *,
    min_count: int,
    headroom: int | None = None,
    job: str = "",
    held: Mapping[str, Mapping[str, int]] | None = None,
) -> list[str] | None:
    """Nodes for the first pods of ``pods`` (GPUs each), or None when fewer than ``min_count`` fit.

    ``free`` is each schedulable node's free GPUs; ``headroom`` the GPUs the
    job's queue may still take (None: unlimited); ``held`` node -> preemptor
    -> GPUs, the reservations in force, of which only ``job``'s own are open
    to it. Pods of one size are placed in order, so the nodes returned are
    those of the first pods.
    """
    chosen = allocate(
        dict(sorted(free.items())),
        pods,
        min_count=min_count,
        job=job,
        headroom=headroom,
        held=held,
        holding=Holding.NODE,
    )
    return None if chosen is None else [node for _, node in chosen]
