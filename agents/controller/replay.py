"""Replay: the decider's pure step re-run over the recorded inputs, in their recorded order.

``gpuyield replay`` reads a run's record (Kafka or the archive) and hands it
here as a ``RunRecord``: the decider's journal, its input messages by position,
and the decisions and commands it published. This module is pure: it feeds
each journalled input to ``decider.step`` on a table of its own, the way the
worker does, and compares each derived decision and command with the recorded
one, byte for byte (``compare``), or reports what another policy would have
evicted instead (``what_if``).

Where the state comes from: a replay always starts from an empty table, at
the journal's first entry, which must be a ``start`` with no records (a new
deployment); a record that begins mid-history is refused (``ReplayError``),
since no replay can rebuild the table from it. Every later ``start`` (a
restart, a new owner) carries the digest of the table the worker recovered:
the replay checks it rebuilt the same one. A range (``Window``) selects what
is compared and reported; the steps before it still run, to rebuild the
state, and the steps after it do not.

Without a journal (a log of inputs only, such as ``gpuyield simulate
--archive`` writes), the inputs are taken in the order of their own times,
and the output says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import (
    INPUT_MODELS,
    InputRejected,
    message_time,
    step,
)
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.journal import table_digest
from gpuyield.agents.controller.records import Record
from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import (
    Decision,
    JournalEntry,
    RoundOutcome,
    YieldCommand,
)

Position = tuple[str, int, int]
"""A message's topic (as recorded, with any prefix), partition and offset."""


class ReplayError(ValueError):
    """The record cannot be replayed; ``str()`` says what is missing or wrong."""


@dataclass(frozen=True)
class RunRecord:
    """What a run left behind, as ``gpuyield replay`` read it."""

    journal: Sequence[tuple[int, bytes | None]]
    """The journal's messages: (offset, value), in offset order."""
    inputs: Mapping[Position, bytes | None]
    """Every input message read, by position."""
    decisions: Sequence[bytes | None] = ()
    commands: Sequence[bytes | None] = ()
    prefix: str = ""
    """The deployment's topic prefix (``GPUYIELD_TOPIC_PREFIX``)."""


@dataclass(frozen=True)
class Window:
    """Which steps are compared: journal offsets and/or the inputs' journal times."""

    from_offset: int | None = None
    to_offset: int | None = None
    since: float | None = None
    until: float | None = None

    def before(self, offset: int, at: float) -> bool:
        return (self.from_offset is not None and offset < self.from_offset) or (
            self.since is not None and at < self.since
        )

    def after(self, offset: int, at: float) -> bool:
        return (self.to_offset is not None and offset > self.to_offset) or (
            self.until is not None and at > self.until
        )


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True)


Status = Literal["identical", "different", "derived-only", "recorded-only", "derived"]


class Compared(_Report):
    """One decision or command, derived and/or recorded, and how they compare."""

    kind: Literal["decision", "command"]
    id: str
    job: str = Field(description="The decision's demand, or the command's job.")
    at: float
    outcome: str = Field("", description="The decision's outcome, or the command's action.")
    status: Status
    diff: tuple[str, ...] = Field((), description="Field by field: path, recorded, derived.")


