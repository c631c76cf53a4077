"""Which partition a keyed record lands in: the producers' own rule, for readers of one key.

Every producer of gpuyield's keyed topics (Faust's and aiokafka's, the
trainers' heartbeat sink included) uses Kafka's default partitioner: murmur2 of
the key bytes over the topic's partitions in order. A reader that wants one
key only (a node agent its node's commands, or the heartbeats of a job it is
yielding) assigns itself that partition instead of reading them all.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka.partitioner import DefaultPartitioner

_PARTITIONER = DefaultPartitioner()


def partition_for(key: bytes, partitions: Iterable[int]) -> int:
    """The partition of ``partitions`` (a topic's ids) that a record keyed ``key`` goes to."""
    ordered = sorted(partitions)
    if not ordered:
        raise ValueError("the topic has no partitions")
    found: int = _PARTITIONER(key, ordered, ordered)
    return found
