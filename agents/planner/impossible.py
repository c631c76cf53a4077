"""Proofs that no plan exists, cheap enough to try before the search.

A search that cannot find a plan explores every combination of victims
before it can say so, or runs out of its budget and says it does not know
(256 nodes, seed 2 of the bench: 20,000 steps, 44 times the validation of its
snapshot). Often a count shows at once that no plan exists, whatever the
victims. Each test here is a necessary condition of every valid plan, with
every eligible job evicted as far as the queue rules allow, so a plan that
fails one cannot exist and a plan that passes all may still not:

- a capability of the preemptor's queue or an ancestor stays exceeded even
  with every eligible job of its subtree evicted (rule 5);
- a reclaim from another queue is possible only if each queue on the
  preemptor's side below the two queues' common ancestor can end within its
  guarantee, every eligible job of its subtree evicted (reading 10); and
  only if the victim's side stays at or above its guarantee after the
  smallest eviction there (reading 6). Jobs of queues that cannot be
  reclaimed from are no victims at all;
- the nodes must then offer a slot for every pod: with every remaining
  victim evicted, a node with ``f`` GPUs free holds at most ``f // g`` pods of
  ``g`` GPUs or more, summed over the nodes that may host such a pod.

The answer is a sentence for the plan's explanation, or None.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuyield.agents.planner.session import PlanningSession, short_slots


def cannot_fit(session: PlanningSession, eligible: Iterable[int]) -> str | None:
    """Why no plan can place the preemptor's pods with these victims, or None when counting
    cannot tell."""
    tree, mine = session.tree, session.queue
    victims = [session.candidates[i] for i in eligible]
    placed = sum(p.gpus for p in session.to_place)
    evictable: dict[str, int] = {}  # GPUs of eligible jobs in each queue's subtree
    smallest: dict[str, int] = {}  # per queue, the fewest GPUs one eviction there frees
    for cand in victims:
        for queue in tree.ancestors[cand.queue]:
            evictable[queue] = evictable.get(queue, 0) + cand.gpus
        least = min((p.gpus for p in cand.pods), default=0)
        smallest[cand.queue] = min(smallest.get(cand.queue, least), least)

    def least_after(queue: str) -> int:
        return session.usage[queue] + placed - evictable.get(queue, 0)

    for queue in tree.ancestors[mine]:
        cap = tree.capability(queue)
        if cap is not None and least_after(queue) > cap:
            return (
                f"cannot fit: queue '{queue}' would use at least {least_after(queue)} GPUs "
                f"with the preemptor placed, above its capability of {cap}, even evicting every "
                "eligible job below it"
            )
    shut: dict[str, str] = {}  # queues no reclaim may take from, and why
    for queue in sorted({c.queue for c in victims if not c.same_queue}):
        top = tree.lowest_common_ancestor(mine, queue)
        for mine_side in tree.branch_below(mine, top):
            if least_after(mine_side) > tree.guarantee(mine_side):
                shut[queue] = (
                    f"queue '{mine_side}' would use at least {least_after(mine_side)} GPUs with "
                    f"the preemptor placed, above its guarantee of "
                    f"{tree.guarantee(mine_side)}, even evicting every eligible job below it"
                )
                break
        else:
            for their_side in tree.branch_below(queue, top):
                left = session.usage[their_side] - smallest[queue]
                if left < tree.guarantee(their_side):
                    shut[queue] = (
                        f"queue '{their_side}' would fall to {left} GPUs or fewer, below its "
                        f"guarantee of {tree.guarantee(their_side)}"
                    )
                    break
    room: dict[str, int] = {}
    for cand in victims:
        if cand.queue not in shut:
            for pod in cand.pods:
                room[pod.node] = room.get(pod.node, 0) + pod.gpus
    why_shut = "".join(f"; no job of queue '{q}' may be taken ({why})" for q, why in shut.items())
    # Capped at the node's GPUs: a node too small for a pod offers it no slot.
    short = short_slots(
        [
            min(session.node_gpus[node], max(0, session.node_free[node] + room.get(node, 0)))
            for node in session.node_names
            if session.node_schedulable[node]
        ],
        [p.gpus for p in session.to_place],
    )
    if short is None:
        return None
    gpus, slots, pods = short
    return (
        f"cannot fit: with every eligible job that may be taken evicted, the nodes hold "
        f"{slots} of the {pods} pod(s) of {gpus} GPUs or more{why_shut}"
    )
