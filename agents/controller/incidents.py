"""Incidents: when an alert's condition holds, when it has ended, and the id of each one.

An alert kind is either an **event** (something happened: a yield was
hard-killed, a livelock was detected) or a **condition** that lasts and can
end (a queue is misconfigured until somebody fixes it). A condition's alert
is raised once per incident (``firing``) and, when the condition is found
over, sent once more under the same id as ``resolved``. Both are decided
here from the decider's records alone, so they are as pure and replayable as
the rest of the step.

The id of an incident is the alert's base id (a uuid5 of what it is about)
for the first one; if the same condition comes back after it was resolved,
the n-th incident gets ``uuid5(base, "incident-n")``. Subscribers that key on
``(alert_id, state)`` therefore see a recurrence as a new incident, and a
replay of the same input gives the same ids.

Two conditions are detected here, on ticks, from the job views:

- ``checkpoint-stale``: a preemptable running job whose newest checkpoint (or,
  if later, the start of this run: a resumed job starts from its checkpoint) is
  older than ``checkpoint_stale_factor`` of its checkpoint intervals, so a
  yield would lose more than its owner planned for;
- ``pending-past-sla``: a gang that has waited (pending, not placed) past its
  SLA budget: its own (``gpuyield.io/sla-seconds``) where it has one, else
  ``pending_sla_s`` for a gang of priority at least ``sla_priority``.

``sla-at-risk`` (raised by the decider when a demand has used its share of
its SLA budget) ends like ``pending-past-sla``: when the job is placed or gone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuyield.agents.controller import cluster, queue_capability
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.records import (
    GROUP,
    POD,
    PROGRESS,
    QUEUE,
    SUSPENDED,
    VOLCANO_EVICTING,
    YIELD,
    AlertRecord,
    GroupRecord,
    Overlay,
    PodRecord,
    ProgressRecord,
    SuspendedRecord,
    VolcanoEvictingRecord,
    YieldRecord,
)
from gpuyield.schemas import JobState
from gpuyield.schemas.messages import AlertKind

ID_NAMESPACE = uuid.UUID("0b8f2d51-6a43-4c57-9a0e-7d3c2f1e4b88")

CONDITIONS: frozenset[AlertKind] = frozenset(
    {
        AlertKind.DEMAND_UNSERVABLE,
        AlertKind.RESUME_STARVED,
        AlertKind.YIELD_DEADLINE_MISSED,
        AlertKind.INVALID_INPUT,
        AlertKind.QUEUE_MISCONFIGURED,
        AlertKind.GANG_DEADLOCK,
        AlertKind.CHECKPOINT_STALE,
        AlertKind.PENDING_PAST_SLA,
        AlertKind.SLA_AT_RISK,
        AlertKind.DANGLING_GANG,
        AlertKind.VOLCANO_EVICTING,
    }
)
"""Kinds whose alerts are resolved when their condition ends; the others are events."""

PodsOf = Callable[[str], Iterable[str]]
"""A job's pods, as the key tails of their records (``namespace/name``)."""

GroupsOf = Callable[[str], Iterable[str]]
"""A job's PodGroups, as the key tails of their records (``namespace/name``), in key order."""

CONDITION_VALUES: frozenset[str] = frozenset(kind.value for kind in CONDITIONS)


def incident_id(base: str, incident: int) -> str:
    """The alert id of the ``incident``-th occurrence (0: the first) of condition ``base``."""
    if incident == 0:
        return base
    return str(uuid.uuid5(ID_NAMESPACE, f"{base}|incident-{incident}"))


@dataclass(frozen=True, slots=True)
class Seen:
    """What the step saw that the rules below need besides the records."""

    views: Mapping[str, cluster.JobView]
    snapshot_ok: bool = False
    """A snapshot was built and validated in this step (the invalid-input test)."""
    deadlocked: frozenset[str] = field(default_factory=frozenset)
    """Gangs that hold part of their minimum now (``stuck_gangs``)."""
    pods_of: PodsOf | None = None
    """Each job's pods, where the caller keeps them (the decider's index): a job's run
    start is then read from its own pods, not from every pod."""
    _starts: dict[str, float] = field(default_factory=dict, compare=False)
    _started: list[bool] = field(default_factory=list, compare=False)

    def run_started(self, job: str, records: Overlay) -> float | None:
        """``run_starts``'s answer for ``job``, the pods read once however many ask."""
        if self.pods_of is not None:
            view = self.views.get(job)
            if view is None:
                return None
            return run_starts(records, {job: view}, self.pods_of).get(job)
        if not self._started:
            self._starts.update(run_starts(records, self.views))
            self._started.append(True)
        return self._starts.get(job)


