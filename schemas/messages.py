"""Messages on the controller's Kafka topics, format v1.

Every message carries ``v``, its format version. A reader that meets a version
it does not know must not guess: it sends the bytes to
``gpuyield.dead-letters`` with the reason (see ``decode``). Times are Unix
seconds (floats), as in the snapshot contract, so a decision record replays
exactly. Job names are ``namespace/name``: one Volcano Job, one PodGroup.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from gpuyield.schemas.base import FormatVersion, FormatVersion1or2, WireModel
from gpuyield.schemas.config import ControllerConfig
from gpuyield.schemas.plan import Plan
from gpuyield.schemas.snapshot import Snapshot

NonEmpty = Field(min_length=1, max_length=512)

MAX_UNIX_TIME = 4_102_444_800.0
"""2100-01-01T00:00:00Z. A time past it (or before 1970) is a broken clock or a
forged field, never a real event: such a message is refused with the field
named, so one bad producer cannot push the decider's clock to infinity."""

MAX_SAFE_INT = 2**53 - 1
"""The largest integer every JSON reader keeps exactly (IEEE doubles)."""

MAX_SECONDS = 10 * 365 * 86400.0
"""Ten years: a bound on every duration a message carries (grace, time taken)."""

MAX_GPUS = 1_000_000
"""GPUs one command can name: far above any cluster, far below an overflow."""

UnixTime = Annotated[float, Field(ge=0, le=MAX_UNIX_TIME)]
Count = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]


class KubeEventType(StrEnum):
    """The watch event types, plus the deletions a relist discovers."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class KubeKind(StrEnum):
    """The objects gpuyield watches."""

    NODE = "Node"
    POD = "Pod"
    JOB = "Job"  # batch.volcano.sh/v1alpha1
    POD_GROUP = "PodGroup"  # scheduling.volcano.sh/v1beta1
    QUEUE = "Queue"  # scheduling.volcano.sh/v1beta1


class KubeEvent(WireModel):
    """One change of one watched object, as the API server reported it.

    ``object`` is the object as the API serves it (JSON), so the controller can
    read fields this schema does not name and an audit sees what the server
    said. A deletion found by a relist (the object vanished while the watch
    was down) is a ``DELETED`` event with the last object seen.
    """

    v: FormatVersion = 1
    type: KubeEventType
    kind: KubeKind
    namespace: str | None = None
    name: str = NonEmpty
    resource_version: str = ""
    object: dict[str, Any]
    observed_at: UnixTime

    @property
    def key(self) -> str:
        """The Kafka key: one object's changes stay ordered on one partition."""
        return (
            f"{self.kind.value}/{self.namespace}/{self.name}"
            if self.namespace
            else (f"{self.kind.value}/{self.name}")
        )


class Heartbeat(WireModel):
    """A training pod's progress report (the trainer SDK sends one every few seconds)."""

    v: FormatVersion = 1
    job: str = NonEmpty
    pod: str = NonEmpty
    rank: int = Field(0, ge=0, le=1_000_000)
    step: Count
    total_steps: int | None = Field(None, ge=1, le=MAX_SAFE_INT)
    progress: float = Field(ge=0, le=1)
    last_checkpoint_step: Count | None = None
    last_checkpoint_at: UnixTime | None = None
    checkpoint_interval_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    sent_at: UnixTime


class JobProgress(WireModel):
    """One job's progress as the controller keeps it (the progress table's value).

    The progress agent folds heartbeats into it and forwards it to the decider
    on ``gpuyield.job-progress`` when something that moves a decision changed
    (a new checkpoint, a percent of progress, or a minute passed), so the
    decider sees every job without reading every heartbeat.
    """

    v: FormatVersion = 1
    job: str = NonEmpty
    step: Count
    progress: float = Field(ge=0, le=1)
    step_rate: float = Field(0.0, ge=0, le=1e9, description="Steps per second, smoothed.")
    last_checkpoint_step: Count | None = None
    last_checkpoint_at: UnixTime | None = None
    checkpoint_interval_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    first_seen_at: UnixTime
    updated_at: UnixTime
    forwarded_at: UnixTime | None = None
    clock_offset_s: float | None = Field(
        None,
        description=(
            "How far the trainer's clock was off the worker's when it was beyond the skew "
            "bound: its times here were corrected by it. None: within the bound."
        ),
    )


