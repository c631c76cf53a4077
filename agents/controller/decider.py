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
   yield acknowledgement, or a tick of time);
2. housekeeping: yields past their deadline and slack raise an alert and stop
   holding their demand back; expired reservations are dropped;
3. for each job Volcano cannot place (pending, marked unschedulable), highest
   priority first: unless a round for it is in flight or cooling down
   (``DemandLedger``), build the snapshot and call the planner; a plan with
   victims becomes one ``Decision`` and one ``YieldCommand`` per victim and
   node, the victims' evictions go to the ``LivelockGuard`` (incidents become
   alerts), and the freed GPUs are nominated for the preemptor;
4. a job gpuyield suspended resumes when the planner places it without
   evicting anyone, after its backoff, and when no heavier job waits.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from gpuyield.agents.controller import aborted, cluster, deadlock, kube_facts, queue_capability
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.records import (
    ALERT,
    CLOCK,
    COMMAND,
    DEMAND,
    EVICTIONS,
    GROUP,
    GUARD,
    LEAVING,
    NODE,
    POD,
    PROGRESS,
    QUEUE,
    RESERVATION,
    SUSPENDED,
    VJOB,
    Overlay,
    Record,
    Writes,
)
from gpuyield.agents.planner import plan
from gpuyield.agents.policy.demands import DemandLedger, InFlight
from gpuyield.agents.policy.livelock import Eviction, Incident, LivelockGuard
from gpuyield.agents.policy.resume import may_resume
from gpuyield.schemas import JobState, Plan, Snapshot
from gpuyield.schemas.errors import explain_validation_error
from gpuyield.schemas.messages import (
    Alert,
    AlertKind,
    CommandAction,
    Decision,
    JobProgress,
    KubeEvent,
    KubeEventType,
    KubeKind,
    Reservation,
    ReservationState,
    Tick,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)

Input = KubeEvent | JobProgress | YieldAck | Tick
ID_NAMESPACE = uuid.UUID("6f1c7a52-8d0e-4b51-9a57-1e0c5d2f9b10")


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
    if isinstance(message, YieldAck):
        return message.acked_at
    return message.at