def ended(
    record: AlertRecord, records: Overlay, seen: Seen, now: float, config: ControllerConfig
) -> bool:
    """True when the condition ``record``'s alert was raised for holds no more."""
    kind = AlertKind(record.kind)
    job = record.job
    if kind is AlertKind.DEMAND_UNSERVABLE:
        view = seen.views.get(job or "")
        return view is None or not (view.waiting and view.unschedulable)
    if kind is AlertKind.RESUME_STARVED:
        suspended = records.typed(SUSPENDED + (job or ""), SuspendedRecord)
        return suspended is None or suspended.resume_issued is not None
    if kind is AlertKind.YIELD_DEADLINE_MISSED:
        return _acked_or_gone(records, job or "", record.subject)
    if kind is AlertKind.INVALID_INPUT:
        return seen.snapshot_ok
    if kind is AlertKind.QUEUE_MISCONFIGURED:
        (name,) = record.subject or ("",)
        queue = records.get(QUEUE + name)
        return queue is None or not queue_capability.lacks_gpu(queue)
    if kind is AlertKind.GANG_DEADLOCK:
        return not set(record.subject) <= seen.deadlocked
    if kind is AlertKind.CHECKPOINT_STALE:
        view = seen.views.get(job or "")
        if view is None:
            return True
        factor = config.checkpoint_stale_factor
        started = seen.run_started(view.name, records)
        return stale_checkpoint(view, records, now, factor, started) is None
    if kind in (AlertKind.PENDING_PAST_SLA, AlertKind.SLA_AT_RISK):
        view = seen.views.get(job or "")
        return view is None or not pending(view)
    if kind is AlertKind.DANGLING_GANG:
        view = seen.views.get(job or "")
        return view is None or not dangling(view)
    if kind is AlertKind.VOLCANO_EVICTING:  # quiet since, or a newer incident (volcano_evictions)
        latest = records.typed(VOLCANO_EVICTING, VolcanoEvictingRecord)
        return (
            latest is None
            or (str(latest.since),) != record.subject
            or now - latest.last_at >= config.volcano_evicting_quiet_s
        )
    return False


def _acked_or_gone(records: Overlay, job: str, subject: tuple[str, ...]) -> bool:
    (command_id,) = subject or ("",)
    for _, record in records.typed_prefix(f"{YIELD}{job}/", YieldRecord):
        for command in record.commands:
            if command.command_id == command_id:
                return command.status == "acked" or record.done_at is not None
    return True  # forgotten: nothing is waiting on it any more


def stuck_gangs(views: Mapping[str, cluster.JobView]) -> frozenset[str]:
    """Gangs that hold part of their minimum and that Volcano cannot complete."""
    return frozenset(view.name for view in views.values() if stuck(view))


def stuck(view: cluster.JobView) -> bool:
    """``view``'s gang holds part of its minimum (not suspended)."""
    gang_min = len(view.pods) if view.min_available is None else view.min_available
    return view.state is not JobState.SUSPENDED and 0 < view.placed < gang_min


def dangling(view: cluster.JobView) -> bool:
    """A running gang with fewer pods placed than its minimum (pods lost and not replaced),
    other than one gpuyield is making yield."""
    return (
        view.state is JobState.RUNNING
        and view.min_available is not None
        and view.placed < view.min_available
        and not view.leaving
    )


def dangling_finding(view: cluster.JobView, since: float, now: float) -> Finding:
    return Finding(
        base_id_parts=("dangling-gang", view.name, str(since)),
        kind=AlertKind.DANGLING_GANG,
        job=view.name,
        message=(
            f"{view.name} runs {view.placed} of the {view.min_available} pods its gang needs "
            f"and has for {now - since:.0f} s: it holds GPUs and cannot make progress"
        ),
        severity="warning",
        details={
            "placed": view.placed,
            "min_available": view.min_available,
            "since": since,
            "queue": view.queue,
        },
    )


def pending(view: cluster.JobView) -> bool:
    """A gang waiting with none of its pods placed (pending-past-SLA, sla-at-risk)."""
    return view.state is JobState.PENDING and view.placed == 0 and bool(view.pods)


@dataclass(frozen=True, slots=True)
class Finding:
    """A condition found now: what ``_Step.alert`` needs to raise it."""

    base_id_parts: tuple[str, ...]
    kind: AlertKind
    job: str
    message: str
    severity: str
    details: dict[str, Any]
    subject: tuple[str, ...] = ()


def work_at_risk_since(
    view: cluster.JobView, records: Overlay
) -> tuple[float, float, ProgressRecord] | None:
    """Since when ``view``'s work is unsaved (its newest checkpoint, else its start), its
    checkpoint interval and its progress record; None for a job whose checkpoints cannot
    go stale (not running, not preemptable, or no checkpoint interval known)."""
    if view.state is not JobState.RUNNING or not view.preemptable:
        return None
    progress = records.typed(PROGRESS + view.name, ProgressRecord)
    if progress is None or not progress.checkpoint_interval_s:
        return None
    since = progress.last_checkpoint_at
    if since is None:
        since = view.started_at if view.started_at is not None else progress.first_seen_at
    return since, progress.checkpoint_interval_s, progress