PROGRESS_BATCH_MAX = 256
"""Summaries one ``JobProgressBatch`` carries at most: a summary's JSON is at most about 2.5 KiB
(a job name of 512 characters, each up to 4 bytes of UTF-8), so a batch stays under Kafka's
default 1 MiB message limit, which the job-progress topic keeps."""


class JobProgressBatch(WireModel):
    """The summaries one progress agent forwards after one batch of heartbeats, in one message.

    The decider takes each message on its input topics as one step, with a
    journal entry and its clock's changelog record; one message per forwarded
    summary made those most of what the decider did per heartbeat. A batch is
    one step: every summary applied in order, then one round of decisions.
    A document that is a bare ``JobProgress`` (the simulator's event logs,
    records written before batches) reads as a batch of that one summary.
    """

    v: FormatVersion = 1
    summaries: tuple[JobProgress, ...] = Field(min_length=1, max_length=PROGRESS_BATCH_MAX)

    @model_validator(mode="before")
    @classmethod
    def _one_summary_is_a_batch(cls, data: Any) -> Any:
        # With a validator before it, pydantic reads the JSON into Python objects first and
        # validates those, strictly: a JSON array is then a list, which a strict tuple
        # refuses, so the summaries' array is taken as the tuple it stands for.
        if not isinstance(data, dict):
            return data
        if "summaries" in data:
            summaries = data["summaries"]
            return {**data, "summaries": tuple(summaries)} if isinstance(summaries, list) else data
        return {"v": 1, "summaries": (data,)} if "job" in data else data


class Tick(WireModel):
    """The passage of time, for the decider: deadlines and retries fire on ticks.

    Each worker sends one every few seconds; only the decider's owner reads
    them, and a duplicate tick changes nothing.
    """

    v: FormatVersion = 1
    at: UnixTime


class CommandAction(StrEnum):
    """What a node agent is asked to do."""

    YIELD = "yield"
    RESUME = "resume"


class YieldCommand(WireModel):
    """Ask one node's agent to make the named pods of one job yield (or a job resume).

    ``command_id`` is the idempotency key: the same decision always produces the
    same ids, and a node agent executes an id once however often Kafka
    redelivers it. Keyed by ``node`` on the topic.
    """

    v: FormatVersion = 1
    command_id: str = NonEmpty
    decision_id: str = NonEmpty
    action: CommandAction = CommandAction.YIELD
    node: str = NonEmpty
    job: str = NonEmpty
    pods: tuple[str, ...] = ()
    whole_job: bool = Field(
        True,
        description=(
            "False when only surplus pods of an elastic job yield: the job keeps running "
            "on its other pods and must not be suspended."
        ),
    )
    gpus: int = Field(0, ge=0, le=MAX_GPUS, description="GPUs the named pods hold (0: unknown).")
    grace_s: float = Field(120.0, ge=0, le=MAX_SECONDS)
    issued_at: UnixTime
    deadline: UnixTime
    reason: str = ""


class YieldOutcome(StrEnum):
    """How a yield ended."""

    CHECKPOINTED = "checkpointed"  # the trainer saved an emergency checkpoint, then exited
    EXITED = "exited"  # the pods exited within the grace period without a new checkpoint
    HARD_KILLED = "hard_killed"  # the deadline passed; the pods were killed
    RESUMED = "resumed"  # a resume command was carried out
    FAILED = "failed"  # the agent could not act (the reason says why)


class YieldAck(WireModel):
    """A node agent's report on one command; keyed by job."""

    v: FormatVersion = 1
    command_id: str = NonEmpty
    decision_id: str = ""
    node: str = NonEmpty
    job: str = NonEmpty
    outcome: YieldOutcome
    checkpoint_step: Count | None = None
    seconds_taken: Seconds = 0.0
    gpu_seconds_lost: float = Field(0.0, ge=0, le=MAX_GPUS * MAX_SECONDS)
    detail: str = ""
    acked_at: UnixTime


class RoundOutcome(StrEnum):
    """What one decider round for a demand (or a suspended job's resume) came to.

    The first four ran the planner; the ``skipped-*`` ones did not, and their
    decision carries no snapshot or plan (format v2, see ``Decision``).
    """

    YIELD = "yield"  # victims chosen: yield commands issued
    RESUME = "resume"  # a suspended job fits again: a resume command issued
    NO_VICTIMS = "no-victims"  # it fits without evicting anyone: left to Volcano
    UNSERVABLE = "unservable"  # no plan, even evicting every eligible job
    SKIPPED_YIELDING = "skipped-yielding"  # its previous round's victims are still leaving
    SKIPPED_HELD = "skipped-held"  # GPUs are held for it until Volcano places it
    SKIPPED_COOLDOWN = "skipped-cooldown"  # planned lately: the retry cooldown (or backoff) runs


