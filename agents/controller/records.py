"""The decider's state: one typed record per key, stored as JSON in its Faust table.

One record per watched object, per job's progress, per yield, per demand,
and a few cluster-wide ones. Each kind of record has one frozen model below
(``KINDS`` maps each key prefix to it): the table holds the model's JSON
(``RecordModel.dump``), and the step reads it back through the model, so a
field cannot be dropped on the way (every model forbids unknown fields, and
``tests/controller/test_records.py`` round-trips each one through JSON).

A step never changes a record in place: it returns the records it writes
(``None`` deletes), the worker assigns them to the table (Faust persists
only reassigned values) and the next step reads them back. ``Overlay`` lets
a step read its own writes before they land, parsing each record once.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

Record = Any  # a JSON-able value: what the table stores (a record's ``dump``)
Writes = dict[str, Record | None]

NODE = "node/"
POD = "pod/"
GROUP = "group/"
VJOB = "vjob/"
QUEUE = "queue/"
PROGRESS = "progress/"
EVICTIONS = "evictions/"
YIELD = "yield/"
SUSPENDED = "suspended/"
RESERVATION = "reservation/"
DEMAND = "demand/"
ALERT = "alert/"
DANGLING = "dangling/"
GUARD = "guard"
CLOCK = "clock"
VOLCANO_EVICTING = "volcano-evicting"


class RecordModel(BaseModel):
    """A record as the decider reads and writes it: frozen, and nothing unknown accepted."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# -- watched objects (kube_facts translates the API objects into these) -------


class NodeRecord(RecordModel):
    gpus: int = Field(ge=0)
    schedulable: bool
    rack: str | None = None
    nvlink: str | None = None


class SchedulerEviction(RecordModel):
    """A scheduler's eviction mark on a pod (``volcano_evictions.eviction_mark``)."""

    scheduler: str
    action: str
    """Volcano's reason: ``preempt``, ``reclaim``, ``shuffle``, ..."""


class PodRecord(RecordModel):
    namespace: str
    job: str | None
    group: str | None
    gpus: int = Field(ge=0)
    node: str | None
    phase: str
    terminating: bool
    unschedulable: bool
    priority: int | None = None
    priority_class: str | None = None
    started_at: float | None = None
    preemptable: bool = True
    uid: str | None = None
    evicted: SchedulerEviction | None = None
    """Marked by a scheduler evicting it (Volcano's preempt/reclaim), not by gpuyield."""


class GroupRecord(RecordModel):
    """A PodGroup."""

    namespace: str
    job: str
    queue: str
    min_member: int | None
    priority_class: str | None = None
    phase: str
    unschedulable: bool
    created_at: float | None = None
    preemptable: bool = True
    sla_s: float | None = None
    """``gpuyield.io/sla-seconds``: finish within this long of creation."""


class TaskRecord(RecordModel):
    name: str
    replicas: int = Field(ge=0)
    gpus_per_pod: int = Field(ge=0)


class VJobRecord(RecordModel):
    """A Volcano Job."""

    namespace: str
    queue: str
    min_available: int | None
    priority_class: str | None = None
    phase: str
    tasks: tuple[TaskRecord, ...]
    created_at: float | None = None
    preemptable: bool = True
    uid: str | None = None
    sla_s: float | None = None
    """``gpuyield.io/sla-seconds``: finish within this long of creation."""


class QueueRecord(RecordModel):
    weight: float
    capability: int | None = Field(ge=0)
    guarantee: int = Field(ge=0)
    reclaimable: bool
    parent: str | None = None
    capability_lists: tuple[str, ...] = ()
    """The resource names ``spec.capability`` lists: a list without GPUs is a trap
    (``queue_capability``)."""


# -- what the decider learns and decides ----------------------------------------


class ProgressRecord(RecordModel):
    """A job's progress summary (``JobProgress`` without its envelope)."""

    job: str
    step: int = Field(ge=0)
    progress: float = Field(ge=0, le=1)
    step_rate: float = Field(0.0, ge=0)
    last_checkpoint_step: int | None = None
    last_checkpoint_at: float | None = None
    checkpoint_interval_s: float | None = None
    first_seen_at: float
    updated_at: float


class EvictionsRecord(RecordModel):
    """When a job was evicted, inside the eviction window (older times are dropped)."""

    at: tuple[float, ...]


CommandStatus = Literal["issued", "acked", "expired"]


