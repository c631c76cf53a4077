"""The worker's Prometheus families, derived from what the decider step returns.

The decider stays pure: it knows nothing of Prometheus. The app calls
``WorkerMetrics.observe_step`` with the records before a step, the input and
the step's ``Outcome``, and everything here follows from those:

- ``gpuyield_decisions_total{outcome}``: one per decider round, by its
  ``RoundOutcome``: ``yield`` (a plan with victims), ``resume`` (a suspended
  job sent back), ``no-victims``, ``unservable`` (no plan can place the
  demand) and the ``skipped-*`` rounds;
- ``gpuyield_evictions_total{queue}``: one per victim job, by its queue;
- ``gpuyield_yields_total{outcome}``: each yield command's end, once: the
  node agent's ack outcome (``checkpointed``, ``exited``, ``hard_killed``,
  ``failed``; ``resumed`` for resumes) or ``expired`` (no ack by the deadline
  and slack, its alert);
- ``gpuyield_yield_seconds``: from the command's issue to its ack;
- ``gpuyield_lost_gpu_seconds_total{queue}``: the work the acks report lost;
- ``gpuyield_livelock_detections_total{kind}``: repeat, mutual or cycle;
- ``gpuyield_alerts_total{kind,severity}``: every alert raised, and
  ``gpuyield_alerts_firing{kind}``: the incidents open now, read from the
  decider table's alert records (so a restarted worker reports the same);
- the edge's own: ``gpuyield_decider_step_seconds``,
  ``gpuyield_planner_seconds`` (the planner calls of the demand and resume
  rounds, via the step's ``planner`` argument), ``gpuyield_heartbeats_total``,
  ``gpuyield_dead_letters_total{topic}``, ``gpuyield_consumer_lag_messages{topic}``.

Every label value is bounded: outcomes, alert kinds and severities are
enums, queues are the cluster's queues, topics the registry's.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuyield.agents.controller import incidents
from gpuyield.agents.controller.decider import Input, Outcome, Planner
from gpuyield.agents.controller.records import (
    ALERT,
    VJOB,
    YIELD,
    AlertRecord,
    KeyIndex,
    Overlay,
    Record,
    VJobRecord,
    YieldRecord,
)
from gpuyield.agents.planner import plan
from gpuyield.schemas import Plan
from gpuyield.schemas.messages import (
    AlertKind,
    AlertState,
    Decision,
    RoundOutcome,
    Tick,
    YieldAck,
)
from gpuyield.streams.metrics import NAMESPACE, ConsumerLag, process_families, topic_label

EVENT_KINDS: frozenset[AlertKind] = frozenset(AlertKind) - incidents.CONDITIONS
"""Kinds that report something that happened, not a condition the decider follows to its
end (``incidents.CONDITIONS``): counted by ``gpuyield_alerts_total``, never open in
``gpuyield_alerts_firing``."""

UNKNOWN_QUEUE = "unknown"

FIRING_EVERY_S = 15.0
"""How often (in ticks' time) ``gpuyield_alerts_firing`` is recounted from the table's
alert records: often enough for a scrape every 30 s, rarely enough that the scan of
the table stays out of the decider's way."""

# Seconds: a yield takes its grace period (minutes); a step and a plan take milliseconds.
YIELD_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class WorkerMetrics:
    """Every family the worker serves, on its own registry, all present from the start."""

    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = "") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.prefix = prefix
        r = self.registry
        process_families(r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=NAMESPACE, registry=r)

        self.decisions = counter(
            "decisions_total", "Decisions the decider took, by outcome.", ("outcome",)
        )
        self.evictions = counter(
            "evictions_total", "Jobs chosen to yield, by the queue they run in.", ("queue",)
        )
        self.yields = counter(
            "yields_total", "Yield and resume commands that ended, by outcome.", ("outcome",)
        )
        self.yield_seconds = Histogram(
            "yield_seconds",
            "Seconds from a yield command's issue to its acknowledgement.",
            namespace=NAMESPACE,
            registry=r,
            buckets=YIELD_BUCKETS,
        )
        self.lost_gpu_seconds = counter(
            "lost_gpu_seconds_total",
            "GPU-seconds of work lost by yields (since the last checkpoint), by queue.",
            ("queue",),
        )
        self.livelocks = counter(
            "livelock_detections_total", "Livelocks detected, by pattern.", ("kind",)
        )
        self.alerts = counter(
            "alerts_total", "Alerts raised, by kind and severity.", ("kind", "severity")
        )
        self.alerts_firing = Gauge(
            "alerts_firing",
            "Incidents open now (raised, not resolved), by alert kind.",
            ["kind"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.step_seconds = Histogram(
            "decider_step_seconds",
            "Seconds one decider step takes (one input message).",
            namespace=NAMESPACE,
            registry=r,
            buckets=STEP_BUCKETS,
        )
        self.planner_seconds = Histogram(
            "planner_seconds",
            "Seconds one planner call takes inside a decider step.",
            namespace=NAMESPACE,
            registry=r,
            buckets=STEP_BUCKETS,
        )
        self.heartbeats = counter(
            "heartbeats_total",
            "Trainer heartbeats the worker received, by the heartbeat partition they came from "
            "(which worker folds which jobs).",
            ("partition",),
        )
        self.dead_letters = counter(
            "dead_letters_total",
            "Messages sent to the dead-letter topic, by the topic they came from.",
            ("topic",),
        )
        self.lag = ConsumerLag(r)
        self._firing_counted_at = float("-inf")
        for kind in AlertKind:  # every kind present at 0: rules see the series from the start
            if kind not in EVENT_KINDS:
                self.alerts_firing.labels(kind=kind.value).set(0)
        for round_outcome in RoundOutcome:
            self.decisions.labels(outcome=round_outcome.value)

    # -- the edge's own measurements ----------------------------------------------

    def timed_planner(self, inner: Planner = plan) -> Planner:
        """``inner`` with each call's duration observed; its plan is returned unchanged."""

        def timed(*args: Any, **kwargs: Any) -> Plan:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.planner_seconds.observe(time.perf_counter() - started)

        return timed

    def dead_letter(self, topic: str) -> None:
        self.dead_letters.labels(topic=topic_label(topic, self.prefix)).inc()

    def heartbeats_read(self, partitions: Iterable[int]) -> None:
        """One batch of heartbeats was read: the partition of each."""
        for partition, count in Tally(partitions).items():
            self.heartbeats.labels(partition=str(partition)).inc(count)

    def consumed(self, topic: str, partition: int, offset: int, highwater: int | None) -> None:
        """The worker read ``offset``; ``highwater`` is the partition's end as last fetched."""
        behind = None if highwater is None else max(0, highwater - offset - 1)
        self.lag.observe(topic_label(topic, self.prefix), partition, behind)

    # -- derived from the step ------------------------------------------------------

    def observe_step(
        self,
        before: Mapping[str, Record],
        message: Input,
        outcome: Outcome,
        *,
        seconds: float | None = None,
        index: KeyIndex | None = None,
    ) -> None:
        """Count what one step decided and observed.

        ``index``: the decider's index of ``before`` (``RecordIndex``), so that
        counting the open alerts reads the alert keys from its sorted keys
        instead of sorting the whole table (0.3 s and more at 10,000 nodes).

        ``before`` is the table the step started from (the live table, before
        the outcome's writes are applied): nothing is copied, and only the keys
        the step wrote are read, so this costs what the outcome holds.
        """
        if seconds is not None:
            self.step_seconds.observe(seconds)
        for decision in outcome.decisions:
            self.decisions.labels(outcome=round_outcome(decision).value).inc()
            if decision.plan is not None and round_outcome(decision) is RoundOutcome.YIELD:
                for victim in decision.plan.victims:
                    self.evictions.labels(queue=victim.queue or UNKNOWN_QUEUE).inc()
        for alert in outcome.alerts:
            if alert.state is not AlertState.FIRING:
                continue
            self.alerts.labels(kind=alert.kind.value, severity=alert.severity).inc()
            if alert.kind is AlertKind.LIVELOCK:
                pattern = str(alert.details.get("pattern", "unknown"))
                self.livelocks.labels(kind=pattern).inc()
            elif alert.kind is AlertKind.YIELD_DEADLINE_MISSED:
                self.yields.labels(outcome="expired").inc()
        if isinstance(message, YieldAck):
            self._acked(before, outcome, message)
        if isinstance(message, Tick) and message.at - self._firing_counted_at >= FIRING_EVERY_S:
            self._firing_counted_at = message.at
            self.count_firing(Overlay(before, outcome.writes, index))

    def _acked(self, before: Mapping[str, Record], outcome: Outcome, ack: YieldAck) -> None:
        """A yield's ack counted once: only the step that moved its command to ``acked``."""
        prefix = f"{YIELD}{ack.job}/"
        for key, raw in outcome.writes.items():
            if raw is None or not key.startswith(prefix):
                continue
            after = YieldRecord.model_validate(raw)
            command = _command(after, ack.command_id)
            if command is None or command.status != "acked":
                continue
            previous = before.get(key)
            if previous is not None:
                was = _command(YieldRecord.model_validate(previous), ack.command_id)
            else:
                was = None
            if was is not None and was.status == "acked":
                return  # acknowledged before: counted when it first arrived
            self.yields.labels(outcome=ack.outcome.value).inc()
            self.yield_seconds.observe(max(0.0, ack.acked_at - after.issued_at))
            if ack.gpu_seconds_lost:
                job = before.get(VJOB + ack.job)
                queue = VJobRecord.model_validate(job).queue if job else UNKNOWN_QUEUE
                self.lost_gpu_seconds.labels(queue=queue).inc(ack.gpu_seconds_lost)
            return

    def count_firing(self, records: Mapping[str, Record]) -> None:
        """Set ``gpuyield_alerts_firing`` from the table's alert records."""
        view = records if isinstance(records, Overlay) else Overlay(records, {})
        open_by_kind = {k.value: 0 for k in AlertKind if k not in EVENT_KINDS}
        for _, record in view.typed_prefix(ALERT, AlertRecord):
            if record.kind in open_by_kind and record.resolved_at is None:
                open_by_kind[record.kind] += 1
        for kind, count in open_by_kind.items():
            self.alerts_firing.labels(kind=kind).set(count)


def _command(record: YieldRecord, command_id: str) -> Any:
    return next((c for c in record.commands if c.command_id == command_id), None)


def round_outcome(decision: Decision) -> RoundOutcome:
    """The round's outcome; a decision written before ``outcome`` existed acted: a yield
    when its plan evicts, else a resume."""
    if decision.outcome is not None:
        return decision.outcome
    evicts = decision.plan is not None and bool(decision.plan.victims)
    return RoundOutcome.YIELD if evicts else RoundOutcome.RESUME
