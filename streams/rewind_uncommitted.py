"""After a rebalance, read a partition the group never committed from its beginning.

faust drops records fetched for a partition while it is paused or the flow is
stopped (a rebalance, a table's recovery), and its consumer's fetch position
has already moved past them. It counts on the seek to the committed offsets
that ends every rebalance to put them back. aiokafka's ``seek_to_committed``
moves only partitions with a committed offset above zero: a partition the
group never committed keeps its position, past the dropped records, and
nothing brings them back. Measured: a worker that took over a SIGKILLed peer's
heartbeat partitions, which the peer had not committed yet, skipped every
heartbeat on them (``tests/worker/test_progress_ownership.py``, about one run
in six on a busy 2-core machine) and the stall watch reported them stalled
for good.

For such partitions ``auto_offset_reset="earliest"`` (the worker's setting)
means the beginning, so that is where they go. Records the peer folded but had
not committed are read again: at-least-once, as after any takeover, and the
folds are idempotent. A partition read from its beginning anyway loses
nothing by the seek.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition


def never_committed(
    committed: Mapping[TopicPartition, int | None], skip: Callable[[TopicPartition], bool]
) -> list[TopicPartition]:
    """The partitions ``seek_to_committed`` left where they were (no offset above zero)."""
    return sorted(
        (
            tp
            for tp, offset in committed.items()
            if (offset is None or offset <= 0) and not skip(tp)
        ),
        key=lambda tp: (tp.topic, tp.partition),
    )


def rewind_never_committed(
    consumer: AIOKafkaConsumer,
    committed: Mapping[TopicPartition, int | None],
    skip: Callable[[TopicPartition], bool],
) -> list[TopicPartition]:
    """Seek ``consumer``'s never-committed partitions to their beginning; returns them.

    ``committed`` is what ``seek_to_committed`` returned; ``skip`` names
    partitions positioned by someone else (a table's changelog, which recovery
    reads from offsets of its own). The seek is to offset 0 at once, not
    ``seek_to_beginning``, which waits for a list-offsets round trip (1.5 s
    of every rebalance on the test broker): where retention has deleted the
    first records, the fetch answers out of range and ``earliest`` moves it on.
    """
    rewound = never_committed(committed, skip)
    seek: Any = consumer.seek
    for tp in rewound:
        seek(tp, 0)
    return rewound
