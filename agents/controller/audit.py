"""One job's history, from the record alone: ``gpuyield audit JOB``.

"Why was my job evicted?" is answered from what the topics (or the archive)
hold, never from anyone's memory: the watch events, heartbeats, decisions,
commands, acks, reservations and alerts that name the job. This module is the
pure part: recorded messages in, a ``JobHistory`` out. Reading Kafka or the
archive is the CLI's job.

What counts as "considered": every decision whose plan lists the job among its
candidates (taken, spared or ineligible, with the rule that said so), or
whose demand it was. A message that cannot be decoded is counted, never
guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuyield.schemas.decoding import MessageError, decode
from gpuyield.schemas.labels import JOB_LABEL
from gpuyield.schemas.messages import (
    Alert,
    CommandAction,
    Decision,
    Heartbeat,
    JobProgressBatch,
    KubeEvent,
    KubeKind,
    Reservation,
    RoundOutcome,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)
from gpuyield.schemas.plan import Candidate, Victim

CHEAPER_PLAN = "a cheaper plan existed without it"
"""Why an eligible, unprotected candidate was spared."""

FINISHED_PHASES = frozenset({"Completed", "Failed", "Terminated"})

TOPIC_MODELS: Mapping[str, type[BaseModel]] = {
    "gpuyield.kube-events": KubeEvent,
    "gpuyield.heartbeats": Heartbeat,
    "gpuyield.job-progress": JobProgressBatch,  # a bare summary reads as a batch of one
    "gpuyield.decisions": Decision,
    "gpuyield.yield-commands": YieldCommand,
    "gpuyield.yield-acks": YieldAck,
    "gpuyield.reservations": Reservation,
    "gpuyield.alerts": Alert,
}
"""The topics an audit reads, by their canonical (unprefixed) names."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """One message as a topic or the archive holds it."""

    topic: str  # canonical name, without a deployment's prefix
    partition: int
    offset: int
    timestamp_ms: int | None
    value: bytes | None


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True)


class Considered(_Report):
    """One decision that weighed the job."""

    decision_id: str
    at: float
    preemptor: str
    role: Literal["preemptor", "victim", "spared", "ineligible", "resumed"]
    rule: str = Field(description="The victim's reason, or the rule that spared or excluded it.")
    w_eff: float | None = None
    lost_gpu_seconds: float | None = Field(
        None, description="The work the job lost (a victim) or would have lost (spared)."
    )


class YieldRecord(_Report):
    """One command addressed to the job's pods, with its acknowledgement if one came."""

    command_id: str
    action: str
    node: str
    issued_at: float = Field(
        description="When the command was issued; without a recorded command (an ack alone, "
        "as in a simulated run's log), when the yield began: the ack's time less its seconds."
    )
    command_recorded: bool = True
    pods: tuple[str, ...] = ()
    outcome: str | None = None
    acked_at: float | None = None
    seconds_taken: float | None = None
    gpu_seconds_lost: float | None = None
    checkpoint_step: int | None = None


class Progress(_Report):
    """The job's heartbeats, summarised."""

    heartbeats: int = 0
    first_step: int | None = None
    last_step: int | None = None
    last_progress: float | None = None
    checkpoints: int = Field(0, description="Distinct checkpoint steps reported.")
    last_checkpoint_step: int | None = None
    last_checkpoint_at: float | None = None


class JobHistory(_Report):
    job: str
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    final_phase: str | None = None
    progress: Progress = Progress()
    considered: tuple[Considered, ...] = ()
    yields: tuple[YieldRecord, ...] = ()
    suspended_at: tuple[float, ...] = ()
    resumed: tuple[YieldRecord, ...] = ()
    resumed_from_step: int | None = Field(
        None, description="The checkpoint step of the last yield before the last resume."
    )
    alerts: tuple[str, ...] = ()
    messages: int = Field(0, description="Messages that named the job.")
    unreadable: int = Field(0, description="Messages read that could not be decoded.")


def _time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _event_job(event: KubeEvent) -> str | None:
    namespace = event.namespace
    if namespace is None:
        return None
    if event.kind is KubeKind.JOB:
        return f"{namespace}/{event.name}"
    labels = (event.object.get("metadata") or {}).get("labels") or {}
    if event.kind is KubeKind.POD and isinstance(labels.get(JOB_LABEL), str):
        return f"{namespace}/{labels[JOB_LABEL]}"
    if event.kind is KubeKind.POD_GROUP:
        owners = (event.object.get("metadata") or {}).get("ownerReferences") or ()
        for owner in owners:
            if isinstance(owner, dict) and owner.get("kind") == "Job" and owner.get("name"):
                return f"{namespace}/{owner['name']}"
        return f"{namespace}/{event.name}"
    return None


