"""Queue guarantees and capabilities after the plan (rules 3 and 5, readings 5, 6, 10).

Usage after the plan = usage before - evicted GPUs in the subtree + the
preemptor's pods to place (for its queue and ancestors). A violation is
*repairable* when evicting more inside the queue's subtree can fix it (the
preemptor's branch over its capability or guarantee); otherwise adding
victims can only make it worse (a victim's branch pushed below its guarantee)
and the search prunes that branch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuyield.agents.planner.session import PlanningSession


@dataclass(frozen=True, slots=True)
class QueueViolation:
    queue: str
    repairable: bool
    reason: str
    excess: int  # GPUs the queue is over (repairable) or under (not repairable) its bound


def usage_after(session: PlanningSession, evicted_by_queue: Mapping[str, int]) -> dict[str, int]:
    """GPUs each queue's subtree holds once the plan is carried out."""
    usage = dict(session.usage)
    for queue, gpus in evicted_by_queue.items():
        for above in session.tree.ancestors[queue]:
            usage[above] -= gpus
    placed = sum(p.gpus for p in session.to_place)
    for above in session.tree.ancestors[session.queue]:
        usage[above] += placed
    return usage


def violations(
    session: PlanningSession,
    evicted_by_queue: Mapping[str, int],
    reclaimed_from: Iterable[str],
) -> list[QueueViolation]:
    """Every queue rule the plan would break, hard ones first."""
    tree, mine = session.tree, session.queue
    after = usage_after(session, evicted_by_queue)
    hard: list[QueueViolation] = []
    soft: list[QueueViolation] = []
    for victim_queue in sorted(set(reclaimed_from)):
        top = tree.lowest_common_ancestor(mine, victim_queue)
        for queue in tree.branch_below(victim_queue, top):
            if after[queue] < tree.guarantee(queue):
                hard.append(
                    QueueViolation(
                        queue,
                        False,
                        f"reclaim would take queue '{queue}' to {after[queue]} GPUs, below its "
                        f"guarantee of {tree.guarantee(queue)}",
                        tree.guarantee(queue) - after[queue],
                    )
                )
        for queue in tree.branch_below(mine, top):
            if after[queue] > tree.guarantee(queue):
                soft.append(
                    QueueViolation(
                        queue,
                        True,
                        f"queue '{queue}' would use {after[queue]} GPUs with the preemptor "
                        f"placed, above its guarantee of {tree.guarantee(queue)}: it may not "
                        f"reclaim from '{victim_queue}'",
                        after[queue] - tree.guarantee(queue),
                    )
                )
    for queue in tree.ancestors[mine]:
        cap = tree.capability(queue)
        if cap is not None and after[queue] > cap:
            soft.append(
                QueueViolation(
                    queue,
                    True,
                    f"queue '{queue}' would use {after[queue]} GPUs, above its capability of {cap}",
                    after[queue] - cap,
                )
            )
    return hard + soft
