"""The drill's timeline and budgets, folded from the run's own messages.

Every time here is a timestamp a message carries, written by the process
that did the thing: the simulated API server's watch events (``observed_at``:
the burst's pods pending, the victims' pods deleted, their jobs Aborted, the
burst's pods bound), the worker's decisions and yield commands (the Kafka
record's time, set by the worker's producer when it sent them: a decision's
own ``decided_at`` is the decider's event-time clock, the time of the input
that triggered it, not when the plan was made), the node agents' acks
(``acked_at``) and the burst pods' first heartbeats (``sent_at``: a pod is
ready when its process serves and says so). Nothing is timed by the drill's
own loop, so the figures do not depend on how often it looks.

``DrillTimeline`` folds the messages in any order (the watch events come
from the simulated cluster, the rest from a reader of the topics, and one
may run ahead of the other); ``judge`` turns it into the timeline's steps
and the budgets, met or missed. Both are pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuyield.agents.demo.tally import Resumption
from gpuyield.schemas import kube_objects
from gpuyield.schemas.messages import (
    CommandAction,
    Decision,
    Heartbeat,
    KubeEvent,
    KubeEventType,
    KubeKind,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)

ABORTED = "Aborted"


@dataclass(frozen=True, slots=True)
class Ack:
    job: str
    node: str
    outcome: YieldOutcome
    checkpoint_step: int | None
    at: float


@dataclass(slots=True)
class DrillTimeline:
    """What the run's messages say about the burst ``burst`` (a ``namespace/name`` job)."""

    burst: str
    seen_at: float | None = None
    """The first watch event of a burst pod, still unbound: the burst as Volcano left it."""
    decisions: dict[str, float] = field(default_factory=dict)  # yield decision id -> sent at
    victims: set[str] = field(default_factory=set)
    issued: set[str] = field(default_factory=set)  # the command ids those decisions issued
    commands: dict[str, float] = field(default_factory=dict)  # any yield command id -> sent at
    acks: dict[str, Ack] = field(default_factory=dict)  # command id -> its ack
    ended: dict[str, dict[str, float]] = field(default_factory=dict)  # job -> pod -> GPUs freed
    """When each pod stopped holding its GPUs: Succeeded or Failed (its process exited), or
    deleted, whichever the API server said first."""
    deleted: dict[str, dict[str, float]] = field(default_factory=dict)  # job -> pod -> deleted at
    aborted: dict[str, float] = field(default_factory=dict)  # job -> first seen Aborted
    placed: dict[str, float] = field(default_factory=dict)  # burst pod -> bound at
    ready: dict[str, float] = field(default_factory=dict)  # burst pod -> first heartbeat

    def watch(self, event: KubeEvent) -> None:
        """A watch event the simulated API server sent."""
        if event.kind is KubeKind.POD:
            self._pod(event)
        elif event.kind is KubeKind.JOB and event.type is not KubeEventType.DELETED:
            state = _dig(event.object, "status", "state", "phase")
            job = f"{event.namespace}/{event.name}"
            if state == ABORTED and job not in self.aborted:
                self.aborted[job] = event.observed_at

    def _pod(self, event: KubeEvent) -> None:
        labels = _dig(event.object, "metadata", "labels")
        name = labels.get(kube_objects.JOB_NAME) if isinstance(labels, Mapping) else None
        if not isinstance(name, str):
            return
        job = f"{event.namespace}/{name}"
        phase = _dig(event.object, "status", "phase")
        if event.type is KubeEventType.DELETED or phase in ("Succeeded", "Failed"):
            self.ended.setdefault(job, {}).setdefault(event.name, event.observed_at)
        if event.type is KubeEventType.DELETED:
            self.deleted.setdefault(job, {})[event.name] = event.observed_at
            return
        if job != self.burst:
            return
        node = _dig(event.object, "spec", "nodeName")
        if node is None:
            if self.seen_at is None or event.observed_at < self.seen_at:
                self.seen_at = event.observed_at
        elif event.name not in self.placed:
            self.placed[event.name] = event.observed_at

    def message(self, message: object, sent_at: float) -> None:
        """A message from the topics; ``sent_at`` is its record's time (its producer's clock)."""
        if isinstance(message, Decision):
            if message.demand == self.burst and message.plan is not None and message.commands:
                victims = {v.job for v in message.plan.victims}
                if victims:
                    self.decisions.setdefault(message.decision_id, sent_at)
                    self.victims |= victims
                    self.issued |= set(message.commands)
        elif isinstance(message, YieldCommand):
            if message.action is CommandAction.YIELD:
                self.commands.setdefault(message.command_id, sent_at)
        elif isinstance(message, YieldAck):
            if message.outcome is not YieldOutcome.RESUMED:
                self.acks.setdefault(
                    message.command_id,
                    Ack(
                        message.job,
                        message.node,
                        message.outcome,
                        message.checkpoint_step,
                        message.acked_at,
                    ),
                )
        elif (
            isinstance(message, Heartbeat)
            and message.job == self.burst
            and message.pod not in self.ready
        ):
            self.ready[message.pod] = message.sent_at


def _dig(obj: Mapping[str, Any], *keys: str) -> Any:
    found: Any = obj
    for key in keys:
        if not isinstance(found, Mapping):
            return None
        found = found.get(key)
    return found


# -- the verdict ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One line of the timeline: ``first_s``/``last_s`` after the burst was seen."""

    what: str
    first_s: float | None
    last_s: float | None
    count: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Budget:
    what: str
    limit_s: float | None  # None: a condition, not a time
    took_s: float | None
    met: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DrillReport:
    steps: tuple[Step, ...]
    budgets: tuple[Budget, ...]
    victims: tuple[str, ...]
    resumptions: tuple[Resumption, ...]

    @property
    def passed(self) -> bool:
        return all(b.met for b in self.budgets)