def considered(decision: Decision, job: str) -> Considered | None:
    """How ``decision`` weighed ``job`` (its demand, a victim, spared, ineligible), or None."""
    plan = decision.plan
    base: dict[str, Any] = {"decision_id": decision.decision_id, "at": decision.decided_at}
    if decision.demand == job:
        resume = (
            decision.outcome is RoundOutcome.RESUME
            if decision.outcome is not None
            else plan is not None and not plan.victims and bool(decision.commands)
        )
        explained = "; ".join(plan.explanation[-1:]) if plan is not None else ""
        outcome = f"{decision.outcome.value}: " if decision.outcome is not None else ""
        return Considered(
            **base,
            preemptor=job,
            role="resumed" if resume else "preemptor",
            rule=f"{outcome}{decision.reason or explained}" or ("resumed" if resume else ""),
        )
    if plan is None:
        return None
    for victim in plan.victims:
        if victim.job == job:
            return victim_considered(decision, victim)
    for candidate in plan.candidates:
        if candidate.job == job:
            return candidate_considered(decision, candidate)
    return None


def victim_considered(decision: Decision, victim: Victim) -> Considered:
    """How ``decision`` weighed ``victim``: taken, with the rule that chose it."""
    return Considered(
        decision_id=decision.decision_id,
        at=decision.decided_at,
        preemptor=decision.demand,
        role="victim",
        rule=victim.reason,
        w_eff=victim.w_eff,
        lost_gpu_seconds=victim.lost_gpu_seconds,
    )


def candidate_considered(decision: Decision, candidate: Candidate) -> Considered:
    """How ``decision`` weighed a candidate it did not take: spared or ineligible, and why.

    The first rule that refused it or protected it is the reason; an eligible,
    unprotected candidate was spared because a cheaper plan existed.
    """
    refusals = [v for v in candidate.verdicts if not v.allowed or v.protected]
    rule = f"{refusals[0].rule}: {refusals[0].reason}" if refusals else CHEAPER_PLAN
    return Considered(
        decision_id=decision.decision_id,
        at=decision.decided_at,
        preemptor=decision.demand,
        role="ineligible" if candidate.outcome == "ineligible" else "spared",
        rule=rule,
        w_eff=candidate.w_eff,
        lost_gpu_seconds=candidate.lost_gpu_seconds,
    )


