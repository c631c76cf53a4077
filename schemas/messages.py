"""Messages on the controller's Kafka topics, format v1.

Every message carries ``v``, its format version. A reader that meets a version
it does not know must not guess: it sends the bytes to
``gpuyield.dead-letters`` with the reason (see ``decode``). Times are Unix
seconds (floats), as in the snapshot contract, so a decision record replays
exactly. Job names are ``namespace/name``: one Volcano Job, one PodGroup.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from gpuyield.schemas.base import WireModel
from gpuyield.schemas.plan import Plan
from gpuyield.schemas.snapshot import Snapshot

NonEmpty = Field(min_length=1, max_length=512)


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

    v: Literal[1] = 1
    type: KubeEventType
    kind: KubeKind
    namespace: str | None = None
    name: str = NonEmpty
    resource_version: str = ""
    object: dict[str, Any]
    observed_at: float

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

    v: Literal[1] = 1
    job: str = NonEmpty
    pod: str = NonEmpty
    rank: int = Field(0, ge=0)
    step: int = Field(ge=0)
    total_steps: int | None = Field(None, ge=1)
    progress: float = Field(ge=0, le=1)
    last_checkpoint_step: int | None = Field(None, ge=0)
    last_checkpoint_at: float | None = None
    checkpoint_interval_s: float | None = Field(None, gt=0)
    sent_at: float


class JobProgress(WireModel):
    """One job's progress as the controller keeps it (the progress table's value).

    The progress agent folds heartbeats into it and forwards it to the decider
    on ``gpuyield.job-progress`` when something that moves a decision changed
    (a new checkpoint, a percent of progress, or a minute passed), so the
    decider sees every job without reading every heartbeat.
    """

    v: Literal[1] = 1
    job: str = NonEmpty
    step: int = Field(ge=0)
    progress: float = Field(ge=0, le=1)
    step_rate: float = Field(0.0, ge=0, description="Steps per second, smoothed.")
    last_checkpoint_step: int | None = Field(None, ge=0)
    last_checkpoint_at: float | None = None
    checkpoint_interval_s: float | None = Field(None, gt=0)
    first_seen_at: float
    updated_at: float
    forwarded_at: float | None = None


class Tick(WireModel):
    """The passage of time, for the decider: deadlines and retries fire on ticks.

    Each worker sends one every few seconds; only the decider's owner reads
    them, and a duplicate tick changes nothing.
    """

    v: Literal[1] = 1
    at: float


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

    v: Literal[1] = 1
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
    gpus: int = Field(0, ge=0, description="GPUs the named pods hold (0: unknown).")
    grace_s: float = Field(120.0, ge=0)
    issued_at: float
    deadline: float
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

    v: Literal[1] = 1
    command_id: str = NonEmpty
    decision_id: str = ""
    node: str = NonEmpty
    job: str = NonEmpty
    outcome: YieldOutcome
    checkpoint_step: int | None = Field(None, ge=0)
    seconds_taken: float = Field(0.0, ge=0)
    gpu_seconds_lost: float = Field(0.0, ge=0)
    detail: str = ""
    acked_at: float


class Decision(WireModel):
    """One planner run, with everything needed to explain and replay it.

    ``snapshot`` is the planner's whole input and ``plan`` its whole output
    (candidates and verdicts included), so ``gpuyield plan`` on the snapshot
    gives the same plan byte for byte. Keyed by the preemptor.
    """

    v: Literal[1] = 1
    decision_id: str = NonEmpty
    demand: str = NonEmpty
    decided_at: float
    snapshot: Snapshot
    plan: Plan
    commands: tuple[str, ...] = ()
    skipped: str = Field("", description="Why no command was issued although the plan evicts.")


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

    v: Literal[1] = 1
    job: str = NonEmpty
    state: ReservationState
    nodes: dict[str, int] = Field(default_factory=dict)
    until: float
    decision_id: str = ""
    reason: str = ""
    at: float


class AlertKind(StrEnum):
    """What subscribers can alert on."""

    LIVELOCK = "livelock"
    YIELD_HARD_KILLED = "yield-hard-killed"
    YIELD_DEADLINE_MISSED = "yield-deadline-missed"
    DEMAND_UNSERVABLE = "demand-unservable"
    # A reservation could not be applied or released on the cluster (Kubernetes API).
    RESERVATION_FAILED = "reservation-failed"


class Alert(WireModel):
    """Something a human should know; ``alert_id`` is stable, so a replay raises it once."""

    v: Literal[1] = 1
    alert_id: str = NonEmpty
    kind: AlertKind
    severity: Literal["info", "warning", "critical"] = "warning"
    job: str | None = None
    message: str
    raised_at: float
    details: dict[str, Any] = Field(default_factory=dict)


class DeadLetter(WireModel):
    """A message no agent could read, kept with why and where it came from."""

    v: Literal[1] = 1
    reason: str
    source_topic: str
    partition: int
    offset: int
    key: str | None = Field(None, description="The original key, base64.")
    value: str = Field(description="The original bytes, base64.")
    received_at: float