class Decision(WireModel):
    """One decider round for one demand, with everything needed to explain and replay it.

    ``snapshot`` is the planner's whole input and ``plan`` its whole output
    (candidates and verdicts included), so ``gpuyield plan`` on the snapshot
    gives the same plan byte for byte. Keyed by the demand.

    Every round that considered a demand is one decision (``outcome``): the
    yields and resumes, and also the rounds that found no plan or were
    skipped, with ``reason``. A skipped round ran no planner, so it has no
    snapshot and no plan: it is written as format ``v: 2``, which a reader
    that knows only v1 refuses (to its dead letters) rather than guesses at.
    A decision that ran the planner stays v1, readable as before: the fields
    added since (``outcome``, ``reason``, ``origin``) are ones a v1 reader
    ignores. ``origin`` is the position of the input whose step made it
    (``topic/partition/offset``), which ``gpuyield replay`` matches on.
    """

    v: FormatVersion1or2 = 1
    decision_id: str = NonEmpty
    demand: str = NonEmpty
    decided_at: UnixTime
    snapshot: Snapshot | None = None
    plan: Plan | None = None
    commands: tuple[str, ...] = ()
    skipped: str = Field("", description="Why no command was issued although the plan evicts.")
    outcome: RoundOutcome | None = Field(
        None, description="None in decisions written before it existed: a yield or a resume."
    )
    reason: str = Field("", description="Why the round came to its outcome, in words.")
    origin: str = Field("", description="The input's position, topic/partition/offset.")

    @model_validator(mode="after")
    def _version_fits(self) -> Decision:
        planned = self.snapshot is not None and self.plan is not None
        if self.v == 1 and not planned:
            raise ValueError("a v1 decision carries its snapshot and plan (v2: a skipped round)")
        if self.v == 2 and (self.snapshot is not None or self.plan is not None):
            raise ValueError("a v2 decision is a skipped round: no snapshot and no plan")
        return self


class JournalStart(WireModel):
    """What the decider's table held when a worker took the decider over (or started it).

    ``records == 0`` is the empty table of a new deployment: a replay can
    start there. A later start (a restart, a new owner after a rebalance)
    names the table it recovered by its ``digest``, so a replay checks that
    it rebuilt the same state. ``config`` is the decider's configuration
    then: a replay decides under it unless told otherwise (a what-if).
    """

    records: Count
    digest: str = NonEmpty
    config: ControllerConfig


class JournalEntry(WireModel):
    """One input the decider took, in the order it took them (``gpuyield.decider-journal``).

    The decider reads four single-partition topics as one stream; the order
    in which they were interleaved exists nowhere else. Each input it
    processes is journalled first, by its position (``topic``, ``partition``,
    ``offset``, the topic with any deployment prefix, as the input's
    ``origin`` names it), so ``gpuyield replay`` can feed the same inputs to
    the pure step in the same order. ``start`` is set on the first input a
    worker processes as the decider's owner.
    """

    v: FormatVersion = 1
    topic: str = NonEmpty
    partition: Count
    offset: Count
    at: UnixTime = Field(description="When the decider took it, by its worker's clock.")
    start: JournalStart | None = None

    @property
    def origin(self) -> str:
        """The step's ``origin`` for this input: ``topic/partition/offset``."""
        return f"{self.topic}/{self.partition}/{self.offset}"


class ReservationState(StrEnum):
    """Whether GPUs are held for a preemptor, or no longer."""

    HELD = "held"
    RELEASED = "released"


class Reservation(WireModel):
    """GPUs held for one preemptor until it is placed, or until ``until``.

    The decider emits ``held`` when it issues the yields that free the GPUs
    (before any command goes out) and ``released`` when the preemptor is
    placed, the hold expires, or the job is gone. Enforcers (the Kubernetes
    taint reconciler, the demo's simulated Volcano) make the scheduler honour
    it; ``nodes`` maps each node to the GPUs held there. Keyed by the job.
    """

    v: FormatVersion = 1
    job: str = NonEmpty
    state: ReservationState
    nodes: dict[str, int] = Field(default_factory=dict)
    until: UnixTime
    decision_id: str = ""
    reason: str = ""
    at: UnixTime