def stale_checkpoint(
    view: cluster.JobView,
    records: Overlay,
    now: float,
    factor: float,
    run_started: float | None = None,
) -> Finding | None:
    """``checkpoint-stale`` for ``view``, or None when its checkpoints are recent enough.

    ``run_started`` is when the job's current pods started (``run_starts``): the work at
    risk is what this run did since its newest checkpoint, and a job that was suspended
    resumed from that checkpoint when its pods started, losing nothing while it waited.
    """
    at_risk = work_at_risk_since(view, records)
    if at_risk is None:
        return None
    since, interval, progress = at_risk
    if run_started is not None:
        since = max(since, run_started)
    age = now - since
    if age <= factor * interval:
        return None
    return Finding(
        base_id_parts=("checkpoint-stale", view.name, str(progress.first_seen_at)),
        kind=AlertKind.CHECKPOINT_STALE,
        job=view.name,
        message=(
            f"{view.name} checkpoints every {progress.checkpoint_interval_s:.0f} s but its "
            f"last {age:.0f} s of work are not checkpointed: a yield now would lose them"
        ),
        severity="warning",
        details={
            "last_checkpoint_at": progress.last_checkpoint_at,
            "checkpoint_interval_s": progress.checkpoint_interval_s,
            "age_s": age,
        },
    )


def run_starts(
    records: Overlay, views: Mapping[str, cluster.JobView], pods_of: PodsOf | None = None
) -> dict[str, float]:
    """When each running job's current run began: the first start among the pods it runs
    now (a resumed gang's pods all start anew). Read only when a job reports checkpoints.
    ``pods_of``: the key tails of each job's pods (``Seen.pods_of``); by default every pod
    is read and its job found from its labels."""
    wanted = {
        name
        for name, view in views.items()
        if view.state is JobState.RUNNING and PROGRESS + name in records
    }
    out: dict[str, float] = {}
    if not wanted:
        return out
    if pods_of is not None:
        for name in wanted:
            for tail in pods_of(name):
                member = records.typed(POD + tail, PodRecord)
                if member is None or member.started_at is None:
                    continue
                if member.node is None or member.terminating:
                    continue
                out[name] = min(out.get(name, member.started_at), member.started_at)
        return out
    for _, pod in records.typed_prefix(POD, PodRecord):
        if pod.started_at is None or pod.node is None or pod.terminating:
            continue
        job = f"{pod.namespace}/{pod.job}" if pod.job else None
        if job is None and pod.group:
            group = records.typed(f"{GROUP}{pod.namespace}/{pod.group}", GroupRecord)
            job = f"{group.namespace}/{group.job}" if group is not None else None
        if job in wanted:
            out[job] = min(out.get(job, pod.started_at), pod.started_at)
    return out


def conditions(
    records: Overlay,
    views: Mapping[str, cluster.JobView],
    now: float,
    config: ControllerConfig,
    pods_of: PodsOf | None = None,
    groups_of: GroupsOf | None = None,
) -> Iterator[Finding]:
    """The checkpoint-stale and pending-past-SLA conditions that hold now.

    ``pods_of`` and ``groups_of`` (the decider's index) find a job's records
    without scanning its namespace: every job past its SLA is judged again
    on every tick, and a namespace may hold tens of thousands of groups.
    """
    starts = run_starts(records, views, pods_of)
    for view in views.values():
        stale = stale_checkpoint(
            view, records, now, config.checkpoint_stale_factor, starts.get(view.name)
        )
        if stale is not None:
            yield stale
        budget = sla_budget(view, config)
        if (
            budget is not None
            and pending(view)
            and view.submitted_at is not None
            and now - view.submitted_at > budget
        ):
            group = _group_phase(records, view.name, groups_of)
            yield Finding(
                base_id_parts=("pending-past-sla", view.name, str(view.submitted_at)),
                kind=AlertKind.PENDING_PAST_SLA,
                job=view.name,
                message=(
                    f"{view.name} (priority {view.priority:.0f}) has waited "
                    f"{now - view.submitted_at:.0f} s, past its SLA of "
                    f"{budget:.0f} s{group}"
                ),
                severity="critical",
                details={
                    "queue": view.queue,
                    "priority": view.priority,
                    "submitted_at": view.submitted_at,
                    "waited_s": now - view.submitted_at,
                    "sla_s": budget,
                },
            )


def sla_budget(view: cluster.JobView, config: ControllerConfig) -> float | None:
    """Seconds ``view`` may wait: its own SLA budget, else the global one for its priority."""
    if view.sla_deadline is not None and view.submitted_at is not None:
        return view.sla_deadline - view.submitted_at
    if config.pending_sla_s > 0 and view.priority >= config.sla_priority:
        return config.pending_sla_s
    return None


def _group_phase(records: Overlay, job: str, groups_of: GroupsOf | None = None) -> str:
    """The phase of ``job``'s first PodGroup in key order, in words ('' when it has none)."""
    namespace, _, name = job.partition("/")
    found: Iterable[GroupRecord | None]
    if groups_of is None:
        found = (group for _, group in records.typed_prefix(f"{GROUP}{namespace}/", GroupRecord))
    else:
        found = (records.typed(GROUP + tail, GroupRecord) for tail in groups_of(job))
    for group in found:
        if group is not None and group.job == name:
            return f" (its PodGroup is {group.phase})"
    return ""
