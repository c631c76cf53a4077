"""The decider: one input message in, the records it changes and the messages it sends out.

A pure step, ``step(records, message, origin, config)``, the way bytewax
writes stateful stream logic: no clock (time is the message's own time, kept
monotonic in the ``clock`` record), no I/O, no randomness. Ids are uuid5s of
the input's position (``origin``, ``topic/partition/offset``), so a message
processed twice after a crash yields the same decision and command ids, and
the node agents, who execute an id once, make the repeat harmless. Replaying
the input topics through ``step`` reproduces every decision.

What one step does:

1. fold the input into the records (a watched object, a job's progress, a
   yield acknowledgement, or a tick of time); an acknowledgement moves its
   yield (``yields``), also when it comes after the command expired;
2. housekeeping: yields past their deadline and slack raise an alert and
   stop holding their demand back; yields whose pods are gone are done;
   expired reservations are dropped;
3. for each job Volcano cannot place (pending, marked unschedulable), highest
   priority first: unless a round for it is in flight (its victims' pods are
   still leaving), its GPUs are still held for it, or it is cooling down or
   backing off (``DemandLedger``), build the snapshot and call the planner; a
   plan with victims becomes one ``Decision`` and one ``YieldCommand`` per
   victim and node, the victims' evictions go to the ``LivelockGuard``
   (incidents become alerts), and the freed GPUs are held for the preemptor;
4. a job gpuyield suspended resumes when the planner places it without
   evicting anyone, after its backoff, and when no heavier job waits; the
   heaviest suspended jobs go first and hold the free GPUs they need while
   they do not fit yet, so smaller resumes cannot starve a gang;
5. on a tick, what no later decision can need is deleted (see
   ``ControllerConfig``'s retention knobs): the table stays bounded.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from pydantic import ValidationError

from gpuyield.agents.controller import (
    aborted,
    clock,
    cluster,
    deadlock,
    incidents,
    kube_facts,
    queue_capability,
    volcano_evictions,
    yields,
)
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.free_capacity import NodeFacts, Room, node_facts
from gpuyield.agents.controller.index import (
    ALERT_VIEWS,
    DEMAND_VIEWS,
    WAKE_MARGIN_S,
    NoDeadlock,
    Quiet,
    RecordIndex,
    ResumeMemo,
    Scratch,
)
from gpuyield.agents.controller.records import (
    ALERT,
    CLOCK,
    DANGLING,
    DEMAND,
    EVICTIONS,
    GROUP,
    GUARD,
    NODE,
    POD,
    PROGRESS,
    QUEUE,
    RESERVATION,
    SUSPENDED,
    VJOB,
    VOLCANO_EVICTING,
    YIELD,
    AlertRecord,
    ClockRecord,
    DanglingRecord,
    DemandRecord,
    EvictionEntry,
    EvictionsRecord,
    GroupRecord,
    GuardRecord,
    NodeRecord,
    Overlay,
    PodRecord,
    ProgressRecord,
    QueueRecord,
    Record,
    RecordModel,
    ReservationRecord,
    SuspendedRecord,
    VJobRecord,
    VolcanoEvictingRecord,
    Writes,
    YieldRecord,
)
from gpuyield.agents.planner import plan
from gpuyield.agents.planner.session import could_place_on_free_gpus
from gpuyield.agents.planner.urgency import budget_risk
from gpuyield.agents.policy.demands import DemandLedger, InFlight
from gpuyield.agents.policy.livelock import Eviction, Incident, LivelockGuard
from gpuyield.agents.policy.resume import may_resume
from gpuyield.schemas import JobState, Plan, Snapshot
from gpuyield.schemas.errors import explain_validation_error
from gpuyield.schemas.messages import (
    Alert,
    AlertKind,
    AlertState,
    CommandAction,
    Decision,
    JobProgress,
    JobProgressBatch,
    KubeEvent,
    KubeEventType,
    KubeKind,
    Reservation,
    ReservationState,
    RoundOutcome,
    Tick,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)

Input = KubeEvent | JobProgress | JobProgressBatch | YieldAck | Tick
INPUT_MODELS: Mapping[str, type[Input]] = {
    "gpuyield.kube-events": KubeEvent,
    "gpuyield.job-progress": JobProgressBatch,  # a bare summary reads as a batch of one
    "gpuyield.yield-acks": YieldAck,
    "gpuyield.ticks": Tick,
}
"""The decider's input topics (canonical names, before any prefix) and how each is read:
the worker's decider and ``gpuyield replay`` read them alike."""
Planner = Callable[..., Plan]
"""``planner.plan``'s signature: the worker passes a timed wrapper (its metrics)."""
ID_NAMESPACE = uuid.UUID("6f1c7a52-8d0e-4b51-9a57-1e0c5d2f9b10")

LEAVING_LIMIT_S = 600.0
"""A settled yield whose pods the watch still shows after this long is no
longer treated as leaving (the watch may have missed a deletion; a relist
will correct the records either way)."""


class InputRejected(ValueError):
    """The message is well-formed but cannot be applied; the reason names the field."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one step changes and sends; the worker writes and publishes it all."""

    writes: Writes = field(default_factory=dict)
    decisions: tuple[Decision, ...] = ()
    commands: tuple[YieldCommand, ...] = ()
    alerts: tuple[Alert, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    """Holds taken and released in this step; the worker enforces and publishes
    them before it publishes the commands, so a hold is in place before the
    GPUs it protects are freed."""


def derive_id(*parts: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, "|".join(parts)))


def message_time(message: Input) -> float:
    if isinstance(message, KubeEvent):
        return message.observed_at
    if isinstance(message, JobProgress):
        return message.updated_at
    if isinstance(message, JobProgressBatch):  # its newest summary's, as if taken one by one
        return max(summary.updated_at for summary in message.summaries)
    if isinstance(message, YieldAck):
        return message.acked_at
    return message.at


def yield_key(job: str, decision_id: str) -> str:
    return f"{YIELD}{job}/{decision_id}"