class AlertKind(StrEnum):
    """What subscribers can alert on."""

    LIVELOCK = "livelock"
    YIELD_HARD_KILLED = "yield-hard-killed"
    YIELD_DEADLINE_MISSED = "yield-deadline-missed"
    DEMAND_UNSERVABLE = "demand-unservable"
    RESUME_STARVED = "resume-starved"
    """A suspended job may resume and its GPUs have been free for long, yet it did not
    fit (fragmented, or held for heavier jobs): ``ControllerConfig.resume_starved_s``."""
    # Volcano's own preempt/reclaim (or gangpreempt/gangreclaim) is on beside gpuyield:
    # raised by the worker's start-up check of the scheduler's ConfigMap.
    VOLCANO_PREEMPTING = "volcano-preempting"
    # issue 9, the live path (each meaning its own kind):
    INVALID_INPUT = "invalid-input"  # the records describe a cluster no snapshot can hold
    YIELD_FAILED = "yield-failed"  # a node agent could not act on a yield (FAILED ack)
    QUEUE_MISCONFIGURED = "queue-misconfigured"  # a queue Volcano reads otherwise than intended
    GANG_DEADLOCK = "gang-deadlock"  # partly placed gangs block each other
    # A reservation could not be applied or released on the cluster (Kubernetes API).
    RESERVATION_FAILED = "reservation-failed"
    # An input stamped beyond the decider's clock skew bound, or a poisoned clock repaired.
    CLOCK_SKEW = "clock-skew"
    # A waiting job with an SLA (gpuyield.io/sla-seconds) used sla_risk_share of its budget:
    # production's claim now overrides cooldowns, eviction limits and W_eff protection.
    SLA_AT_RISK = "sla-at-risk"
    # issue 13: conditions seen on ticks (agents/controller/incidents.py)
    CHECKPOINT_STALE = "checkpoint-stale"  # a preemptable job's newest checkpoint is too old
    PENDING_PAST_SLA = "pending-past-sla"  # a high-priority gang waited past its SLA budget
    DANGLING_GANG = "dangling-gang"  # a running gang below its minAvailable for too long
    # Pods evicted by a scheduler beside gpuyield (Volcano's preempt/reclaim), seen from the
    # watch (agents/controller/volcano_evictions.py); volcano-preempting is the configuration.
    VOLCANO_EVICTING = "volcano-evicting"


class AlertState(StrEnum):
    """An incident's alert is raised once (``firing``) and ends once (``resolved``)."""

    FIRING = "firing"
    RESOLVED = "resolved"


class Alert(WireModel):
    """Something a human should know; ``alert_id`` is stable, so a replay raises it once.

    One incident is one ``alert_id``: it is sent ``firing`` when the incident
    starts and, for the kinds whose condition can end, once more ``resolved``
    (with ``resolved_at``) when it ends. Subscribers key on
    ``(alert_id, state)``.
    """

    v: FormatVersion = 1
    alert_id: str = NonEmpty
    kind: AlertKind
    severity: Literal["info", "warning", "critical"] = "warning"
    job: str | None = None
    message: str
    raised_at: UnixTime
    details: dict[str, Any] = Field(default_factory=dict)
    state: AlertState = AlertState.FIRING
    resolved_at: UnixTime | None = None


class DeadLetter(WireModel):
    """A message no agent could read, kept with why and where it came from.

    A dead letter must always fit the producer's request limit (1 MiB by
    default in Kafka and Tansu), or the bad message would be lost with it and
    the agent that tried to send it would stop on it. So the original bytes
    are kept whole when they fit (``truncated`` false) and otherwise as a
    bounded prefix, with the original size and SHA-256 so the message can
    still be identified in the source topic (at ``offset``) and checked.
    """

    v: FormatVersion = 1
    reason: str = Field(max_length=8192)
    source_topic: str
    partition: Count
    offset: Count
    key: str | None = Field(None, description="The original key, base64 (a prefix if truncated).")
    value: str = Field(description="The original bytes, base64 (a prefix if truncated).")
    received_at: UnixTime
    truncated: bool = Field(False, description="True when key or value holds only a prefix.")
    value_size: int | None = Field(None, ge=0, description="The original value's size in bytes.")
    value_sha256: str | None = Field(None, description="The original value's SHA-256, hex.")
