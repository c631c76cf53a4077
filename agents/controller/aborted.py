"""Volcano Jobs aborted by something other than gpuyield, and their adoption.

gpuyield's own yields leave a trace in the decider's records: the yield's
pods are ``leaving/<job>`` while its commands run, and the job is
``suspended/<job>`` once acknowledged. A Job whose ``status.state.phase`` is
``Aborting`` or ``Aborted`` with neither, nor a yield command still issued, was
aborted by someone else: an operator's ``vcctl job suspend``, a Command from
another tool, a Job policy (``action: AbortJob`` on an exit code), or a yield
of gpuyield's whose acknowledgement never came.

``gpuyield status`` lists them ("aborted outside gpuyield"). With
``adopt_aborted_jobs`` the decider adopts them: each gets a ``suspended/<job>``
record marked ``adopted`` and from then on waits for GPUs and resumes like a
job gpuyield suspended (the same backoff, the same "no heavier job waits"
rule). Off by default: a job aborted by hand was usually meant to stay so.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyield.agents.controller.records import (
    SUSPENDED,
    VJOB,
    YIELD,
    Overlay,
    SuspendedRecord,
    YieldRecord,
)

ABORTED_PHASES = frozenset({"Aborting", "Aborted"})


@dataclass(frozen=True, slots=True)
class AbortedJob:
    name: str  # namespace/name
    phase: str
    queue: str
    adopted: bool


def _yielding(records: Overlay) -> frozenset[str]:
    """Jobs with a yield of gpuyield's not done yet (issued, or its pods still leaving)."""
    return frozenset(
        y.job for _, y in records.typed_prefix(YIELD, YieldRecord) if y.done_at is None
    )


def outside_gpuyield(records: Overlay) -> list[AbortedJob]:
    """Aborted Volcano Jobs with no yield of gpuyield's behind them (adopted ones included)."""
    busy: frozenset[str] | None = None
    out = []
    for key, vjob in records.with_prefix(VJOB):
        if vjob.get("phase") not in ABORTED_PHASES:
            continue
        name = key[len(VJOB) :]
        suspended = records.typed(SUSPENDED + name, SuspendedRecord)
        if suspended is not None and not suspended.adopted:
            continue  # gpuyield's own suspension
        if busy is None:
            busy = _yielding(records)
        if name in busy:
            continue  # gpuyield's yield is under way
        out.append(AbortedJob(name, vjob["phase"], vjob.get("queue", ""), suspended is not None))
    return out


def to_adopt(records: Overlay) -> list[AbortedJob]:
    """The aborted jobs gpuyield does not yet treat as suspended."""
    return [job for job in outside_gpuyield(records) if not job.adopted]


def adopted_record(now: float) -> SuspendedRecord:
    """The ``suspended/<job>`` record of an adopted job (no decision, no checkpoint known)."""
    return SuspendedRecord(since=now, decision="", adopted=True)