class _Step:
    """The mutable scratch of one step; only ``step`` below creates it."""

    def __init__(
        self,
        records: Mapping[str, Record],
        origin: str,
        config: ControllerConfig,
        planner: Planner = plan,
        index: RecordIndex | None = None,
    ) -> None:
        self.planner = planner
        self.writes: Writes = {}
        if index is None or (index.config is not config and index.config != config):
            index = RecordIndex.build(records, config)
        self.index = index
        self.view = Overlay(records, self.writes, index)
        self.scratch = Scratch(index, self.view)
        self.changes = 0
        """Records written so far (a demand's round that writes nothing is ``Quiet``)."""
        self.origin = origin
        self.config = config
        self.decisions: list[Decision] = []
        self.commands: list[YieldCommand] = []
        self.alerts: list[Alert] = []
        self.reservations: list[Reservation] = []
        self.now = 0.0
        self.snapshot_ok = False
        """A snapshot was built and validated (an invalid-input incident has ended)."""

    # -- records -----------------------------------------------------------
    def jobs(self) -> Mapping[str, cluster.JobView]:
        """``cluster.jobs`` of the records as this step has written them so far."""
        return self.scratch.views()

    def put(self, key: str, value: RecordModel | None) -> None:
        if value is None:
            if key in self.view:
                self.writes[key] = None
                self.changes += 1
            return
        raw = value.dump()
        if self.view.get(key) != raw:
            self.writes[key] = raw
            self.changes += 1

    def guard(self) -> LivelockGuard:
        raw = self.view.typed(GUARD, GuardRecord) or GuardRecord()
        policy = self.config.policy
        return LivelockGuard(
            window_s=policy.eviction_window_s,
            max_evictions=policy.max_evictions,
            cycle_s=max(policy.cooldown_s, 1.0),
            backoff_base_s=self.config.resume_backoff_base_s,
            evictions=tuple(Eviction(e.victim, e.by, e.at) for e in raw.evictions),
            resumed_at=dict(raw.resumed_at),
            reported=dict(raw.reported),
        )

    def save_guard(self, guard: LivelockGuard) -> None:
        self.put(
            GUARD,
            GuardRecord(
                evictions=tuple(
                    EvictionEntry(victim=e.victim, by=e.by, at=e.at) for e in guard.evictions
                ),
                resumed_at=dict(guard.resumed_at),
                reported=dict(guard.reported),
            ),
        )

    def ledger(self, job: str) -> DemandLedger:
        """``job``'s entries of the demand ledger, read back from its record, none dropped."""
        raw = self.view.typed(DEMAND + job, DemandRecord)
        config = self.config
        if raw is None:
            return DemandLedger(
                cooldown_s=config.demand_retry_s,
                backoff_max_s=config.demand_backoff_max_s,
                sla_retry_s=config.sla_retry_s,
            )
        flights = {}
        if raw.decided_at is not None:
            flights[job] = InFlight(
                frozenset(raw.victims),
                raw.deadline if raw.deadline is not None else raw.decided_at,
                raw.decided_at,
            )
        return DemandLedger(
            cooldown_s=config.demand_retry_s,
            backoff_max_s=config.demand_backoff_max_s,
            in_flight=flights,
            last_round={job: raw.last_round} if raw.last_round is not None else {},
            failures={job: raw.failures} if raw.failures else {},
            sla_retry_s=config.sla_retry_s,
        )

    def save_ledger(self, job: str, ledger: DemandLedger) -> None:
        flight = ledger.in_flight.get(job)
        last = ledger.last_round.get(job)
        failures = ledger.failures.get(job, 0)
        if flight is None and last is None and not failures:
            self.put(DEMAND + job, None)
            return
        old = self.view.typed(DEMAND + job, DemandRecord)
        self.put(
            DEMAND + job,
            DemandRecord(
                victims=tuple(sorted(flight.victims)) if flight else (),
                deadline=flight.deadline if flight else None,
                decided_at=flight.decided_at if flight else None,
                last_round=last,
                failures=failures,
                noted=old.noted if old is not None else None,
            ),
        )

    def note(self, job: str, outcome: RoundOutcome) -> None:
        """Remember the outcome of ``job``'s last recorded round (see ``_skip``)."""
        old = self.view.typed(DEMAND + job, DemandRecord) or DemandRecord()
        self.put(DEMAND + job, old.model_copy(update={"noted": outcome.value}))

    def record(
        self,
        demand: str,
        outcome: RoundOutcome,
        reason: str,
        *,
        decision_id: str | None = None,
        snapshot: Snapshot | None = None,
        result: Plan | None = None,
        commands: tuple[str, ...] = (),
    ) -> None:
        """Put one round on the record: a ``Decision`` (v2 when it ran no planner)."""
        planned = snapshot is not None and result is not None
        self.decisions.append(
            Decision(
                v=1 if planned else 2,
                decision_id=decision_id or derive_id("decision", self.origin, demand),
                demand=demand,
                decided_at=self.now,
                snapshot=snapshot,
                plan=result,
                commands=commands,
                outcome=outcome,
                reason=reason,
                origin=self.origin,
            )
        )
        if outcome is not RoundOutcome.RESUME:
            self.note(demand, outcome)

    def release(self, job: str, reason: str) -> None:
        """End ``job``'s hold on its GPUs, if it has one, and say so to the enforcers."""
        held = self.view.typed(RESERVATION + job, ReservationRecord)
        if held is None:
            return
        self.put(RESERVATION + job, None)
        self.reservations.append(
            Reservation(
                job=job,
                state=ReservationState.RELEASED,
                nodes=dict(held.nodes),
                until=held.until,
                decision_id=held.decision,
                reason=reason,
                at=self.now,
            )
        )

    # -- alerts ------------------------------------------------------------
    def alert(
        self,
        alert_id: str,
        kind: AlertKind,
        message: str,
        *,
        job: str | None = None,
        severity: str = "warning",
        details: dict[str, object] | None = None,
        subject: tuple[str, ...] = (),
    ) -> None:
        """Raise ``alert_id`` once per incident (``incidents``): a repeat raises nothing,
        a condition that comes back after it was resolved is a new incident."""
        old = self.view.typed(ALERT + alert_id, AlertRecord)
        incident = 0
        if old is not None:
            if old.resolved_at is None or kind not in incidents.CONDITIONS:
                return  # raised before: a replay or a repeat raises nothing new
            incident = old.incident + 1
        self.put(
            ALERT + alert_id,
            AlertRecord(
                kind=kind.value,
                raised_at=self.now,
                job=job,
                severity=severity,
                subject=subject,
                incident=incident,
            ),
        )
        self.alerts.append(
            Alert(
                alert_id=incidents.incident_id(alert_id, incident),
                kind=kind,
                severity=severity,
                job=job,
                message=message,
                raised_at=self.now,
                details=details or {},
            )
        )

    def resolve(self, base: str, record: AlertRecord) -> None:
        """Send ``record``'s incident as resolved, once."""
        self.put(ALERT + base, record.model_copy(update={"resolved_at": self.now}))
        about = ", ".join(record.subject) or record.job or ""
        self.alerts.append(
            Alert(
                alert_id=incidents.incident_id(base, record.incident),
                kind=AlertKind(record.kind),
                severity=record.severity,
                job=record.job,
                message=f"resolved: {record.kind}" + (f" ({about})" if about else ""),
                raised_at=record.raised_at,
                details={"subject": list(record.subject)} if record.subject else {},
                state=AlertState.RESOLVED,
                resolved_at=self.now,
            )
        )

    def livelock(self, incident: Incident) -> None:
        self.alert(
            derive_id("livelock", incident.job, incident.pattern.value, str(incident.at)),
            AlertKind.LIVELOCK,
            f"livelock ({incident.pattern.value}) on {incident.job}: {incident.detail}; "
            "its evictions are now limited and its resumes backed off",
            job=incident.job,
            severity="critical",
            details={"pattern": incident.pattern.value},
        )


def step(
    records: Mapping[str, Record],
    message: Input,
    origin: str,
    config: ControllerConfig,
    *,
    planner: Planner = plan,
    index: RecordIndex | None = None,
) -> Outcome:
    """Apply one input message and decide; see the module docstring.

    ``planner`` is ``planner.plan`` or a wrapper that returns its plan unchanged
    (the worker's timing for ``gpuyield_planner_seconds``): the step stays pure.
    ``index`` is ``records``' ``RecordIndex`` (the caller applies the outcome's
    writes to both); without one, the step builds it from ``records``, which
    costs what rebuilding every job view costs. The step hands the index back
    describing the table it found, also when it raises: the step's own records
    stay laid over its views until the caller applies those writes, or are
    taken off by whatever reads the index first (``index.Pending``).
    """
    s = _Step(records, origin, config, planner, index)
    try:
        return _run(s, message)
    finally:
        s.scratch.restore()


