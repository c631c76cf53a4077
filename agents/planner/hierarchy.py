"""The queue tree: ancestors, lowest common ancestors and subtree usage.

Reading 6 of the contract: a queue's usage is the GPUs of its own jobs' pods
plus those of all its descendants. Queues without a parent hang below an
implicit root (``None``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuyield.schemas import Queue


@dataclass(frozen=True, slots=True)
class QueueTree:
    """Read-only structure of the snapshot's queues."""

    queues: Mapping[str, Queue]
    ancestors: Mapping[str, tuple[str, ...]]  # self first, then parent, ..., top

    @classmethod
    def build(cls, queues: tuple[Queue, ...]) -> QueueTree:
        by_name = {q.name: q for q in queues}
        chains: dict[str, tuple[str, ...]] = {}
        for queue in queues:
            chain = [queue.name]
            parent = queue.parent
            while parent is not None:
                chain.append(parent)
                parent = by_name[parent].parent
            chains[queue.name] = tuple(chain)
        return cls(queues=by_name, ancestors=chains)

    def lowest_common_ancestor(self, a: str, b: str) -> str | None:
        """The deepest queue above (or equal to) both, or None for the root."""
        above_b = set(self.ancestors[b])
        for queue in self.ancestors[a]:
            if queue in above_b:
                return queue
        return None

    def branch_below(self, queue: str, top: str | None) -> tuple[str, ...]:
        """``queue`` and its ancestors strictly below ``top`` (None: up to the root)."""
        chain = self.ancestors[queue]
        if top is None:
            return chain
        return chain[: chain.index(top)]

    def related(self, a: str, b: str) -> bool:
        """True when one queue is an ancestor of (or equal to) the other."""
        return a in self.ancestors[b] or b in self.ancestors[a]

    def guarantee(self, queue: str) -> int:
        return self.queues[queue].guarantee.gpu

    def capability(self, queue: str) -> int | None:
        return self.queues[queue].capability.gpu
