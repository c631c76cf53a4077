"""Where a consumer group stands on its topics: per partition, the committed offset and the end.

The committed offset is the next offset the group will process: everything
below it was processed (faust commits after processing). The end is the
offset the next message will get. Their difference is the input waiting.

Read with a consumer that has the group's id but subscribes to nothing, so it
never joins the group (measured on Tansu: the group's members keep their
assignment); the admin client's ``list_consumer_group_offsets`` cannot parse
Tansu's answer. Topics are listed from metadata of all topics, since naming an
unknown topic would make Tansu create it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

Partition = tuple[str, int]
"""(topic, partition)."""


@dataclass(frozen=True)
class Position:
    """One partition as the group stands on it."""

    committed: int | None
    """The next offset the group will process; None: the group never committed here."""
    end: int
    """The offset the next message will get."""

    @property
    def waiting(self) -> int:
        """Messages on the partition the group has not processed yet."""
        return max(0, self.end - (self.committed or 0))


class GroupPositions:
    """Reads one group's positions on some topics; ``close()`` when done."""

    def __init__(self, client_kwargs: Mapping[str, Any], group: str) -> None:
        self._kwargs = dict(client_kwargs)
        self._group = group
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None

    async def read(self, topics: Iterable[str]) -> dict[Partition, Position]:
        """The group's position on each partition of ``topics`` (those that exist)."""
        if self._consumer is None or self._admin is None:
            self._admin = AIOKafkaAdminClient(**self._kwargs, client_id="gpuyield-lag")
            await self._admin.start()
            self._consumer = AIOKafkaConsumer(
                **self._kwargs,
                group_id=self._group,
                enable_auto_commit=False,
                client_id="gpuyield-lag",
            )
            await self._consumer.start()
        wanted = set(topics)
        described = await self._admin.describe_topics(None)  # all topics: creates none
        partitions = [
            TopicPartition(item["topic"], p["partition"])
            for item in described
            if item["topic"] in wanted
            for p in item["partitions"]
        ]
        if not partitions:
            return {}
        ends = await self._consumer.end_offsets(partitions)
        out: dict[Partition, Position] = {}
        for tp in partitions:
            committed = await self._consumer.committed(tp)
            out[(tp.topic, tp.partition)] = Position(committed, int(ends[tp]))
        return out

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()
        self._consumer = self._admin = None
