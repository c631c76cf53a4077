"""Records the consumer read past that no agent processed, found and read again.

faust takes a batch from aiokafka (which moves the partition's position past
it) and can then lose some of it: the fetch loop drops what it cannot hand
over at that moment (a partition paused for a rebalance or a recovery, the
flow stopped), and a stream skips, without acknowledging, an event from an
older generation or one that arrives while the flow is suspended. faust
counts on the seek to the committed offsets that ends a rebalance to read
them again. What is lost after that seek stays lost: the partition's
committed offset stops below the lost record, and the agent never sees it.

Measured on the two-worker SIGKILL test
(``tests/worker/test_progress_ownership.py``, about one run in six on a busy
2-core machine): the survivor's positions on the partitions it took over
stood at their ends, its committed offsets far below, nothing in flight, and
the heartbeats in between were never folded.

So the worker's consumer checks, every few commit intervals, each flowing
partition: its position, its committed offset, and whether anything of it is
in flight (an event of it not yet acknowledged, or waiting in an agent's
buffer). A partition idle at two checks in a row, with the same position and
committed offset and the position past the committed offset, has records
that nothing will process: it is sought back to its committed offset. Records processed
after the lost one are read again: at-least-once, as after any rebalance, and
the agents' handling is idempotent. A partition sought back to the same
offset ``MAX_SEEKS_BACK`` times without its committed offset moving is left,
with an error, to the stall watch (a record that no agent can take).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)

MAX_SEEKS_BACK = 3


@dataclass(frozen=True, slots=True)
class Seen:
    """A partition at one check."""

    position: int
    """The next offset the consumer hands over."""
    committed: int
    """The next offset the group would read after a restart (0 when never committed)."""
    idle: bool
    """Nothing of it in flight: none of its events unacknowledged or in an agent's buffer."""


@dataclass(frozen=True, slots=True)
class Verdict(Generic[P]):
    seek_back: dict[P, int]
    """Partitions to seek back, to their committed offset."""
    given_up: tuple[P, ...]
    """Partitions sought back ``MAX_SEEKS_BACK`` times to no avail, reported once."""


class StrandedWatch(Generic[P]):
    """Remembers each partition's last check and how often it was sought back to one offset."""

    def __init__(self, max_seeks_back: int = MAX_SEEKS_BACK) -> None:
        self._max = max_seeks_back
        self._last: dict[P, Seen] = {}
        self._seeks: dict[P, tuple[int, int]] = {}  # partition -> (offset, times sought back to it)

    def check(self, seen: Mapping[P, Seen]) -> Verdict[P]:
        """One check of the flowing partitions; those not given are forgotten until seen again."""
        seek_back: dict[P, int] = {}
        given_up: list[P] = []
        for partition, now in seen.items():
            before = self._last.get(partition)
            stranded = (
                before is not None
                and before.idle
                and now.idle
                and before.position == now.position
                and before.committed == now.committed
                and now.position > now.committed
            )
            if not stranded:
                continue
            offset, times = self._seeks.get(partition, (now.committed, 0))
            if offset != now.committed:
                times = 0
            if times >= self._max:
                if times == self._max:
                    given_up.append(partition)
                    self._seeks[partition] = (now.committed, times + 1)
                continue
            self._seeks[partition] = (now.committed, times + 1)
            seek_back[partition] = now.committed
        self._last = dict(seen)
        for partition in list(self._seeks):
            if partition not in seen or seen[partition].committed != self._seeks[partition][0]:
                del self._seeks[partition]  # not flowing now, or it moved on: start over
        return Verdict(seek_back, tuple(given_up))

    def forget(self, partitions: Iterable[P]) -> None:
        """Partitions this consumer no longer owns."""
        for partition in partitions:
            self._last.pop(partition, None)
            self._seeks.pop(partition, None)
