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

from collections.abc import Iterable
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


def _yielding(records: Overlay, yields: Iterable[str] | None) -> frozenset[str]:
    """Jobs with a yield of gpuyield's not done yet (issued, or its pods still leaving)."""
    found: Iterable[YieldRecord | None]
    if yields is None:
        found = (y for _, y in records.typed_prefix(YIELD, YieldRecord))
    else:
        found = (records.typed(YIELD + tail, YieldRecord) for tail in yields)
    return frozenset(y.job for y in found if y is not None and y.done_at is None)


def outside_gpuyield(
    records: Overlay,
    *,
    vjobs: Iterable[str] | None = None,
    yields: Iterable[str] | None = None,
) -> list[AbortedJob]:
    """Aborted Volcano Jobs with no yield of gpuyield's behind them (adopted ones included).

    ``vjobs``: the only Volcano Jobs (``namespace/name``) that may be aborted, and
    ``yields``: the only yields (key tails) that may not be done, where the caller
    keeps them (the decider's index: every input used to walk every Volcano Job, 30,000
    at 10,000 nodes, and while an adopted job waited, every yield); None: all.
    """
    busy: frozenset[str] | None = None
    out = []
    if vjobs is None:
        found = ((key[len(VJOB) :], vjob) for key, vjob in records.with_prefix(VJOB))
    else:
        found = ((name, records.get(VJOB + name)) for name in sorted(set(vjobs)))
    for name, vjob in found:
        if vjob is None or vjob.get("phase") not in ABORTED_PHASES:
            continue
        suspended = records.typed(SUSPENDED + name, SuspendedRecord)
        if suspended is not None and not suspended.adopted:
            continue  # gpuyield's own suspension
        if busy is None:
            busy = _yielding(records, yields)
        if name in busy:
            continue  # gpuyield's yield is under way
        out.append(AbortedJob(name, vjob["phase"], vjob.get("queue", ""), suspended is not None))
    return out


def to_adopt(
    records: Overlay,
    *,
    vjobs: Iterable[str] | None = None,
    yields: Iterable[str] | None = None,
) -> list[AbortedJob]:
    """The aborted jobs gpuyield does not yet treat as suspended (``outside_gpuyield``'s
    ``vjobs`` and ``yields``)."""
    found = outside_gpuyield(records, vjobs=vjobs, yields=yields)
    return [job for job in found if not job.adopted]


def adopted_record(now: float) -> SuspendedRecord:
    """The ``suspended/<job>`` record of an adopted job (no decision, no checkpoint known)."""
    return SuspendedRecord(since=now, decision="", adopted=True)