class _Step:
    """The mutable scratch of one step; only ``step`` below creates it."""

    def __init__(
        self, records: Mapping[str, Record], origin: str, config: ControllerConfig
    ) -> None:
        self.writes: Writes = {}
        self.view = Overlay(records, self.writes)
        self.origin = origin
        self.config = config
        self.decisions: list[Decision] = []
        self.commands: list[YieldCommand] = []
        self.alerts: list[Alert] = []
        self.reservations: list[Reservation] = []
        self.now = 0.0

    # -- records -----------------------------------------------------------
    def put(self, key: str, value: Record | None) -> None:
        if value is None and key not in self.view:
            return
        if value is not None and self.view.get(key) == value:
            return
        self.writes[key] = value

    def guard(self) -> LivelockGuard:
        raw = self.view.get(GUARD) or {}
        policy = self.config.policy
        return LivelockGuard(
            window_s=policy.eviction_window_s,
            max_evictions=policy.max_evictions,
            cycle_s=max(policy.cooldown_s, 1.0),
            backoff_base_s=self.config.resume_backoff_base_s,
            evictions=tuple(Eviction(v, b, a) for v, b, a in raw.get("evictions", ())),
            resumed_at=dict(raw.get("resumed_at", {})),
            reported=dict(raw.get("reported", {})),
        )

    def save_guard(self, guard: LivelockGuard) -> None:
        self.put(
            GUARD,
            {
                "evictions": [[e.victim, e.by, e.at] for e in guard.evictions],
                "resumed_at": dict(guard.resumed_at),
                "reported": dict(guard.reported),
            },
        )

    def ledger(self, job: str) -> DemandLedger:
        raw = self.view.get(DEMAND + job)
        if raw is None:
            return DemandLedger(cooldown_s=self.config.demand_retry_s)
        flights = {}
        if raw.get("decided_at") is not None:
            flights[job] = InFlight(frozenset(raw["victims"]), raw["deadline"], raw["decided_at"])
        rounds = {job: raw["last_round"]} if raw.get("last_round") is not None else {}
        return DemandLedger(
            cooldown_s=self.config.demand_retry_s, in_flight=flights, last_round=rounds
        )

    def save_ledger(self, job: str, ledger: DemandLedger) -> None:
        flight = ledger.in_flight.get(job)
        last = ledger.last_round.get(job)
        if flight is None and last is None:
            self.put(DEMAND + job, None)
            return
        self.put(
            DEMAND + job,
            {
                "victims": sorted(flight.victims) if flight else [],
                "deadline": flight.deadline if flight else None,
                "decided_at": flight.decided_at if flight else None,
                "last_round": last,
            },
        )

    def release(self, job: str, reason: str) -> None:
        """End ``job``'s hold on its GPUs, if it has one, and say so to the enforcers."""
        held = self.view.get(RESERVATION + job)
        if held is None:
            return
        self.put(RESERVATION + job, None)
        self.reservations.append(
            Reservation(
                job=job,
                state=ReservationState.RELEASED,
                nodes=dict(held["nodes"]),
                until=held["until"],
                decision_id=held.get("decision", ""),
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
    ) -> None:
        if ALERT + alert_id in self.view:
            return  # raised before: a replay or a repeat raises nothing new
        self.put(ALERT + alert_id, {"kind": kind.value, "raised_at": self.now, "job": job})
        self.alerts.append(
            Alert(
                alert_id=alert_id,
                kind=kind,
                severity=severity,
                job=job,
                message=message,
                raised_at=self.now,
                details=details or {},
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
) -> Outcome:
    """Apply one input message and decide; see the module docstring."""
    s = _Step(records, origin, config)
    s.now = max(float(s.view.get(CLOCK, 0.0)), message_time(message))
    s.put(CLOCK, s.now)
    if isinstance(message, KubeEvent):
        _apply_kube_event(s, message)
    elif isinstance(message, JobProgress):
        _apply_progress(s, message)
    elif isinstance(message, YieldAck):
        _apply_ack(s, message)
    _housekeeping(s)
    if s.config.adopt_aborted_jobs:  # issue 9: jobs aborted outside gpuyield resume like its own
        for job in aborted.to_adopt(s.view):
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
    return Outcome(
        s.writes,
        tuple(s.decisions),
        tuple(s.commands),
        tuple(s.alerts),
        tuple(s.reservations),
    )


# -- 1. inputs -------------------------------------------------------------


def _object_key(event: KubeEvent) -> str:
    if event.kind is KubeKind.NODE:
        return NODE + event.name
    if event.kind is KubeKind.QUEUE:
        return QUEUE + event.name
    namespace = event.namespace or "default"
    prefix = {KubeKind.POD: POD, KubeKind.POD_GROUP: GROUP, KubeKind.JOB: VJOB}[event.kind]
    return f"{prefix}{namespace}/{event.name}"


def _apply_kube_event(s: _Step, event: KubeEvent) -> None:
    key = _object_key(event)
    if event.type is KubeEventType.DELETED:
        s.put(key, None)
        return
    config = s.config
    try:
        if event.kind is KubeKind.NODE:
            record = kube_facts.node_record(
                event.object, rack_label=config.rack_label, nvlink_label=config.nvlink_label
            )
        elif event.kind is KubeKind.POD:
            record = kube_facts.pod_record(event.object)
        elif event.kind is KubeKind.POD_GROUP:
            record = kube_facts.pod_group_record(event.object)
        elif event.kind is KubeKind.JOB:
            record = kube_facts.volcano_job_record(event.object)
        else:
            record = kube_facts.queue_record(event.object)
    except kube_facts.FactError as exc:
        raise InputRejected(f"{event.kind.value} {event.name}: {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputRejected(f"{event.kind.value} {event.name}: unreadable object ({exc})") from None
    s.put(key, record)
    if event.kind is KubeKind.POD_GROUP and record["phase"] == "Running":
        _job_placed(s, f"{record['namespace']}/{record['job']}")


def _job_placed(s: _Step, job: str) -> None:
    """Volcano placed ``job``: its demand is settled and its nomination released."""
    if DEMAND + job in s.view:
        s.save_ledger(job, s.ledger(job).settled(job))
    s.release(job, "placed by Volcano")
    if SUSPENDED + job in s.view:
        s.put(SUSPENDED + job, None)
    if s.view.get(EVICTIONS + job):
        # Running again after an eviction: the cycle detector's cue.
        s.save_guard(s.guard().observe_resume(job, s.now))


def _apply_progress(s: _Step, progress: JobProgress) -> None:
    key = PROGRESS + progress.job
    old = s.view.get(key)
    if old is not None and old["updated_at"] >= progress.updated_at:
        return  # a redelivered or older summary
    s.put(key, progress.model_dump(mode="json", exclude={"v", "forwarded_at"}))


def _apply_ack(s: _Step, ack: YieldAck) -> None:
    record = s.view.get(COMMAND + ack.command_id)
    if record is None or record["status"] != "issued":
        return  # unknown, or acknowledged before: nothing changes twice
    s.put(
        COMMAND + ack.command_id,
        {**record, "status": "acked", "outcome": ack.outcome.value, "acked_at": s.now},
    )
    job = record["job"]
    _release_command(s, job, ack.command_id)
    if ack.outcome is YieldOutcome.HARD_KILLED:
        s.alert(
            derive_id("hard-killed", ack.command_id),
            AlertKind.YIELD_HARD_KILLED,
            f"{job} did not checkpoint within {record['grace_s']:.0f} s on {ack.node} and was "
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
    elif record["whole_job"] and ack.outcome is not YieldOutcome.RESUMED:
        s.put(
            SUSPENDED + job,
            {
                "since": s.now,
                "decision": record["decision_id"],
                "checkpoint_step": ack.checkpoint_step,
            },
        )


def _release_command(s: _Step, job: str, command_id: str) -> None:
    """One of ``job``'s yields ended: its demand stops waiting on it once all have.

    The pods stay marked as leaving until the watch shows them gone (the ack
    and the pod deletion travel on different topics, in either order), so the
    next round never plans with GPUs that are not free yet, nor evicts the
    same pods twice.
    """
    leaving = s.view.get(LEAVING + job)
    if leaving is None or command_id not in leaving["commands"]:
        return
    rest = [c for c in leaving["commands"] if c != command_id]
    if rest:
        s.put(LEAVING + job, {**leaving, "commands": rest})
        return
    s.put(LEAVING + job, {**leaving, "commands": [], "settled_at": s.now})
    _pods_left(s, job)


def _pods_left(s: _Step, job: str) -> None:
    """Once a settled yield's pods are gone, its demand stops waiting on it."""
    leaving = s.view.get(LEAVING + job)
    if leaving is None or leaving["commands"]:
        return
    if not _pods_gone(s, job, leaving["pods"]) and s.now - leaving["settled_at"] <= (
        LEAVING_LIMIT_S
    ):
        return
    s.put(LEAVING + job, None)
    preemptor = leaving.get("preemptor")
    if preemptor is not None:
        s.save_ledger(preemptor, s.ledger(preemptor).acknowledged(preemptor, job))


LEAVING_LIMIT_S = 600.0
"""A settled yield whose pods the watch still shows after this long is no
longer treated as leaving (the watch may have missed a deletion; a relist
will correct the records either way)."""


def _pods_gone(s: _Step, job: str, pods: list[str]) -> bool:
    namespace = job.split("/", 1)[0]
    for name in pods:
        record = s.view.get(f"{POD}{namespace}/{name}")
        if record is not None and record["phase"] not in cluster.TERMINAL_POD_PHASES:
            return False
    return True


# -- 2. housekeeping -------------------------------------------------------


def _housekeeping(s: _Step) -> None:
    for key, record in list(s.view.with_prefix(LEAVING)):
        for command_id in list(record["commands"]):
            command = s.view[COMMAND + command_id]
            if command["status"] != "issued":
                continue
            if s.now <= command["deadline"] + s.config.ack_slack_s:
                continue
            s.put(COMMAND + command_id, {**command, "status": "expired"})
            job = key[len(LEAVING) :]
            s.alert(
                derive_id("deadline-missed", command_id),
                AlertKind.YIELD_DEADLINE_MISSED,
                f"no acknowledgement from {command['node']} for the yield of {job} "
                f"{s.now - command['deadline']:.0f} s after its deadline",
                job=job,
                details={"command_id": command_id, "node": command["node"]},
            )
            _release_command(s, job, command_id)
    for key, record in list(s.view.with_prefix(LEAVING)):
        if record.get("settled_at") is not None:
            _pods_left(s, key[len(LEAVING) :])
    for key, reservation in list(s.view.with_prefix(RESERVATION)):
        if reservation["until"] <= s.now:
            s.release(key[len(RESERVATION) :], "expired before the job was placed")


# -- 3. decisions ----------------------------------------------------------


def _demands(views: Mapping[str, cluster.JobView]) -> list[cluster.JobView]:
    waiting = [v for v in views.values() if v.waiting and v.unschedulable]
    return sorted(
        waiting,
        key=lambda v: (
            -v.priority,
            v.submitted_at if v.submitted_at is not None else float("inf"),
            v.name,
        ),
    )


def _decide(s: _Step) -> None:
    plans = 0
    views = cluster.jobs(s.view, s.config)
    for found in queue_capability.check(s.view, views.values(), s.config):  # issue 9
        s.alert(
            derive_id(*found.parts),
            AlertKind.QUEUE_MISCONFIGURED,
            found.message,
            details=found.details,
        )
    if _gang_deadlock(s, views):  # issue 9: partly placed gangs that block each other
        views = cluster.jobs(s.view, s.config)
    for demand in _demands(views):
        if plans >= s.config.max_plans_per_step:
            break
        ledger = s.ledger(demand.name)
        if not ledger.may_plan(demand.name, s.now):
            continue
        plans += 1
        snapshot = cluster.snapshot(s.view, views, demand.name, s.now, s.config)
        result = plan(snapshot, demand.name, budget=s.config.planner_budget, explain=True)
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
            continue
        if not result.victims:
            # It fits without evictions: Volcano will place it; look again later.
            s.save_ledger(demand.name, ledger.tried(demand.name, s.now))
            continue
        _issue(s, demand.name, snapshot, result, ledger)
        views = cluster.jobs(s.view, s.config)  # its victims are leaving now


# -- 3b. gang deadlocks (issue 9; the logic is in controller/deadlock.py) --


def _gang_deadlock(s: _Step, views: Mapping[str, cluster.JobView]) -> bool:
    """Partial gangs blocking each other: the one whose yield loses least yields."""
    found = deadlock.resolve(
        s.view, views, s.now, s.config, lambda job: s.ledger(job).may_plan(job, s.now)
    )
    if found is None:
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
    s.put(RESERVATION + job, {"nodes": nominated, "until": until, "decision": decision_id})
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
    for victim in result.victims:
        by_node: dict[str, list[str]] = {}
        for pod in victim.pods:
            node = node_of.get((victim.job, pod))
            if node is not None:
                # the snapshot writes a name two namespaces share as namespace/name
                by_node.setdefault(node, []).append(pod.rsplit("/", 1)[-1])
        job_commands: list[str] = []
        for node in sorted(by_node):
            command = YieldCommand(
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
            deadline = max(deadline, command.deadline)
            s.commands.append(command)
            job_commands.append(command.command_id)
            s.put(
                COMMAND + command.command_id,
                {
                    "decision_id": decision_id,
                    "preemptor": preemptor,
                    "job": victim.job,
                    "node": node,
                    "pods": list(command.pods),
                    "whole_job": victim.whole_job,
                    "grace_s": victim.grace_s,
                    "deadline": command.deadline,
                    "status": "issued",
                },
            )
        previous = s.view.get(LEAVING + victim.job) or {"commands": [], "pods": []}
        s.put(
            LEAVING + victim.job,
            {
                "decision": decision_id,
                "preemptor": preemptor,
                "commands": [*previous["commands"], *job_commands],
                "pods": sorted({*previous["pods"], *(p.rsplit("/", 1)[-1] for p in victim.pods)}),
            },
        )
        s.put(EVICTIONS + victim.job, [*s.view.get(EVICTIONS + victim.job, []), s.now])
        guard, incidents = guard.observe_eviction(victim.job, preemptor, s.now)
        for incident in incidents:
            s.livelock(incident)
        ids.extend(job_commands)
    s.save_guard(guard)
    victims = frozenset(v.job for v in result.victims)
    s.save_ledger(preemptor, ledger.decided(preemptor, victims, s.now, deadline))
    _nominate(s, preemptor, snapshot, result, decision_id)
    s.decisions.append(
        Decision(
            decision_id=decision_id,
            demand=preemptor,
            decided_at=s.now,
            snapshot=snapshot,
            plan=result,
            commands=tuple(ids),
        )
    )


# -- 4. resume -------------------------------------------------------------


def _resume(s: _Step) -> None:
    suspended = [k[len(SUSPENDED) :] for k, _ in s.view.with_prefix(SUSPENDED)]
    if not suspended:
        return
    views = cluster.jobs(s.view, s.config)
    waiting = [v.priority for v in _demands(views)]
    guard = s.guard()
    candidates = sorted(
        (views[name] for name in suspended if name in views),
        key=lambda v: (-v.priority, v.name),
    )
    for view in candidates:
        if view.state is not JobState.SUSPENDED:
            continue
        record = s.view[SUSPENDED + view.name]
        not_before = record["since"] + guard.resume_delay(view.name, s.now)
        if record.get("resume_issued"):
            continue
        if not may_resume(view.priority, s.now, not_before, waiting):
            continue
        snapshot = cluster.snapshot(s.view, views, view.name, s.now, s.config)
        result = plan(snapshot, view.name, budget=s.config.planner_budget, explain=True)
        if not result.feasible or result.victims:
            continue
        decision_id = derive_id("resume", s.origin, view.name)
        node = min(result.placement.values()) if result.placement else ""
        command = YieldCommand(
            command_id=derive_id(decision_id, view.name, "resume"),
            decision_id=decision_id,
            action=CommandAction.RESUME,
            node=node or "cluster",
            job=view.name,
            issued_at=s.now,
            deadline=s.now + s.config.policy.grace_s,
            reason="fits again without evicting anyone; resumes from its last checkpoint",
        )
        s.commands.append(command)
        s.put(SUSPENDED + view.name, {**record, "resume_issued": s.now})
        _nominate(s, view.name, snapshot, result, decision_id)
        s.save_guard(guard.observe_resume(view.name, s.now))
        s.decisions.append(
            Decision(
                decision_id=decision_id,
                demand=view.name,
                decided_at=s.now,
                snapshot=snapshot,
                plan=result,
                commands=(command.command_id,),
            )
        )
        return  # one resume per step: the next step sees its GPUs as nominated