@dataclass
class Derivation:
    """What stepping through the record derived (``derive``)."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    commands: dict[str, YieldCommand] = field(default_factory=dict)
    steps: int = 0
    compared_steps: int = 0
    rejected: int = 0
    origins: set[str] = field(default_factory=set)
    """The inputs of the compared steps."""
    state_checks: int = 0
    state_mismatches: list[str] = field(default_factory=list)
    alerts: dict[str, int] = field(default_factory=dict)
    """Alerts the compared steps raised, by kind (an invalid-input one says the record is)."""
    journalled: bool = True
    config: ControllerConfig | None = None


class ReplayReport(_Report):
    journalled: bool = Field(description="False: no journal; inputs taken by their own times.")
    recorded: bool = Field(description="False: nothing recorded to compare; derived only.")
    steps: int
    compared_steps: int
    rejected_inputs: int
    state_checks: int
    state_mismatches: tuple[str, ...] = ()
    alerts: dict[str, int] = Field(
        default_factory=dict, description="Alerts the compared steps raised, by kind."
    )
    items: tuple[Compared, ...] = ()

    @property
    def differences(self) -> int:
        return len(self.state_mismatches) + sum(
            1 for i in self.items if i.status in ("different", "derived-only", "recorded-only")
        )


def _canonical(topic: str, prefix: str) -> str:
    return topic.removeprefix(prefix) if prefix else topic


def _order(record: RunRecord) -> list[tuple[int, JournalEntry]]:
    """The journal as entries, or the inputs by their own times when there is none."""
    if not record.journal:
        return _by_time(record)
    entries = []
    for offset, raw in record.journal:
        try:
            entries.append((offset, decode(JournalEntry, raw)))
        except MessageError as exc:
            raise ReplayError(f"journal entry at offset {offset} is unreadable: {exc}") from None
    first = entries[0][1]
    if first.start is None or first.start.records != 0:
        held = f"a table of {first.start.records} records" if first.start else "no start"
        raise ReplayError(
            f"the journal begins mid-history (offset {entries[0][0]}, {held}): no replay can "
            "rebuild the decider's table from there; replay a record that begins at the "
            "deployment's first start (the archive keeps it past Kafka's retention)"
        )
    return entries


def _by_time(record: RunRecord) -> list[tuple[int, JournalEntry]]:
    timed: list[tuple[float, str, int, int]] = []
    for (topic, partition, offset), raw in record.inputs.items():
        model = INPUT_MODELS.get(_canonical(topic, record.prefix))
        if model is None:
            continue
        try:
            at = message_time(decode(model, raw))
        except MessageError:
            at = 0.0  # unreadable: rejected in its place, it changes nothing
        timed.append((at, topic, partition, offset))
    timed.sort()
    return [
        (i, JournalEntry(topic=topic, partition=partition, offset=offset, at=at))
        for i, (at, topic, partition, offset) in enumerate(timed)
    ]


def derive(
    record: RunRecord,
    *,
    window: Window | None = None,
    config: ControllerConfig | None = None,
    adjust: Callable[[ControllerConfig], ControllerConfig] | None = None,
) -> Derivation:
    """Step through the record's inputs in their recorded order on an empty table.

    ``config`` is used where the journal names none (no journal); ``adjust``
    changes whatever configuration applies (a what-if). Raises
    ``ReplayError`` when the record cannot be replayed.
    """
    window = window or Window()
    entries = _order(record)
    out = Derivation(journalled=bool(record.journal))
    table: dict[str, Record] = {}
    current = config or ControllerConfig()
    index: RecordIndex | None = None  # kept next to the table, as the worker keeps it
    for offset, entry in entries:
        if window.after(offset, entry.at):
            break
        if entry.start is not None:
            if out.steps:  # a later start: the worker recovered a table; did we rebuild it?
                out.state_checks += 1
                digest = table_digest(table)
                if digest != entry.start.digest or len(table) != entry.start.records:
                    out.state_mismatches.append(
                        f"at journal offset {offset} the worker started on a table of "
                        f"{entry.start.records} records (digest {entry.start.digest[:12]}); "
                        f"the replay holds {len(table)} (digest {digest[:12]})"
                    )
            current = entry.start.config
        used = adjust(current) if adjust is not None else current
        out.config = used
        position = (entry.topic, entry.partition, entry.offset)
        if position not in record.inputs:
            raise ReplayError(
                f"the journal (offset {offset}) names {entry.origin}, which the record does not "
                "hold (past its topic's retention?)"
            )
        model = INPUT_MODELS.get(_canonical(entry.topic, record.prefix))
        if model is None:
            raise ReplayError(f"the journal (offset {offset}) names {entry.topic}: not an input")
        out.steps += 1
        compared = not window.before(offset, entry.at)
        if index is None or index.config != used:
            index = RecordIndex.build(table, used)
        try:
            message = decode(model, record.inputs[position])
            outcome = step(table, message, entry.origin, used, index=index)
        except (MessageError, InputRejected):
            out.rejected += 1  # the live decider dead-lettered it too, and changed nothing
            continue
        for key, value in outcome.writes.items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        index.apply(outcome.writes, table)
        if not compared:
            continue
        out.compared_steps += 1
        out.origins.add(entry.origin)
        for alert in outcome.alerts:
            out.alerts[alert.kind.value] = out.alerts.get(alert.kind.value, 0) + 1
        for decision in outcome.decisions:
            out.decisions.setdefault(decision.decision_id, decision)
        for command in outcome.commands:
            out.commands.setdefault(command.command_id, command)
    return out


def _recorded(
    raw: Iterable[bytes | None], model: type[Decision] | type[YieldCommand]
) -> dict[str, tuple[Any, bytes]]:
    found: dict[str, tuple[Any, bytes]] = {}
    for value in raw:
        if value is None:
            continue
        try:
            message = decode(model, value)
        except MessageError:
            continue  # the audit counts these; a replay compares what it can read
        key = message.decision_id if isinstance(message, Decision) else message.command_id
        found.setdefault(key, (message, value))
    return found


def diff(recorded: Any, derived: Any, path: str = "") -> list[str]:
    """Where two JSON documents differ: ``path: recorded -> derived``, leaves only."""
    if isinstance(recorded, dict) and isinstance(derived, dict):
        out: list[str] = []
        for key in list(recorded) + [k for k in derived if k not in recorded]:
            where = f"{path}.{key}" if path else str(key)
            if key not in derived:
                out.append(f"{where}: {_short(recorded[key])} -> (absent)")
            elif key not in recorded:
                out.append(f"{where}: (absent) -> {_short(derived[key])}")
            else:
                out.extend(diff(recorded[key], derived[key], where))
        return out
    if isinstance(recorded, list) and isinstance(derived, list) and len(recorded) == len(derived):
        return [
            line
            for i, (r, d) in enumerate(zip(recorded, derived, strict=True))
            for line in diff(r, d, f"{path}[{i}]")
        ]
    if recorded == derived and type(recorded) is type(derived):
        return []
    return [f"{path or '(document)'}: {_short(recorded)} -> {_short(derived)}"]


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compare(record: RunRecord, derivation: Derivation) -> ReplayReport:
    """Each derived decision and command against the recorded one, in decision time order."""
    decisions = _recorded(record.decisions, Decision)
    commands = _recorded(record.commands, YieldCommand)
    recorded_any = bool(decisions or commands)
    items: list[Compared] = []
    in_scope: set[str] = set(derivation.decisions)
    for decision_id, (decision, _) in decisions.items():
        if decision.origin in derivation.origins:
            in_scope.add(decision_id)
    for decision_id in sorted(in_scope, key=lambda d: _decision_key(d, derivation, decisions)):
        derived = derivation.decisions.get(decision_id)
        found = decisions.get(decision_id)
        items.append(_item("decision", decision_id, derived, found, recorded_any))
    command_ids = set(derivation.commands) | {
        command_id for command_id, (c, _) in commands.items() if c.decision_id in in_scope
    }
    for command_id in sorted(command_ids, key=lambda c: _command_key(c, derivation, commands)):
        derived_command = derivation.commands.get(command_id)
        found_command = commands.get(command_id)
        items.append(_item("command", command_id, derived_command, found_command, recorded_any))
    return ReplayReport(
        journalled=derivation.journalled,
        recorded=recorded_any,
        steps=derivation.steps,
        compared_steps=derivation.compared_steps,
        rejected_inputs=derivation.rejected,
        state_checks=derivation.state_checks,
        state_mismatches=tuple(derivation.state_mismatches),
        alerts=dict(sorted(derivation.alerts.items())),
        items=tuple(items),
    )


def _decision_key(
    decision_id: str, derivation: Derivation, recorded: Mapping[str, tuple[Any, bytes]]
) -> tuple[float, str]:
    found = derivation.decisions.get(decision_id) or recorded[decision_id][0]
    return (found.decided_at, decision_id)


def _command_key(
    command_id: str, derivation: Derivation, recorded: Mapping[str, tuple[Any, bytes]]
) -> tuple[float, str]:
    found = derivation.commands.get(command_id) or recorded[command_id][0]
    return (found.issued_at, command_id)


def _item(
    kind: Literal["decision", "command"],
    key: str,
    derived: Decision | YieldCommand | None,
    found: tuple[Any, bytes] | None,
    recorded_any: bool,
) -> Compared:
    subject = derived if derived is not None else found[0] if found is not None else None
    assert subject is not None
    if isinstance(subject, Decision):
        job, at = subject.demand, subject.decided_at
        outcome = subject.outcome.value if subject.outcome else ""
    else:
        job, at, outcome = subject.job, subject.issued_at, subject.action.value
    base: dict[str, Any] = {"kind": kind, "id": key, "job": job, "at": at, "outcome": outcome}
    if found is None:
        return Compared(**base, status="derived-only" if recorded_any else "derived")
    if derived is None:
        return Compared(**base, status="recorded-only")
    if encode(derived) == found[1]:
        return Compared(**base, status="identical")
    lines = diff(json.loads(found[1]), json.loads(encode(derived)))
    return Compared(
        **base, status="different", diff=tuple(lines) or ("(same fields, other bytes)",)
    )


# -- what-if -------------------------------------------------------------------


class Eviction(_Report):
    """One job evicted (or that would have been) for one preemptor."""

    job: str
    preemptor: str
    at: float
    lost_gpu_seconds: float
    rule: str


class WhatIf(_Report):
    """Another policy against the record: the evictions that change (open loop)."""

    open_loop: str = (
        "open loop: the inputs are the recorded ones, so the cluster's reaction to a changed "
        "decision (other pods leaving, other jobs placed) is not modelled; for that, run the "
        "closed loop: gpuyield simulate --from-archive DIR"
    )
    against: Literal["record", "replay"] = Field(
        description="What the changes are counted against: the recorded decisions, or (with "
        "nothing recorded) a replay under the recorded configuration."
    )
    baseline_evictions: int
    what_if_evictions: int
    spared: tuple[Eviction, ...] = Field(description="Evictions that would not have happened.")
    instead: tuple[Eviction, ...] = Field(description="Evictions that would have happened.")
    lost_gpu_seconds_spared: float
    lost_gpu_seconds_instead: float


def evictions(decisions: Iterable[Decision]) -> dict[tuple[str, str], Eviction]:
    """The victims of the decisions that evicted, by (preemptor, victim); the first kept."""
    found: dict[tuple[str, str], Eviction] = {}
    for decision in sorted(decisions, key=lambda d: (d.decided_at, d.decision_id)):
        if decision.plan is None or not decision.commands:
            continue
        if decision.outcome not in (None, RoundOutcome.YIELD):
            continue
        for victim in decision.plan.victims:
            found.setdefault(
                (decision.demand, victim.job),
                Eviction(
                    job=victim.job,
                    preemptor=decision.demand,
                    at=decision.decided_at,
                    lost_gpu_seconds=victim.lost_gpu_seconds,
                    rule=victim.reason,
                ),
            )
    return found


def what_if(
    record: RunRecord, baseline: Derivation, changed: Derivation, window: Window | None = None
) -> WhatIf:
    """The evictions ``changed`` (another policy) makes differently from the record.

    Counted against the recorded decisions of the compared steps when there
    are any, else against ``baseline`` (a replay under the recorded policy).
    """
    recorded = [d for d, _ in _recorded(record.decisions, Decision).values()]
    scoped = [d for d in recorded if d.origin in baseline.origins or d.origin == ""]
    base = evictions(scoped) if scoped else evictions(baseline.decisions.values())
    other = evictions(changed.decisions.values())
    spared = tuple(base[k] for k in base if k not in other)
    instead = tuple(other[k] for k in other if k not in base)
    return WhatIf(
        against="record" if scoped else "replay",
        baseline_evictions=len(base),
        what_if_evictions=len(other),
        spared=spared,
        instead=instead,
        lost_gpu_seconds_spared=sum(e.lost_gpu_seconds for e in spared),
        lost_gpu_seconds_instead=sum(e.lost_gpu_seconds for e in instead),
    )