def _run(s: _Step, message: Input) -> Outcome:
    _tell_time(s, message)
    if isinstance(message, KubeEvent):
        _apply_kube_event(s, message)
    elif isinstance(message, JobProgress):
        _apply_progress(s, message)
    elif isinstance(message, JobProgressBatch):
        for summary in message.summaries:
            _apply_progress(s, summary)
    elif isinstance(message, YieldAck):
        _apply_ack(s, message)
    _housekeeping(s)
    if s.config.adopt_aborted_jobs:  # issue 9: jobs aborted outside gpuyield resume like its own
        for job in aborted.to_adopt(
            s.view,
            vjobs=s.index.aborted_vjobs.union(_written(s, VJOB)),
            yields=s.index.open_yields.union(_written(s, YIELD)),
        ):
            s.put(SUSPENDED + job.name, aborted.adopted_record(s.now))
    try:
        _decide(s)
        _resume(s)
    except ValidationError as exc:
        # The records describe a cluster the contract cannot express (a bug, or
        # objects no sane cluster holds): keep the input's writes, say so once
        # per problem, and decide again when the next message changes things.
        s.alert(
            derive_id("invalid-snapshot", str(exc.errors()[0]["msg"])),
            AlertKind.INVALID_INPUT,
            f"cannot build a valid snapshot: {explain_validation_error(exc)}",
            severity="critical",
        )
    if isinstance(message, Tick):
        _watch_conditions(s)
    _resolve_ended(s)
    if isinstance(message, Tick):
        _forget(s)
    return Outcome(
        s.writes,
        tuple(s.decisions),
        tuple(s.commands),
        tuple(s.alerts),
        tuple(s.reservations),
    )


def _written(s: _Step, prefix: str) -> set[str]:
    """The key tails under ``prefix`` this step wrote (the index learns them once applied)."""
    return {key[len(prefix) :] for key in s.view.writes if key.startswith(prefix)}


# -- 1. inputs -------------------------------------------------------------


def _object_key(event: KubeEvent) -> str:
    if event.kind is KubeKind.NODE:
        return NODE + event.name
    if event.kind is KubeKind.QUEUE:
        return QUEUE + event.name
    namespace = event.namespace or "default"
    prefix = {KubeKind.POD: POD, KubeKind.POD_GROUP: GROUP, KubeKind.JOB: VJOB}[event.kind]
    return f"{prefix}{namespace}/{event.name}"


def watched_record(event: KubeEvent, config: ControllerConfig) -> tuple[str, RecordModel]:
    """The key and record a watched object becomes (``gpuyield doctor`` reads a dump so too);
    ``InputRejected`` naming the field when the object cannot be read."""
    record: RecordModel
    try:
        if event.kind is KubeKind.NODE:
            record = NodeRecord.model_validate(
                kube_facts.node_record(
                    event.object, rack_label=config.rack_label, nvlink_label=config.nvlink_label
                )
            )
        elif event.kind is KubeKind.POD:
            record = PodRecord.model_validate(kube_facts.pod_record(event.object))
        elif event.kind is KubeKind.POD_GROUP:
            record = GroupRecord.model_validate(kube_facts.pod_group_record(event.object))
        elif event.kind is KubeKind.JOB:
            record = VJobRecord.model_validate(kube_facts.volcano_job_record(event.object))
        else:
            record = QueueRecord.model_validate(kube_facts.queue_record(event.object))
    except kube_facts.FactError as exc:
        raise InputRejected(f"{event.kind.value} {event.name}: {exc}") from None
    except ValidationError as exc:
        raise InputRejected(
            f"{event.kind.value} {event.name}: {explain_validation_error(exc)}"
        ) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputRejected(f"{event.kind.value} {event.name}: unreadable object ({exc})") from None
    return _object_key(event), record


def _apply_kube_event(s: _Step, event: KubeEvent) -> None:
    if event.type is KubeEventType.DELETED:
        if event.kind is KubeKind.POD and kube_facts.eviction_mark(event.object) is not None:
            old = s.view.typed(_object_key(event), PodRecord)
            _volcano_evicting(s, event, volcano_evictions.deleted(old, event.object))
        s.put(_object_key(event), None)
        return
    key, record = watched_record(event, s.config)
    if isinstance(record, PodRecord) and record.evicted is not None:
        _volcano_evicting(s, event, record)
    s.put(key, record)
    if isinstance(record, GroupRecord) and record.phase == "Running":
        _job_placed(s, f"{record.namespace}/{record.job}")


def _volcano_evicting(s: _Step, event: KubeEvent, pod: PodRecord | None) -> None:
    """A pod a scheduler evicted beside gpuyield opens or extends an incident (issue 13)."""
    seen = volcano_evictions.on_pod(
        s.view.typed(_object_key(event), PodRecord),
        pod,
        event.name,
        s.view.typed(VOLCANO_EVICTING, VolcanoEvictingRecord),
        s.now,
        s.config.volcano_evicting_quiet_s,
    )
    if seen is not None:
        record, found = seen
        s.put(VOLCANO_EVICTING, record)
        if found is not None:
            _raise(s, found)


def _job_placed(s: _Step, job: str) -> None:
    """Volcano placed ``job``: its demand is settled and its nomination released."""
    if DEMAND + job in s.view:
        s.save_ledger(job, s.ledger(job).settled(job))
    s.release(job, "placed by Volcano")
    if SUSPENDED + job in s.view:
        s.put(SUSPENDED + job, None)
    if EVICTIONS + job in s.view:
        # Running again after an eviction: the cycle detector's cue.
        s.save_guard(s.guard().observe_resume(job, s.now))