def history(job: str, recorded: Iterable[Recorded]) -> JobHistory | None:
    """``job``'s history from ``recorded`` (any order); None when no message names it."""
    messages = 0
    unreadable = 0
    submitted: float | None = None
    started: float | None = None
    finished: float | None = None
    final: str | None = None
    beats = 0
    first_step: int | None = None
    last_beat: Heartbeat | None = None
    checkpoints: set[int] = set()
    weighed: list[Considered] = []
    commands: dict[str, YieldCommand] = {}
    acks: dict[str, YieldAck] = {}
    suspended: list[float] = []
    aborted: list[float] = []  # the Volcano Job's own Aborted phase, as watched
    alerts: list[str] = []
    ordered = sorted(recorded, key=lambda r: (r.timestamp_ms or 0, r.topic, r.partition, r.offset))
    for item in ordered:
        model = TOPIC_MODELS.get(item.topic)
        if model is None:
            continue
        try:
            message = decode(model, item.value)
        except MessageError:
            unreadable += 1
            continue
        if isinstance(message, KubeEvent):
            if _event_job(message) != job:
                continue
            messages += 1
            meta = message.object.get("metadata") or {}
            if message.kind is KubeKind.JOB:
                created = _time(meta.get("creationTimestamp"))
                submitted = created if submitted is None else min(submitted, created or submitted)
                phase = ((message.object.get("status") or {}).get("state") or {}).get("phase")
                if phase == "Running" and started is None:
                    started = message.observed_at
                if phase in FINISHED_PHASES:
                    finished, final = message.observed_at, str(phase)
                if phase == "Aborted" and (not aborted or aborted[-1] != message.observed_at):
                    aborted.append(message.observed_at)
            elif message.kind is KubeKind.POD_GROUP:
                phase = (message.object.get("status") or {}).get("phase")
                if phase == "Running" and started is None:
                    started = message.observed_at
        elif isinstance(message, Heartbeat):
            if message.job != job:
                continue
            messages += 1
            beats += 1
            first_step = message.step if first_step is None else min(first_step, message.step)
            if last_beat is None or message.sent_at >= last_beat.sent_at:
                last_beat = message
            if message.last_checkpoint_step is not None:
                checkpoints.add(message.last_checkpoint_step)
        elif isinstance(message, Decision):
            entry = considered(message, job)
            if entry is not None:
                messages += 1
                weighed.append(entry)
        elif isinstance(message, YieldCommand):
            if message.job == job:
                messages += 1
                commands[message.command_id] = message
        elif isinstance(message, YieldAck):
            if message.job == job:
                messages += 1
                acks[message.command_id] = message
        elif isinstance(message, Alert):
            if message.job == job:
                messages += 1
                alerts.append(f"{message.kind.value}: {message.message}")
        elif (isinstance(message, Reservation) and message.job == job) or (
            isinstance(message, JobProgressBatch) and any(s.job == job for s in message.summaries)
        ):
            messages += 1
    if messages == 0:
        return None
    yields: list[YieldRecord] = []
    resumed: list[YieldRecord] = []
    resumed_from: int | None = None
    last_checkpoint_step: int | None = None
    for command in sorted(commands.values(), key=lambda c: (c.issued_at, c.command_id)):
        ack = acks.get(command.command_id)
        record = YieldRecord(
            command_id=command.command_id,
            action=command.action.value,
            node=command.node,
            issued_at=command.issued_at,
            pods=command.pods,
            outcome=ack.outcome.value if ack else None,
            acked_at=ack.acked_at if ack else None,
            seconds_taken=ack.seconds_taken if ack else None,
            gpu_seconds_lost=ack.gpu_seconds_lost if ack else None,
            checkpoint_step=ack.checkpoint_step if ack else None,
        )
        if command.action is CommandAction.RESUME:
            resumed.append(record)
            resumed_from = last_checkpoint_step
            continue
        yields.append(record)
        if ack is not None and ack.outcome in (
            YieldOutcome.CHECKPOINTED,
            YieldOutcome.EXITED,
            YieldOutcome.HARD_KILLED,
        ):
            if command.whole_job:
                suspended.append(ack.acked_at)
            if ack.checkpoint_step is not None:
                last_checkpoint_step = ack.checkpoint_step
    for ack in sorted(acks.values(), key=lambda a: (a.acked_at, a.command_id)):
        if ack.command_id in commands or ack.outcome is YieldOutcome.RESUMED:
            continue
        # An ack whose command is not on the record (a simulated run's log records no
        # command): the yield is still the node agent's word.
        yields.append(
            YieldRecord(
                command_id=ack.command_id,
                action=CommandAction.YIELD.value,
                node=ack.node,
                issued_at=max(0.0, ack.acked_at - ack.seconds_taken),
                command_recorded=False,
                outcome=ack.outcome.value,
                acked_at=ack.acked_at,
                seconds_taken=ack.seconds_taken,
                gpu_seconds_lost=ack.gpu_seconds_lost,
                checkpoint_step=ack.checkpoint_step,
            )
        )
    yields.sort(key=lambda y: (y.issued_at, y.command_id))
    if not suspended:
        suspended = aborted  # no whole-job yield on the record: Volcano's word for it
    progress = Progress(
        heartbeats=beats,
        first_step=first_step,
        last_step=last_beat.step if last_beat else None,
        last_progress=last_beat.progress if last_beat else None,
        checkpoints=len(checkpoints),
        last_checkpoint_step=last_beat.last_checkpoint_step if last_beat else None,
        last_checkpoint_at=last_beat.last_checkpoint_at if last_beat else None,
    )
    return JobHistory(
        job=job,
        submitted_at=submitted,
        started_at=started,
        finished_at=finished,
        final_phase=final,
        progress=progress,
        considered=tuple(weighed),
        yields=tuple(yields),
        suspended_at=tuple(suspended),
        resumed=tuple(resumed),
        resumed_from_step=resumed_from,
        alerts=tuple(alerts),
        messages=messages,
        unreadable=unreadable,
    )
