"""The decider's reservations, as the demo's simulated Volcano honours them.

On a real cluster a hold becomes a ``NoSchedule`` taint on each held node and
a matching toleration on the preemptor's pods, and Volcano's predicates
plugin keeps every other pod off the node. The demo's cluster does the same
through the one allocate model (``allocate.place`` with ``Holding.NODE``):

- ``Holds`` is the pure part: it folds ``Reservation`` messages (``held``
  adds or replaces a job's nodes, ``released`` drops them) and answers which
  nodes are held for whom at ``now``; a hold past its ``until`` is gone, as
  the taint reconciler removes an expired one, and so is the hold of a job
  that was placed (the reconciler removes the taint once the preemptor's
  pods are bound);
- ``ReservationFeed`` reads ``gpuyield.reservations`` **up to its end** each
  time it is asked. The decider publishes a hold before the yield commands
  that free its GPUs, and the cluster asks after it has reaped the pods that
  left and before it places anything; so every hold published before those
  pods left is seen, however slow the machine: wall-clock timing does not
  decide who gets the freed GPUs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from gpuyield.schemas.decoding import MessageError, decode
from gpuyield.schemas.messages import Reservation, ReservationState
from gpuyield.streams.topics import RESERVATIONS

log = logging.getLogger(__name__)


class ReservationSource(Protocol):
    async def read_to_end(self) -> Sequence[Reservation]:
        """Every reservation published since the last call, up to the topic's end now."""
        ...


@dataclass(frozen=True, slots=True)
class Hold:
    nodes: Mapping[str, int]
    until: float


@dataclass(slots=True)
class Holds:
    """The active holds: job -> the nodes held for it, until when."""

    by_job: dict[str, Hold] = field(default_factory=dict)

    def apply(self, reservations: Iterable[Reservation]) -> None:
        for r in reservations:
            if r.state is ReservationState.HELD:
                self.by_job[r.job] = Hold(dict(r.nodes), r.until)
            else:
                self.by_job.pop(r.job, None)

    def placed(self, job: str) -> bool:
        """The preemptor's pods are bound: its taint comes off (True if it held any)."""
        return self.by_job.pop(job, None) is not None

    def active(self, now: float) -> dict[str, dict[str, int]]:
        """Node -> job -> GPUs held, for the holds still in force at ``now``."""
        for job in [j for j, hold in self.by_job.items() if hold.until <= now]:
            log.info("hold for %s expired: its nodes are open again", job)
            del self.by_job[job]
        out: dict[str, dict[str, int]] = {}
        for job, hold in sorted(self.by_job.items()):
            for node, gpus in hold.nodes.items():
                out.setdefault(node, {})[job] = gpus
        return out


class ReservationFeed:
    """``gpuyield.reservations`` from its beginning, read to its end on every call."""

    def __init__(self, *, kafka: dict[str, Any], prefix: str = "") -> None:
        self._kafka = kafka
        self._topic = prefix + RESERVATIONS
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(**self._kafka, group_id=None, enable_auto_commit=False)
        await consumer.start()
        self._consumer = consumer
        await consumer.topics()  # the metadata, so the partitions are known
        self._partitions = [
            TopicPartition(self._topic, p)
            for p in sorted(consumer.partitions_for_topic(self._topic) or {0})
        ]
        consumer.assign(self._partitions)
        await consumer.seek_to_beginning(*self._partitions)

    async def read_to_end(self) -> list[Reservation]:
        consumer = self._consumer
        assert consumer is not None, "start() first"
        ends = await consumer.end_offsets(self._partitions)
        out: list[Reservation] = []
        while await self._behind(consumer, ends):
            batches = await consumer.getmany(*self._partitions, timeout_ms=200)
            for tp, records in batches.items():
                for record in records:
                    if record.value is None:
                        continue
                    try:
                        out.append(decode(Reservation, record.value))
                    except MessageError as exc:
                        # Not a hold anyone can honour; the decider's own copy is the record.
                        log.warning("unreadable reservation at %s@%d: %s", tp, record.offset, exc)
        return out

    async def _behind(self, consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
        for tp in self._partitions:
            if await consumer.position(tp) < ends[tp]:
                return True
        return False

    async def stop(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            self._consumer = None
