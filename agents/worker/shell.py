"""The decider agent's shell, outside Faust: one input's bytes to an outcome, applied and sent.

``app.build_app`` wires these to topics and tables; each is a plain function
(or a small class) over mappings and send callables, so its behaviour is
tested without a broker (``tests/worker/test_shell.py``):

- ``decide``: decode one message of a decider input topic and run the pure
  ``step``; a message that does not decode, that the core rejects, or that
  trips a bug becomes a dead-letter reason, never an exception;
- ``apply_writes``: an outcome's writes onto the table (``None`` deletes) and
  onto the table's ``DeciderIndex``, the decider's derived state kept next to it;
- ``publish_outcome``: what the outcome sends, in the one order that is
  safe: reservations (enforced, then published), decisions, commands, alerts.
  A hold must be in place before the yields that free its GPUs go out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, InputRejected, Outcome, Planner, step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import Writes
from gpuyield.agents.planner import plan
from gpuyield.agents.worker.frozen_heap import FrozenHeap
from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import Alert, Reservation
from gpuyield.schemas.record_encoding import KeptJson, encode_decision

log = logging.getLogger(__name__)

Observe = Callable[[Input, Outcome], None]
"""Told each step's input and outcome before the writes are applied (the worker's metrics)."""

Send = Callable[[bytes, bytes], Awaitable[Any]]
"""Put one (key, value) on a topic."""

EnforceReservations = Callable[[tuple[Reservation, ...]], Awaitable[None]]
"""Apply holds on the real scheduler (taints, tolerations) before anything else goes out."""


class TableView(Mapping[str, Any]):
    """The decider table as the core's ``Mapping[str, Record]`` (keys are stored as bytes)."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def __getitem__(self, key: str) -> Any:
        value = self.table.get(key.encode())
        if value is None:  # absent, or a deletion recovered from the changelog
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.table.get(key.encode()) is not None

    def __iter__(self) -> Iterator[str]:
        return (k.decode() for k, v in list(self.table.items()) if v is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class DeciderIndex:
    """The decider table's ``RecordIndex`` (``agents/controller/index.py``), kept by the
    worker next to the table so that a step does not rebuild the job views.

    Built from the table on the first step, and again on the first step after
    the worker's partitions moved (``reset``): the table may then have been
    recovered from its changelog, and only the table is the truth. Its snapshot
    models are built then too (``warm``), not by the first plan after a restart.
    With a ``heap``, the process's heap is frozen once they are built (and again
    at its interval), so that full collections stop walking them; let go on reset.
    """

    def __init__(self, config: ControllerConfig, heap: FrozenHeap | None = None) -> None:
        self.config = config
        self.heap = heap
        self.index: RecordIndex | None = None

    def of(self, records: Mapping[str, Any]) -> RecordIndex:
        if self.index is None:
            self.index = RecordIndex.build(records, self.config)
            self.index.warm(records)
            if self.heap is not None:
                self.heap.freeze()
        elif self.heap is not None:
            self.heap.refresh()
        return self.index

    def apply(self, writes: Writes, records: Mapping[str, Any]) -> None:
        if self.index is not None:
            self.index.apply(writes, records)

    def reset(self) -> None:
        self.index = None
        if self.heap is not None:
            self.heap.release()


def decide(
    table: Any,
    model: type[Input],
    value: bytes | None,
    origin: str,
    config: ControllerConfig,
    *,
    planner: Planner = plan,
    observe: Observe | None = None,
    index: DeciderIndex | None = None,
) -> Outcome | str:
    """The outcome of one input message, or why it goes to the dead-letter topic.

    ``observe`` (metrics) sees the parsed input and its outcome; its failure is
    logged and changes nothing. ``index``: the table's, which ``apply_writes``
    must then be given too.
    """
    try:
        parsed = decode(model, value)
        records = TableView(table)
        kept = index.of(records) if index is not None else None
        outcome = step(records, parsed, origin, config, planner=planner, index=kept)
    except (MessageError, InputRejected) as exc:
        return str(exc)
    except Exception as exc:  # a bug must not stop the controller: keep the input
        log.exception("decider failed on %s", origin)
        return f"internal error ({type(exc).__name__}): {exc}"
    if observe is not None:
        try:
            observe(parsed, outcome)
        except Exception:
            log.exception("could not observe the outcome of %s", origin)
    return outcome


def apply_writes(
    table: MutableMapping[bytes, Any], writes: Writes, index: DeciderIndex | None = None
) -> None:
    """Assign each written record to the table (Faust persists only assigned values),
    and follow them in the table's ``index``."""
    for key, value in writes.items():
        raw_key = key.encode()
        if value is None:
            if raw_key in table:
                del table[raw_key]
        else:
            table[raw_key] = value
    if index is not None:
        index.apply(writes, TableView(table))


@dataclass(frozen=True)
class OutcomeSinks:
    """Where an outcome's messages go, one send per topic.

    ``kept`` holds the JSON of the snapshot models the decision records
    carried, so the next record encodes only the models that are new
    (``schemas.record_encoding``): one per worker, for as long as it runs.
    """

    reservations: Send
    decisions: Send
    commands: Send
    alerts: Send
    kept: KeptJson = field(default_factory=KeptJson)


def outgoing(
    outcome: Outcome, sinks: OutcomeSinks
) -> Iterator[tuple[Send, BaseModel, bytes, bytes]]:
    """Each message of ``outcome`` with its sink, key and bytes, in sending order
    (reservations, decisions, commands, alerts), each encoded when reached: what
    ``publish_outcome`` sends, and what the decider's bench times as the worker's."""
    for held in outcome.reservations:
        yield sinks.reservations, held, held.job.encode(), encode(held)
    for decision in outcome.decisions:
        yield (
            sinks.decisions,
            decision,
            decision.demand.encode(),
            encode_decision(decision, sinks.kept),
        )
    for command in outcome.commands:
        yield sinks.commands, command, command.node.encode(), encode(command)
    for alert in outcome.alerts:
        yield sinks.alerts, alert, (alert.job or alert.kind.value).encode(), encode(alert)


async def publish_outcome(
    outcome: Outcome, sinks: OutcomeSinks, *, enforce: EnforceReservations | None = None
) -> None:
    """Send ``outcome``'s messages: reservations, decisions, commands, alerts, in that order.

    ``enforce`` is the one place where holds are applied on the scheduler: it
    runs first and must finish before any command can free a GPU.
    """
    if enforce is not None and outcome.reservations:
        await enforce(outcome.reservations)
    for send, message, key, value in outgoing(outcome, sinks):
        if isinstance(message, Alert):
            log.warning("alert %s: %s", message.kind.value, message.message)
        await send(key, value)
    if outcome.decisions:
        log.info(
            "decided for %s: %d command(s)",
            ", ".join(d.demand for d in outcome.decisions),
            len(outcome.commands),
        )