class CommandRecord(RecordModel):
    """One yield command of a yield (one node's pods), as part of its ``YieldRecord``."""

    command_id: str
    node: str
    pods: tuple[str, ...]
    status: CommandStatus = "issued"
    outcome: str | None = None
    acked_at: float | None = None


class YieldRecord(RecordModel):
    """One victim's yield for one decision; ``agents.controller.yields.Yield`` is its logic."""

    decision: str
    preemptor: str | None
    job: str
    whole_job: bool
    grace_s: float
    issued_at: float
    deadline: float
    commands: tuple[CommandRecord, ...]
    settled_at: float | None = None
    done_at: float | None = None


class SuspendedRecord(RecordModel):
    """A job gpuyield suspended, until Volcano runs it again."""

    since: float
    decision: str
    checkpoint_step: int | None = None
    nodes: tuple[str, ...] = ()
    """Where it yielded: the nodes a resume may be addressed to."""
    resume_issued: float | None = None
    resume_node: str | None = None
    capacity_since: float | None = None
    """Since when, without a break, the GPUs it needs were free and it did not resume."""
    adopted: bool = False
    """Aborted by something else and adopted (``adopt_aborted_jobs``), not yielded by gpuyield."""


class ReservationRecord(RecordModel):
    """GPUs held for a preemptor or a resumed job (see ``Outcome.reservations``)."""

    nodes: dict[str, int]
    until: float
    decision: str = ""


class DemandRecord(RecordModel):
    """One preemptor's round (``DemandLedger``'s entries for it)."""

    victims: tuple[str, ...] = ()
    deadline: float | None = None
    decided_at: float | None = None
    last_round: float | None = None
    failures: int = Field(0, ge=0)
    """Rounds in a row that found no plan: the retry backoff's exponent."""
    noted: str | None = None
    """The outcome of the demand's last recorded round (a ``RoundOutcome`` value): a
    skip for the reason already recorded is not recorded again on every input."""


class AlertRecord(RecordModel):
    """An alert raised: kept so that a replay does not raise it again (see ``decider``)."""

    kind: str
    raised_at: float
    job: str | None = None
    resolved_at: float | None = None
    """When its incident ended (the ``resolved`` alert was sent); None while it is open."""
    severity: str = "warning"
    subject: tuple[str, ...] = ()
    """What the condition is about besides the job (a queue, a command, the gangs):
    what ``incidents.ended`` looks at."""
    incident: int = Field(0, ge=0)
    """How many incidents of this condition came before (``incidents.incident_id``)."""


class DanglingRecord(RecordModel):
    """A running gang seen below its minimum since ``since`` (``incidents.dangling``)."""

    since: float


class VolcanoEvictingRecord(RecordModel):
    """The newest incident of pods evicted by a scheduler beside gpuyield
    (``volcano_evictions``): open while ``last_at`` is recent."""

    since: float
    last_at: float
    pods: int = Field(ge=0)
    jobs: tuple[str, ...] = ()
    """The first jobs it hit (``volcano_evictions.JOBS_KEPT``)."""
    actions: tuple[str, ...] = ()
    schedulers: tuple[str, ...] = ()


class EvictionEntry(RecordModel):
    victim: str
    by: str | None
    at: float


class GuardRecord(RecordModel):
    """The ``LivelockGuard``'s memory, pruned to what its windows can still use."""

    evictions: tuple[EvictionEntry, ...] = ()
    resumed_at: dict[str, float] = Field(default_factory=dict)
    reported: dict[str, float] = Field(default_factory=dict)


class ClockRecord(RecordModel):
    """The decider's time, moved by the rules of ``clock`` (forward; back only to repair)."""

    now: float
    tick: float | None = None
    """The newest tick's time: other inputs may take the clock at most
    ``max_clock_skew_s`` beyond it (``clock``)."""


KINDS: dict[str, type[RecordModel]] = {
    NODE: NodeRecord,
    POD: PodRecord,
    GROUP: GroupRecord,
    VJOB: VJobRecord,
    QUEUE: QueueRecord,
    PROGRESS: ProgressRecord,
    EVICTIONS: EvictionsRecord,
    YIELD: YieldRecord,
    SUSPENDED: SuspendedRecord,
    RESERVATION: ReservationRecord,
    DEMAND: DemandRecord,
    ALERT: AlertRecord,
    DANGLING: DanglingRecord,
    GUARD: GuardRecord,
    CLOCK: ClockRecord,
    VOLCANO_EVICTING: VolcanoEvictingRecord,
}
"""Every key prefix and the model of its records."""