def _tell_time(s: _Step, message: Input) -> None:
    """Move the clock for ``message`` by the rules of ``clock``; flag what was off."""
    saved = s.view.typed(CLOCK, ClockRecord)
    at = message_time(message)
    bound = s.config.max_clock_skew_s
    reading = clock.advance(
        saved.now if saved else None,
        saved.tick if saved else None,
        at,
        is_tick=isinstance(message, Tick),
        max_skew_s=bound,
    )
    s.now = reading.now
    s.put(CLOCK, ClockRecord(now=s.now, tick=reading.tick))
    kind = type(message).__name__
    if reading.ahead_s is not None:
        s.alert(
            derive_id("clock-skew", kind, str(int(s.now // 3600))),
            AlertKind.CLOCK_SKEW,
            f"a {kind} stamped {reading.ahead_s:.0f} s beyond the workers' time and the "
            f"{bound:.0f} s skew allowed was clamped ({s.origin}); check that host's clock",
            details={"input": kind, "origin": s.origin, "ahead_s": reading.ahead_s},
        )
    if reading.repaired_from is not None:
        for key in list(s.view):
            raw = s.view[key]
            fixed = clock.clamp_times(raw, s.now)
            if fixed != raw:
                s.writes[key] = fixed
        s.put(CLOCK, ClockRecord(now=s.now, tick=reading.tick))
        s.alert(
            derive_id("clock-repaired", str(reading.repaired_from), s.origin),
            AlertKind.CLOCK_SKEW,
            f"the decider's clock was {reading.repaired_from - s.now:.0f} s ahead of the "
            f"workers' ticks: set back to the tick, and later times in the table clamped",
            severity="critical",
            details={"input": kind, "origin": s.origin, "clock_was": reading.repaired_from},
        )


def _apply_progress(s: _Step, progress: JobProgress) -> None:
    key = PROGRESS + progress.job
    old = s.view.typed(key, ProgressRecord)
    if old is not None and s.now >= old.updated_at >= progress.updated_at:
        return  # a redelivered or older summary (a record from the future is replaced)
    s.put(
        key,
        ProgressRecord.model_validate(
            progress.model_dump(exclude={"v", "forwarded_at", "clock_offset_s"})
        ),
    )
    if progress.clock_offset_s is not None:
        s.alert(
            derive_id("trainer-clock", progress.job, str(int(s.now // 86400))),
            AlertKind.CLOCK_SKEW,
            f"{progress.job}'s trainer clock is {progress.clock_offset_s:+.0f} s off the "
            "workers'; its heartbeats are taken in the workers' time",
            job=progress.job,
            details={"input": "JobProgress", "offset_s": progress.clock_offset_s},
        )


def _find_yield(s: _Step, job: str, command_id: str) -> tuple[str, YieldRecord] | None:
    prefix = f"{YIELD}{job}/"
    for tail, record in s.view.typed_prefix(prefix, YieldRecord):
        if any(c.command_id == command_id for c in record.commands):
            return prefix + tail, record
    return None


def _apply_ack(s: _Step, ack: YieldAck) -> None:
    found = _find_yield(s, ack.job, ack.command_id)
    if found is None:
        return  # unknown (or forgotten after its retention): nothing to apply
    key, record = found
    acked = yields.acknowledge(record, ack.command_id, ack.outcome, s.now)
    if acked is None:
        return  # acknowledged before: nothing changes twice
    job = record.job
    _save_yield(s, key, record, acked.value)
    if ack.outcome is YieldOutcome.HARD_KILLED:
        s.alert(
            derive_id("hard-killed", ack.command_id),
            AlertKind.YIELD_HARD_KILLED,
            f"{job} did not checkpoint within {record.grace_s:.0f} s on {ack.node} and was "
            f"killed ({ack.gpu_seconds_lost:.0f} GPU-seconds lost)",
            job=job,
            details={"command_id": ack.command_id, "node": ack.node},
        )
    if ack.outcome is YieldOutcome.FAILED:
        s.alert(
            derive_id("yield-failed", ack.command_id),
            AlertKind.YIELD_FAILED,
            f"the node agent on {ack.node} could not make {job} yield: {ack.detail}",
            job=job,
            severity="critical",
            details={"command_id": ack.command_id, "node": ack.node},
        )
    elif record.whole_job and ack.outcome is not YieldOutcome.RESUMED:
        _suspended(s, record, ack)


def _suspended(s: _Step, record: YieldRecord, ack: YieldAck) -> None:
    """The whole job yielded (an ack of one of its nodes): it waits to resume."""
    key = SUSPENDED + record.job
    old = s.view.typed(key, SuspendedRecord)
    if old is not None and old.decision == record.decision:
        s.put(
            key,
            old.model_copy(
                update={
                    "checkpoint_step": ack.checkpoint_step
                    if ack.checkpoint_step is not None
                    else old.checkpoint_step,
                    "nodes": tuple(sorted({*old.nodes, ack.node})),
                }
            ),
        )
        return
    s.put(
        key,
        SuspendedRecord(
            since=s.now,
            decision=record.decision,
            checkpoint_step=ack.checkpoint_step,
            nodes=yields.nodes(record),
        ),
    )


def _save_yield(s: _Step, key: str, old: YieldRecord, new: YieldRecord) -> None:
    """Write a yield that moved, and once it is done, stop its demand waiting on it.

    Housekeeping hands every open yield here on every input. Its pods are
    read only while they can end it (``yields.awaits_pods``), and a yield
    that did not move is not written again: the table holds it already, as
    this code wrote it. Both were most of a quiet input's cost with a few
    yields open (every leaving pod parsed, the record dumped and compared).
    """
    if yields.awaits_pods(new):
        new = yields.observe_pods(new, _pods_gone(s, new), s.now, LEAVING_LIMIT_S)
    if new is old:
        return
    s.put(key, new)
    if new.done_at is not None and old.done_at is None and new.preemptor is not None:
        preemptor = new.preemptor
        s.save_ledger(preemptor, s.ledger(preemptor).acknowledged(preemptor, new.job))


def _pods_gone(s: _Step, record: YieldRecord) -> bool:
    namespace = record.job.split("/", 1)[0]
    for name in yields.leaving_pods(record):
        pod = s.view.typed(f"{POD}{namespace}/{name}", PodRecord)
        if pod is not None and pod.phase not in cluster.TERMINAL_POD_PHASES:
            return False
    return True


# -- 2. housekeeping -------------------------------------------------------


def _yields_to_visit(s: _Step) -> list[tuple[str, YieldRecord]]:
    """The yields a step must look at, in key order: those not done, and the done ones
    whose retention may be over (``yields.forgettable`` decides exactly).

    Done yields are kept a day (``yield_retention_s``) and were all read on
    every input; the index knows which are open and when each done one ended,
    so only those are read, and those this step wrote.
    """
    # a second's margin: float rounding must not hide one that ``forgettable`` would take
    due_before = s.now - s.config.yield_retention_s + 1.0
    tails = s.index.yields_to_visit(due_before)
    tails.update(key[len(YIELD) :] for key in s.writes if key.startswith(YIELD))
    found = []
    for tail in sorted(tails):
        record = s.view.typed(YIELD + tail, YieldRecord)
        if record is not None:
            found.append((tail, record))
    return found


def _housekeeping(s: _Step) -> None:
    for tail, record in _yields_to_visit(s):
        key = YIELD + tail
        if record.done_at is not None:
            if yields.forgettable(record, s.now, s.config.yield_retention_s):
                s.put(key, None)
            continue
        new, expired = yields.expire(record, s.now, s.config.ack_slack_s)
        for command in expired:
            s.alert(
                derive_id("deadline-missed", command.command_id),
                AlertKind.YIELD_DEADLINE_MISSED,
                f"no acknowledgement from {command.node} for the yield of {record.job} "
                f"{s.now - record.deadline:.0f} s after its deadline",
                job=record.job,
                details={"command_id": command.command_id, "node": command.node},
                subject=(command.command_id,),
            )
        _save_yield(s, key, record, new)
    for job, reservation in list(s.view.typed_prefix(RESERVATION, ReservationRecord)):
        if reservation.until <= s.now:
            s.release(job, "expired before the job was placed")


# -- 3. decisions ----------------------------------------------------------


def _demands(s: _Step, views: Mapping[str, cluster.JobView]) -> list[cluster.JobView]:
    """The jobs waiting and marked unschedulable, highest priority first (``views`` is
    ``s.jobs()``, whose demands the index keeps)."""
    waiting = [views[name] for name in s.index.demands]
    return sorted(
        waiting,
        key=lambda v: (
            -v.priority,
            v.submitted_at if v.submitted_at is not None else float("inf"),
            v.name,
        ),
    )


PLANNED = frozenset(
    o.value for o in (RoundOutcome.YIELD, RoundOutcome.NO_VICTIMS, RoundOutcome.UNSERVABLE)
)


def _skip(s: _Step, demand: str, outcome: RoundOutcome, reason: str) -> None:
    """Record a round skipped for ``reason``, once: the same skip on every later input
    (every tick of a cooldown) says nothing new, so it is recorded again only after
    a round with another outcome. The cooldown that follows a planner round is that
    round's own (its decision says when the next one comes): not recorded again."""
    record = s.view.typed(DEMAND + demand, DemandRecord)
    noted = record.noted if record is not None else None
    if noted == outcome.value or (outcome is RoundOutcome.SKIPPED_COOLDOWN and noted in PLANNED):
        return
    s.record(demand, outcome, reason, decision_id=derive_id("skip", s.origin, demand))


def _next_round(s: _Step, job: str, sla: bool) -> str:
    wait = s.ledger(job).retry_after(job, sla=sla)
    return f"; the next round {wait:.0f} s after this one"


def _cooldown(ledger: DemandLedger, job: str, sla: bool) -> str:
    flight = ledger.in_flight.get(job)
    last = ledger.last_round.get(job)
    if flight is not None and flight.victims:
        return f"its yields of {', '.join(sorted(flight.victims))} are unacknowledged"
    if last is None:
        return "cooling down"
    wait = ledger.retry_after(job, sla=sla)
    return f"planned at {last:.3f}; the next round {wait:.0f} s after it"


def _held_for(s: _Step, job: str) -> bool:
    """A preemptor whose victims' pods are still leaving, or whose freed GPUs are still
    held for it, waits for them instead of planning a second round.

    Planning again while the first round's GPUs are on their way (a slow
    checkpoint, a late ack) would evict a second set of victims for the same
    shortage; planning again while its GPUs are held for it would do the same
    when someone else was placed on them (nothing enforced the hold): 32 GPUs
    yielded for 16. It plans again once its hold expires (``reservation_s``).
    """
    hold = s.view.typed(RESERVATION + job, ReservationRecord)
    return hold is not None and hold.until > s.now


def _decide(s: _Step) -> None:
    plans = 0
    views = s.jobs()
    for found in _misconfigured_queues(s):  # issue 9
        s.alert(
            derive_id(*found.parts),
            AlertKind.QUEUE_MISCONFIGURED,
            found.message,
            details=found.details,
            subject=(found.queue,),
        )
    if _gang_deadlock(s, views):  # issue 9: partly placed gangs that block each other
        views = s.jobs()
    epochs = _epochs(s, (DEMAND, RESERVATION, ALERT, YIELD), DEMAND_VIEWS)
    memo = s.index.demands_memo
    if epochs is not None and memo is not None and memo[0] == epochs and s.now < memo[1]:
        return  # every demand's round changed nothing, and nothing they read has changed
    # Read only past the memo: most inputs stop above, and reading every open yield
    # again was a tenth of such an input.
    yielding_for = frozenset(
        y.preemptor for _, y in _yields_to_visit(s) if y.done_at is None and y.preemptor is not None
    )
    quiet_until = math.inf
    for demand in _demands(s, views):
        if plans >= s.config.max_plans_per_step:
            break
        quiet = _still_quiet(s, demand, yielding_for)
        if quiet is not None:
            quiet_until = min(quiet_until, quiet.until)
            continue  # its last round changed nothing, and nothing that round read has changed
        before = (s.changes, len(s.alerts), len(s.decisions))
        until = _round(s, demand, views, demand.name in yielding_for)
        if until is None:
            plans += 1
            views = s.jobs()  # after a yield its victims are leaving now
        elif before == (s.changes, len(s.alerts), len(s.decisions)):
            _remember_quiet(s, demand, demand.name in yielding_for, until)
            quiet_until = min(quiet_until, until)
            continue
        quiet_until = -math.inf  # this round changed something: nothing to remember
    if epochs is not None and quiet_until > s.now:
        s.index.demands_memo = (epochs, quiet_until)


def _epochs(s: _Step, prefixes: tuple[str, ...], views: str) -> tuple[int, ...] | None:
    """How often the records under ``prefixes`` and the ``views`` count changed, or None
    when this step wrote such records already (its reads are not the table's)."""
    if any(key.startswith(prefixes) for key in s.writes):
        return None
    epochs = s.index.epochs
    return (*(epochs[prefix] for prefix in prefixes), epochs[views])


def _round(
    s: _Step, demand: cluster.JobView, views: Mapping[str, cluster.JobView], yielding: bool
) -> float | None:
    """One demand's round: None when it ran the planner, else the time until which the
    same records cannot give it another round (a skip's cooldown or hold ends, its SLA
    budget turns at risk), ``WAKE_MARGIN_S`` early."""
    if yielding:
        _skip(
            s,
            demand.name,
            RoundOutcome.SKIPPED_YIELDING,
            "the victims of its previous round are still leaving",
        )
        return math.inf
    if _held_for(s, demand.name):
        _skip(
            s,
            demand.name,
            RoundOutcome.SKIPPED_HELD,
            "GPUs freed for it are held until Volcano places it",
        )
        hold = s.view.typed(RESERVATION + demand.name, ReservationRecord)
        return hold.until - WAKE_MARGIN_S if hold is not None else s.now
    ledger = s.ledger(demand.name)
    sla = demand.sla_deadline is not None  # retried every sla_retry_s, never backed off
    _alert_if_at_risk(s, demand)
    if not ledger.may_plan(demand.name, s.now, sla=sla):
        why = _cooldown(ledger, demand.name, sla)
        _skip(s, demand.name, RoundOutcome.SKIPPED_COOLDOWN, why)
        return min(_may_plan_at(ledger, demand.name, s.now, sla), _at_risk_at(s, demand))
    snapshot = cluster.snapshot(s.view, views, demand.name, s.now, s.config, parts=s.index.parts)
    s.snapshot_ok = True
    result = s.planner(snapshot, demand.name, budget=s.config.planner_budget, explain=True)
    if not result.feasible:
        s.save_ledger(demand.name, ledger.tried(demand.name, s.now))
        s.alert(
            derive_id("unservable", demand.name, str(demand.submitted_at)),
            AlertKind.DEMAND_UNSERVABLE,
            f"{demand.name} cannot be placed even by evicting every eligible job: "
            + "; ".join(result.explanation[-2:]),
            job=demand.name,
            severity="info",
        )
        s.record(
            demand.name,
            RoundOutcome.UNSERVABLE,
            "no plan, even evicting every eligible job: "
            + "; ".join(result.explanation[-2:])
            + _next_round(s, demand.name, sla),
            snapshot=snapshot,
            result=result,
        )
        return None
    if not result.victims:
        # It fits without evictions: Volcano will place it; look again later.
        s.save_ledger(demand.name, ledger.tried(demand.name, s.now))
        s.record(
            demand.name,
            RoundOutcome.NO_VICTIMS,
            "it fits without evicting anyone: left to Volcano" + _next_round(s, demand.name, sla),
            snapshot=snapshot,
            result=result,
        )
        return None
    _issue(s, demand.name, snapshot, result, ledger)
    return None


def _may_plan_at(ledger: DemandLedger, job: str, now: float, sla: bool) -> float:
    """When ``ledger.may_plan`` may turn true for ``job`` (it is false at ``now``), early."""
    flight = ledger.in_flight.get(job)
    if flight is not None and flight.victims and now < flight.deadline:
        return flight.deadline - WAKE_MARGIN_S
    last = ledger.last_round.get(job)
    if last is None:
        return now  # cannot be: may_plan is true without a last round
    return last + ledger.retry_after(job, sla=sla) - WAKE_MARGIN_S


def _sla_alert_key(demand: cluster.JobView) -> str | None:
    if demand.submitted_at is None or demand.sla_deadline is None:
        return None
    return ALERT + derive_id("sla-at-risk", demand.name, str(demand.submitted_at))


def _at_risk_at(s: _Step, demand: cluster.JobView) -> float:
    """When ``_alert_if_at_risk`` may first raise for ``demand`` (inf: never, or raised)."""
    if demand.submitted_at is None or demand.sla_deadline is None:
        return math.inf
    budget = demand.sla_deadline - demand.submitted_at
    share = s.config.policy.sla_risk_share
    if budget <= 0 or s.now - demand.submitted_at >= share * budget:
        return math.inf  # at risk already: its alert is raised, or the round was not quiet
    return demand.submitted_at + share * budget - WAKE_MARGIN_S


def _remember_quiet(s: _Step, demand: cluster.JobView, yielding: bool, until: float) -> None:
    """Keep that ``demand``'s round changed nothing, with what it read (``_still_quiet``)."""
    alert = _sla_alert_key(demand)
    s.index.quiet[demand.name] = Quiet(
        view=demand,
        demand=s.view.get(DEMAND + demand.name),
        reservation=s.view.get(RESERVATION + demand.name),
        yielding=yielding,
        alert=s.view.get(alert) if alert is not None else None,
        until=until,
    )


def _still_quiet(s: _Step, demand: cluster.JobView, yielding_for: frozenset[str]) -> Quiet | None:
    """Its last round changed nothing, read the same records (the same objects: the table
    keeps what a step wrote) and the same view, and its time to change has not come.

    A demand in cooldown looks the same on every input: this keeps the cost of
    each input independent of how many demands wait.
    """
    quiet = s.index.quiet.get(demand.name)
    if quiet is None or quiet.view is not demand or s.now >= quiet.until:
        return None
    alert = _sla_alert_key(demand)
    same = (
        quiet.yielding == (demand.name in yielding_for)
        and s.view.get(DEMAND + demand.name) is quiet.demand
        and s.view.get(RESERVATION + demand.name) is quiet.reservation
        and (alert is None or s.view.get(alert) is quiet.alert)
    )
    return quiet if same else None


def _alert_if_at_risk(s: _Step, demand: cluster.JobView) -> None:
    """One ``sla-at-risk`` alert per incident, once ``demand`` has waited its share of its
    SLA budget (``planner.urgency``; the planner reads the same risk from the snapshot and
    lets W_eff protection give way)."""
    if demand.submitted_at is None or demand.sla_deadline is None:
        return
    risk = budget_risk(
        demand.submitted_at, demand.sla_deadline, s.now, s.config.policy.sla_risk_share
    )
    if risk is None:
        return
    s.alert(
        derive_id("sla-at-risk", demand.name, str(demand.submitted_at)),
        AlertKind.SLA_AT_RISK,
        f"{demand.name} is still waiting: {risk.describe()}; W_eff protection now gives "
        "way to it too (cooldowns and eviction limits already did)",
        job=demand.name,
        details={
            "waited_s": round(risk.waited_s, 3),
            "budget_s": round(risk.budget_s, 3),
            "sla_deadline": demand.sla_deadline,
        },
    )


def _misconfigured_queues(s: _Step) -> list[queue_capability.Misconfigured]:
    """``queue_capability.check``, from the index's queues and GPUs (no queue that lacks a
    GPU capability: nothing to find, and nothing summed; the index knows which lack one
    unless this step wrote a queue)."""
    if not s.index.gpuless_queues and not any(key.startswith(QUEUE) for key in s.writes):
        return []
    queues = {key[len(QUEUE) :]: q for key, q in s.view.with_prefix(QUEUE)}
    if not any(queue_capability.lacks_gpu(q) for q in queues.values()):
        return []
    return queue_capability.misconfigured(
        queues, s.index.queues, s.scratch.cluster_gpus(), s.config.capability_without_gpu
    )


# -- 3b. gang deadlocks (issue 9; the logic is in controller/deadlock.py) --


def _gang_deadlock(s: _Step, views: Mapping[str, cluster.JobView]) -> bool:
    """Partial gangs blocking each other: the one whose yield loses least yields.

    Two partial gangs that do not block each other (one waits for GPUs that
    are busy, not for the other's) used to cost a whole snapshot on every
    input. "No deadlock" depends on ``CAPACITY_READS`` and on which holds
    have expired, so it is remembered for the same gangs at the same epochs,
    until the next reservation expires.
    """
    stuck = deadlock.members(views, lambda job: s.ledger(job).may_plan(job, s.now), s.index.partial)
    if len(stuck) < 2:
        return False
    epochs = _epochs(s, CAPACITY_READS, DEMAND_VIEWS)
    memo = s.index.deadlock_memo
    if memo is not None and (memo.epochs, memo.gangs) == (epochs, stuck) and s.now < memo.until:
        return False
    found = deadlock.resolve(s.view, views, s.now, s.config, partial=stuck, parts=s.index.parts)
    if found is None:
        if epochs is not None:
            s.index.deadlock_memo = NoDeadlock(epochs, stuck, _next_expiry(s))
        return False
    what = found.deadlock.describe()
    if found.preemptor is None or found.snapshot is None or found.plan is None:
        for gang in found.deadlock.gangs:  # look again after the retry cooldown
            s.save_ledger(gang, s.ledger(gang).tried(gang, s.now))
        s.alert(
            derive_id("gang-deadlock", *found.deadlock.gangs),
            AlertKind.GANG_DEADLOCK,
            f"gang deadlock: {what}; no gang may yield (preemptable: false, cooldown "
            "or eviction limit): delete one of them",
            severity="critical",
            details={"gangs": list(found.deadlock.gangs)},
            subject=tuple(found.deadlock.gangs),
        )
        return False
    _issue(s, found.preemptor, found.snapshot, found.plan, s.ledger(found.preemptor))
    victims = sorted(v.job for v in found.plan.victims)
    s.alert(
        derive_id("gang-deadlock", s.decisions[-1].decision_id),
        AlertKind.GANG_DEADLOCK,
        f"gang deadlock: {what}; {', '.join(victims)} yields "
        f"({found.plan.lost_gpu_seconds:.0f} GPU-seconds lost) so {found.preemptor} "
        "can complete",
        job=found.preemptor,
        details={"gangs": list(found.deadlock.gangs), "yields": victims},
        subject=tuple(found.deadlock.gangs),
    )
    return True


def _nominate(s: _Step, job: str, snapshot: Snapshot, result: Plan, decision_id: str) -> None:
    """Hold the GPUs ``result`` places ``job`` on until Volcano places it (or ``reservation_s``).

    Later plans in the meantime see them as taken: another demand is not
    promised the same GPUs, and another suspended job is not resumed into
    them (it would only wait, unschedulable, in the shortage it yielded to).
    """
    gpus_of = {p.name: p.gpus for j in snapshot.jobs if j.name == job for p in j.pods}
    nominated: dict[str, int] = {}
    for pod, node in result.placement.items():
        nominated[node] = nominated.get(node, 0) + gpus_of.get(pod, 0)
    until = s.now + s.config.reservation_s
    s.put(RESERVATION + job, ReservationRecord(nodes=nominated, until=until, decision=decision_id))
    s.reservations.append(
        Reservation(
            job=job,
            state=ReservationState.HELD,
            nodes=nominated,
            until=until,
            decision_id=decision_id,
            reason="GPUs freed for this job are held until Volcano places it",
            at=s.now,
        )
    )


def _issue(
    s: _Step, preemptor: str, snapshot: Snapshot, result: Plan, ledger: DemandLedger
) -> None:
    decision_id = derive_id("decision", s.origin, preemptor)
    node_of = {(j.name, p.name): p.node for j in snapshot.jobs for p in j.pods}
    gpus_of = {(j.name, p.name.rsplit("/", 1)[-1]): p.gpus for j in snapshot.jobs for p in j.pods}
    guard = s.guard()
    ids: list[str] = []
    deadline = s.now
    window = s.config.policy.eviction_window_s
    for victim in result.victims:
        by_node: dict[str, list[str]] = {}
        for pod in victim.pods:
            node = node_of.get((victim.job, pod))
            if node is not None:
                # the snapshot writes a name two namespaces share as namespace/name
                by_node.setdefault(node, []).append(pod.rsplit("/", 1)[-1])
        commands = [
            YieldCommand(
                command_id=derive_id(decision_id, victim.job, node),
                decision_id=decision_id,
                action=CommandAction.YIELD,
                node=node,
                job=victim.job,
                pods=tuple(sorted(by_node[node])),
                whole_job=victim.whole_job,
                gpus=sum(gpus_of.get((victim.job, pod), 0) for pod in by_node[node]),
                grace_s=victim.grace_s,
                issued_at=s.now,
                deadline=s.now + victim.grace_s,
                reason=victim.reason,
            )
            for node in sorted(by_node)
        ]
        if commands:
            s.commands.extend(commands)
            deadline = max(deadline, *(c.deadline for c in commands))
            s.put(
                yield_key(victim.job, decision_id),
                yields.issue(commands, preemptor=preemptor, whole_job=victim.whole_job),
            )
        old = s.view.typed(EVICTIONS + victim.job, EvictionsRecord)
        recent = tuple(t for t in (old.at if old else ()) if 0 <= s.now - t <= window)
        s.put(EVICTIONS + victim.job, EvictionsRecord(at=(*recent, s.now)))
        guard, incidents = guard.observe_eviction(victim.job, preemptor, s.now)
        for incident in incidents:
            s.livelock(incident)
        ids.extend(c.command_id for c in commands)
    s.save_guard(guard)
    victims = frozenset(v.job for v in result.victims)
    s.save_ledger(preemptor, ledger.decided(preemptor, victims, s.now, deadline))
    _nominate(s, preemptor, snapshot, result, decision_id)
    s.record(
        preemptor,
        RoundOutcome.YIELD,
        "; ".join(result.explanation[-1:]),
        decision_id=decision_id,
        snapshot=snapshot,
        result=result,
        commands=tuple(ids),
    )


# -- 4. resume -------------------------------------------------------------


def _resume_rank(view: cluster.JobView, record: SuspendedRecord) -> tuple[float, int, float, str]:
    """Heaviest first: priority, then the GPUs it needs (a big gang is the hardest to fit
    and the first that smaller resumes would starve), then the longest suspended."""
    return (-view.priority, -cluster.gang_gpus(view), record.since, view.name)


CAPACITY_READS = (NODE, POD, GROUP, VJOB, QUEUE, RESERVATION, SUSPENDED, YIELD, EVICTIONS, DEMAND)
"""The records a snapshot takes its free GPUs, holds, gangs and waiting pods from: all but
the progress records (a job's progress moves none of them), the alerts and the guard.
What a memo keyed on their epochs remembers must depend on nothing else but the time
at which a reservation expires."""


def _resume(s: _Step) -> None:
    """Resume the heaviest suspended job that fits again without evicting anyone.

    While the cluster is full, every input used to build each candidate's
    whole snapshot again (0.65 s at 10,000 nodes, up to
    ``max_plans_per_step`` of them) to learn that its free GPUs still
    cannot hold it. The index's ``FreeCapacity`` now answers that (and the
    free GPUs, and the job's hold) from free GPUs kept per node, exactly as
    the snapshot would (``_room``); a snapshot is built only when the free
    GPUs could hold the job, and then the planner decides. What is answered
    depends on ``CAPACITY_READS`` and on which reservations have expired, so
    at the same epochs and before the next expiry the memo answers instead
    (``ResumeMemo``).
    """
    suspended = dict(s.view.typed_prefix(SUSPENDED, SuspendedRecord))
    if not suspended:
        return
    views = s.jobs()
    waiting = [v.priority for v in _demands(s, views)]
    guard = s.guard()
    candidates = sorted(
        (
            (views[name], record)
            for name, record in suspended.items()
            if name in views
            and views[name].state is JobState.SUSPENDED
            and record.resume_issued is None
        ),
        key=lambda vr: _resume_rank(*vr),
    )
    epochs = _epochs(s, CAPACITY_READS, DEMAND_VIEWS)
    memo = s.index.resume_memo
    fresh = memo is not None and memo.epochs == epochs and s.now < memo.until
    known = memo.found if memo is not None and fresh else {}
    learned: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[int, Mapping[str, int]]] = {}
    planned = built = False
    held: dict[str, int] = {}  # free GPUs set aside for heavier suspended jobs that do not fit yet
    plans = 0
    rooms = _Rooms(s)
    for view, record in candidates:
        not_before = record.since + guard.resume_delay(view.name, s.now)
        if not may_resume(view.priority, s.now, not_before, waiting):
            _capacity(s, view, record, None)
            continue
        if not view.pods:
            # Nothing known to place (its Volcano Job unseen, its pods only on their way
            # out): a resume could be addressed to no node that will run it.
            continue
        if plans >= s.config.max_plans_per_step:
            break
        plans += 1
        key = (view.name, tuple(sorted(held.items())))
        seen = known.get(key)
        if seen is not None:
            # Answered at these epochs; a snapshot built then was valid (the invalid-input
            # alert's test), when one was built.
            s.snapshot_ok = s.snapshot_ok or (memo is not None and memo.validated)
        else:
            room = rooms.room(view, held)
            if room is not None and not room.could_place:
                seen = (room.free, room.hold)
            else:
                snapshot = cluster.snapshot(
                    s.view, views, view.name, s.now, s.config, held=held, parts=s.index.parts
                )
                s.snapshot_ok = built = True
                # Only a plan without victims resumes the job: when the free GPUs cannot
                # hold its pods, no plan can, and the planner's second at 10,000 nodes is
                # saved on every message while a cluster stays full (the holds still apply).
                if could_place_on_free_gpus(snapshot, view.name):
                    planned = True
                    result = s.planner(
                        snapshot, view.name, budget=s.config.planner_budget, explain=True
                    )
                    if result.feasible and not result.victims and result.placement:
                        _issue_resume(s, view, record, snapshot, result, guard)
                        return  # one resume per step: the next step sees its GPUs as nominated
                seen = (cluster.free_gpus(snapshot), cluster.hold_for(snapshot, view))
        learned[key] = seen
        free, hold = seen
        _capacity(s, view, record, free)
        for node, gpus in hold.items():
            held[node] = held.get(node, 0) + gpus
    if epochs is not None and not planned and learned:
        validated = built or (fresh and memo is not None and memo.validated)
        s.index.resume_memo = ResumeMemo(epochs, _next_expiry(s), learned, validated)


class _Rooms:
    """The resume pass's questions to the index's ``FreeCapacity``, with what they share.

    ``room`` is None where a snapshot must be built all the same: without the
    index's free GPUs (the reference decider), or while an invalid-input alert
    is open (only a valid snapshot built shows it over, ``incidents.ended``).
    A snapshot's reference check is not made here: records a snapshot cannot
    express are reported by the next snapshot a plan needs.
    """

    def __init__(self, s: _Step) -> None:
        self._s = s

    @cached_property
    def _reservations(self) -> list[tuple[str, ReservationRecord]]:
        return list(self._s.view.typed_prefix(RESERVATION, ReservationRecord))

    @cached_property
    def _nodes_written(self) -> dict[str, NodeFacts | None]:
        """The node records this step wrote, which the index does not hold yet."""
        writes = self._s.view.writes
        return {node: node_facts(writes[NODE + node]) for node in _written(self._s, NODE)}

    @cached_property
    def _capabilities(self) -> dict[str, int | None]:
        s = self._s
        queues = cluster.queues_of(s.view, s.config, s.scratch.cluster_gpus())
        return {name: q.capability.gpu for name, q in queues.items()}

    def room(self, view: cluster.JobView, held: Mapping[str, int]) -> Room | None:
        s = self._s
        free = s.index.free
        if free is None or s.index.invalid_alerts:
            return None
        return free.room(
            view,
            reservations=self._reservations,
            now=s.now,
            held=held,
            written=self._nodes_written,
            capability=self._capabilities.get(view.queue),
            need=cluster.gang_gpus(view),
        )


def _next_expiry(s: _Step) -> float:
    """When the first reservation in force now expires: snapshots then count fewer holds."""
    return min(
        (
            r.until
            for _, r in s.view.typed_prefix(RESERVATION, ReservationRecord)
            if r.until > s.now
        ),
        default=math.inf,
    )


def _issue_resume(
    s: _Step,
    view: cluster.JobView,
    record: SuspendedRecord,
    snapshot: Snapshot,
    result: Plan,
    guard: LivelockGuard,
) -> None:
    """Resume ``view``'s job, addressed to the agent of a node its pods will run on.

    Any node agent can resume a Volcano Job (it is one API call), but only one
    on a real node consumes the command: the first node of the placement
    (the planner found one, or no resume is issued at all).
    """
    decision_id = derive_id("resume", s.origin, view.name)
    node = min(result.placement.values())
    command = YieldCommand(
        command_id=derive_id(decision_id, view.name, "resume"),
        decision_id=decision_id,
        action=CommandAction.RESUME,
        node=node,
        job=view.name,
        issued_at=s.now,
        deadline=s.now + s.config.policy.grace_s,
        reason="fits again without evicting anyone; resumes from its last checkpoint",
    )
    s.commands.append(command)
    s.put(
        SUSPENDED + view.name,
        record.model_copy(
            update={"resume_issued": s.now, "resume_node": node, "capacity_since": None}
        ),
    )
    _nominate(s, view.name, snapshot, result, decision_id)
    s.save_guard(guard.observe_resume(view.name, s.now))
    s.record(
        view.name,
        RoundOutcome.RESUME,
        command.reason,
        decision_id=decision_id,
        snapshot=snapshot,
        result=result,
        commands=(command.command_id,),
    )


def _capacity(s: _Step, view: cluster.JobView, record: SuspendedRecord, free: int | None) -> None:
    """Track how long the GPUs a resumable job needs have been free without it resuming.

    ``free``: the free GPUs of its snapshot (``cluster.free_gpus``); None when
    the job may not resume now (its backoff, or a heavier job waits): the
    capacity is not its to take, and the clock stops.
    """
    need = cluster.gang_gpus(view)
    if free is None or free < need:
        if record.capacity_since is not None:
            s.put(SUSPENDED + view.name, record.model_copy(update={"capacity_since": None}))
        return
    since = record.capacity_since
    if since is None:
        s.put(SUSPENDED + view.name, record.model_copy(update={"capacity_since": s.now}))
        return
    if s.now - since >= s.config.resume_starved_s:
        s.alert(
            derive_id("resume-starved", view.name, str(record.since)),
            AlertKind.RESUME_STARVED,
            f"{view.name} has been suspended {s.now - record.since:.0f} s; {free} GPUs have been "
            f"free for {s.now - since:.0f} s, enough for its {need}, but they are fragmented "
            "across nodes (or held for heavier jobs), so it cannot resume",
            job=view.name,
            details={"free_gpus": free, "needs_gpus": need, "suspended_since": record.since},
        )


# -- 4b. incidents: conditions watched on ticks, and those that ended (issue 13) --


def _watch_conditions(s: _Step) -> None:
    """Raise the conditions only time reveals (a checkpoint ageing, a gang waiting)."""
    views = s.jobs()
    _watch_dangling(s, views)
    # Only the jobs that can meet a condition now, in name order (as ``views``).
    names = sorted({*s.index.stale_candidates(s.now), *s.index.pending_sla})
    candidates = {name: views[name] for name in names}
    found_now = incidents.conditions(
        s.view, candidates, s.now, s.config, s.index.pods_of, s.index.groups_of
    )
    for found in found_now:
        _raise(s, found)


def _watch_dangling(s: _Step, views: Mapping[str, cluster.JobView]) -> None:
    """Since when each running gang has been below its minimum; alert past the threshold."""
    for job, _ in list(s.view.typed_prefix(DANGLING, DanglingRecord)):
        view = views.get(job)
        if view is None or not incidents.dangling(view):
            s.put(DANGLING + job, None)
    for name in sorted(s.index.dangling):  # the views for which ``incidents.dangling`` holds
        view = views[name]
        record = s.view.typed(DANGLING + view.name, DanglingRecord)
        if record is None:
            s.put(DANGLING + view.name, DanglingRecord(since=s.now))
        elif s.now - record.since >= s.config.dangling_gang_s:
            _raise(s, incidents.dangling_finding(view, record.since, s.now))


def _raise(s: _Step, found: incidents.Finding) -> None:
    """Raise a watched condition's finding as its alert (one id per incident)."""
    s.alert(
        derive_id(*found.base_id_parts),
        found.kind,
        found.message,
        job=found.job,
        severity=found.severity,
        details=found.details,
        subject=found.subject,
    )


def _resolve_ended(s: _Step) -> None:
    """Send ``resolved`` for each open incident whose condition is over.

    When none had ended at the last look and nothing ``incidents.ended`` reads
    has changed since (the alerts, suspensions, yields, queues, the views of the
    jobs with open alerts, the stuck gangs; no snapshot built in this step),
    none has now: the conditions that time alone changes only get worse (but for
    volcano-evicting, which ends after a quiet while: not remembered while one is open).
    """
    s.jobs()  # brings the epochs up to this step's writes
    epochs = None if s.snapshot_ok else _epochs(s, (ALERT, SUSPENDED, YIELD, QUEUE), ALERT_VIEWS)
    if epochs is not None and s.index.resolve_memo == epochs:
        return
    open_ = []
    later = False  # an alert raised at this step's time: looked at from the next one on
    for key in s.view.keys_with_prefix(ALERT):
        raw = s.view[key]  # filtered raw first: most records are events or resolved
        if raw.get("resolved_at") is None and raw.get("kind") in incidents.CONDITION_VALUES:
            record = s.view.typed(key, AlertRecord)
            if record is not None and record.raised_at < s.now:  # not in the step raising it
                open_.append((key[len(ALERT) :], record))
                # volcano-evicting ends by time alone (quiet for a while): never remembered
                later = later or record.kind == AlertKind.VOLCANO_EVICTING.value
            else:
                later = True
    resolved = False
    if open_:
        views = s.jobs()
        seen = incidents.Seen(views, s.snapshot_ok, frozenset(s.index.stuck), s.index.pods_of)
        for base, record in open_:
            if incidents.ended(record, s.view, seen, s.now, s.config):
                s.resolve(base, record)
                resolved = True
    if epochs is not None and not resolved and not later:
        s.index.resolve_memo = epochs


# -- 5. retention ------------------------------------------------------------


def _forget(s: _Step) -> None:
    """Delete what no later decision can need (on ticks: time passing is what ages them)."""
    config = s.config
    now = s.now
    for alert_id, alert in list(s.view.typed_prefix(ALERT, AlertRecord)):
        if now - alert.raised_at > config.alert_retention_s:
            s.put(ALERT + alert_id, None)
    window = config.policy.eviction_window_s
    for job, evictions in list(s.view.typed_prefix(EVICTIONS, EvictionsRecord)):
        recent = tuple(t for t in evictions.at if 0 <= now - t <= window)
        if len(recent) != len(evictions.at):
            s.put(EVICTIONS + job, EvictionsRecord(at=recent) if recent else None)
    if GUARD in s.view:
        s.save_guard(s.guard().pruned(now))
    stale = now - config.forget_after_s
    unnamed = _unnamed(s)
    for job in unnamed:
        progress = s.view.typed(PROGRESS + job, ProgressRecord)
        if progress is not None and progress.updated_at < stale:
            s.put(PROGRESS + job, None)
    for job in unnamed:
        suspended = s.view.typed(SUSPENDED + job, SuspendedRecord)
        if suspended is not None and max(suspended.since, suspended.resume_issued or 0.0) < stale:
            s.put(SUSPENDED + job, None)
    for job in unnamed:
        demand = s.view.typed(DEMAND + job, DemandRecord)
        if demand is not None and max(demand.last_round or 0.0, demand.decided_at or 0.0) < stale:
            s.put(DEMAND + job, None)


def _unnamed(s: _Step) -> list[str]:
    """The jobs with progress, suspension or demand records that no watched object names,
    in name order.

    Every tick used to list every job the watch knows and walk every progress
    record (16 to 33 ms at 10,000 nodes); the index keeps the jobs whose records
    outlive their objects, and this step's own writes add the few it may have
    changed (``RecordIndex.unnamed``).
    """
    s.jobs()  # the index follows this step's pods and PodGroups (once: nothing is written below)
    candidates = set(s.index.unnamed)
    for prefix in (PROGRESS, SUSPENDED, DEMAND, VJOB):
        candidates |= _written(s, prefix)
    index, records = s.index, s.view
    return sorted(job for job in candidates if not index.named(job, records))