def _span(times: Iterable[float], origin: float) -> tuple[float | None, float | None, int]:
    found = sorted(times)
    if not found:
        return None, None, 0
    return found[0] - origin, found[-1] - origin, len(found)


def judge(
    timeline: DrillTimeline,
    *,
    burst_pods: int,
    reclaim_budget_s: float,
    ready_budget_s: float,
    resumptions: Sequence[Resumption],
) -> DrillReport:
    """The timeline's steps and the three budgets of the drill, each met or missed."""
    origin = timeline.seen_at
    victims = tuple(sorted(timeline.victims))
    resumed = {r.job: r for r in resumptions if r.job in timeline.victims}
    if origin is None:
        missing = "the burst was never seen pending"
        return DrillReport(
            (),
            (
                Budget("reclaim and evictions", reclaim_budget_s, None, False, missing),
                Budget("online pods placed and ready", ready_budget_s, None, False, missing),
                Budget("evicted jobs suspended, resumed from their checkpoints", None, None, False),
            ),
            victims,
            tuple(resumed.values()),
        )
    commands = [t for c, t in timeline.commands.items() if c in timeline.issued]
    acks = [a for c, a in timeline.acks.items() if c in timeline.issued]
    outcomes: dict[str, int] = {}
    for ack in acks:
        outcomes[ack.outcome.value] = outcomes.get(ack.outcome.value, 0) + 1
    freed = [at for job in victims for at in timeline.ended.get(job, {}).values() if at >= origin]
    victim_pods = {
        pod: at
        for job in victims
        for pod, at in timeline.deleted.get(job, {}).items()
        if at >= origin
    }
    suspended = [at for job, at in timeline.aborted.items() if job in victims and at >= origin]
    ready = [t for pod, t in timeline.ready.items() if pod in timeline.placed]
    steps = (
        Step("burst seen (watch event: pods pending, unschedulable)", 0.0, 0.0, 1),
        Step(
            "decision",
            *_span(timeline.decisions.values(), origin),
            f"{len(victims)} victims: {', '.join(victims)}" if victims else "no victims",
        ),
        Step("yield commands", *_span(commands, origin), f"of {len(timeline.issued)} issued"),
        Step(
            "acks",
            *_span((a.at for a in acks), origin),
            ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())),
        ),
        Step("GPUs free (victims' pods ended)", *_span(freed, origin)),
        Step("victims' pods deleted", *_span(victim_pods.values(), origin)),
        Step("victims Suspended (job Aborted)", *_span(suspended, origin)),
        Step("burst pods placed", *_span(timeline.placed.values(), origin), f"of {burst_pods}"),
        Step("burst pods ready (first heartbeat)", *_span(ready, origin), f"of {burst_pods}"),
    )
    return DrillReport(
        steps,
        (
            _reclaim(timeline, acks, [*victim_pods.values(), *suspended], origin, reclaim_budget_s),
            _ready(ready, burst_pods, origin, ready_budget_s),
            _suspended(timeline, victims, resumed),
        ),
        victims,
        tuple(resumed[j] for j in sorted(resumed)),
    )


def _reclaim(
    timeline: DrillTimeline,
    acks: Sequence[Ack],
    ends: Sequence[float],
    origin: float,
    limit_s: float,
) -> Budget:
    """Done when every command is acked and every victim's pods are deleted and its job
    Suspended (Aborted): the last of those times."""
    what = "reclaim and evictions"
    if not timeline.victims:
        return Budget(what, limit_s, None, False, "no decision made room for the burst")
    if len(acks) < len(timeline.issued):
        return Budget(
            what, limit_s, None, False, f"{len(acks)} of {len(timeline.issued)} commands acked"
        )
    gone = {job for job in timeline.victims if timeline.deleted.get(job)}
    if gone != timeline.victims:
        left = ", ".join(sorted(timeline.victims - gone))
        return Budget(what, limit_s, None, False, f"pods never deleted: {left}")
    if not timeline.victims <= timeline.aborted.keys():
        left = ", ".join(sorted(timeline.victims - timeline.aborted.keys()))
        return Budget(what, limit_s, None, False, f"never Suspended: {left}")
    took = max([a.at for a in acks] + list(ends)) - origin
    return Budget(
        what, limit_s, took, took <= limit_s, "the last ack, victim pod deleted or job Suspended"
    )


def _ready(ready: Sequence[float], pods: int, origin: float, limit_s: float) -> Budget:
    what = "online pods placed and ready"
    if len(ready) < pods:
        return Budget(what, limit_s, None, False, f"{len(ready)} of {pods} pods ready")
    took = max(ready) - origin
    return Budget(what, limit_s, took, took <= limit_s, f"{pods} of {pods} pods ready")


def _suspended(
    timeline: DrillTimeline, victims: Sequence[str], resumed: Mapping[str, Resumption]
) -> Budget:
    what = "evicted jobs suspended, resumed from their checkpoints"
    if not victims:
        return Budget(what, None, None, False, "no job was evicted")
    problems = []
    for job in victims:
        r = resumed.get(job)
        if job not in timeline.aborted:
            problems.append(f"{job} never Aborted")
        elif r is None or r.resumed_at_step is None:
            problems.append(f"{job} never resumed")
        elif r.yielded_at_step is None or r.resumed_at_step != r.yielded_at_step:
            problems.append(
                f"{job} resumed at step {r.resumed_at_step}, its yield saved {r.yielded_at_step}"
            )
    if problems:
        return Budget(what, None, None, False, "; ".join(problems))
    return Budget(what, None, None, True, f"{len(victims)} of {len(victims)}")