def model_of(key: str) -> type[RecordModel]:
    """The model of the record under ``key``; KeyError for a key no kind owns."""
    for prefix, model in KINDS.items():
        if key == prefix or (prefix.endswith("/") and key.startswith(prefix)):
            return model
    raise KeyError(key)


def load(key: str, raw: Record) -> RecordModel:
    """The record under ``key``, read through its model (ValidationError when it does not fit)."""
    return model_of(key).model_validate(raw)


M = TypeVar("M", bound=RecordModel)


class KeyIndex(Protocol):
    """What an ``Overlay`` asks of the index kept next to its base (``index.RecordIndex``)."""

    parsed: dict[str, tuple[Record, RecordModel]]

    def sorted_keys(self, prefix: str) -> list[str]: ...

    def cached(self, key: str) -> bool: ...


class Overlay(Mapping[str, Record]):
    """``base`` with ``writes`` applied on top, without copying ``base``.

    Raw access (``[]``, ``get``) gives the stored JSON; ``typed`` and
    ``typed_prefix`` give the records' models, each parsed once per step.
    With the ``index`` of ``base``, prefixes are looked up in its sorted keys
    (not by sorting the base), and parsed records are kept across steps while
    the base holds the same value.
    """

    def __init__(
        self, base: Mapping[str, Record], writes: Writes, index: KeyIndex | None = None
    ) -> None:
        self.base = base
        self.writes = writes
        self.index = index
        self._base_keys: list[str] | None = None
        self._parsed: dict[str, tuple[Record, RecordModel]] = {}

    def __getitem__(self, key: str) -> Record:
        if key in self.writes:
            value = self.writes[key]
            if value is None:
                raise KeyError(key)
            return value
        return self.base[key]

    def get(self, key: str, default: Record | None = None) -> Record | None:
        # ``Mapping.get`` goes through ``[]`` and a KeyError for every absent key:
        # the snapshot asks for each job's progress and evictions, most have none.
        if key in self.writes:
            value = self.writes[key]
            return default if value is None else value
        return self.base.get(key, default)

    def __iter__(self) -> Iterator[str]:
        for key in self.base:
            if key not in self.writes:
                yield key
        for key, value in self.writes.items():
            if value is not None:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        if key in self.writes:
            return self.writes[key] is not None
        return key in self.base

    def typed(self, key: str, model: type[M]) -> M | None:
        """The record under ``key`` as ``model``, or None when there is none."""
        raw = self.get(key)
        if raw is None:
            return None
        index = self.index
        parsed = index.parsed if index is not None and index.cached(key) else self._parsed
        cached = parsed.get(key)
        if cached is not None and cached[0] is raw:
            value = cached[1]
        else:
            value = model.model_validate(raw)
            parsed[key] = (raw, value)
        assert isinstance(value, model)
        return value

    def keys_with_prefix(self, prefix: str) -> list[str]:
        """Every live key that starts with ``prefix``, in key order."""
        if self.index is not None:
            found = self.index.sorted_keys(prefix)
        else:
            if self._base_keys is None:
                # One pass over the (possibly large, table-backed) base per step;
                # every prefix lookup after that is a bisection.
                self._base_keys = sorted(self.base)
            base = self._base_keys
            start = bisect.bisect_left(base, prefix)
            stop = bisect.bisect_left(base, prefix + "\U0010ffff")
            found = base[start:stop]
        written = [k for k in self.writes if k.startswith(prefix)]
        if not written:
            return list(found)
        keys = {k for k in found if k not in self.writes}
        keys.update(k for k in written if self.writes[k] is not None)
        return sorted(keys)

    def with_prefix(self, prefix: str) -> Iterator[tuple[str, Record]]:
        """Every live record whose key starts with ``prefix``, in key order (raw JSON)."""
        for key in self.keys_with_prefix(prefix):
            yield key, self[key]

    def typed_prefix(self, prefix: str, model: type[M]) -> Iterator[tuple[str, M]]:
        """Every live record under ``prefix`` as ``model``, with the key's tail, in key order."""
        for key in self.keys_with_prefix(prefix):
            value = self.typed(key, model)
            if value is not None:
                yield key[len(prefix) :], value
