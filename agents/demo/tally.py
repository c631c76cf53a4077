"""What the demo counts, read from the topics the worker and the node agents write.

The summary's figures come from the messages themselves, not from the demo's
own bookkeeping: decisions from ``gpuyield.decisions`` (with
``gpuyield.reservations``, logged to the demo's log file with each decision's
placement, so a run's story can be read afterwards), commands from
``gpuyield.yield-commands``, outcomes and lost GPU-seconds from
``gpuyield.yield-acks``, alerts from ``gpuyield.alerts``, and each job's steps
and checkpoints from ``gpuyield.heartbeats`` (which is how the demo shows a
resumed trainer starting from the step its yield saved).

The reader assigns every partition by hand and starts at the beginning: no
consumer group to join, nothing missed while it starts.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from gpuyield.schemas.decoding import MessageError, decode
from gpuyield.schemas.messages import (
    Alert,
    CommandAction,
    Decision,
    Heartbeat,
    Reservation,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)
from gpuyield.streams.topics import (
    ALERTS,
    DECISIONS,
    HEARTBEATS,
    RESERVATIONS,
    YIELD_ACKS,
    YIELD_COMMANDS,
)

log = logging.getLogger(__name__)

Model = (
    type[Decision]
    | type[YieldCommand]
    | type[YieldAck]
    | type[Alert]
    | type[Heartbeat]
    | type[Reservation]
)
TOPICS: dict[str, Model] = {
    DECISIONS: Decision,
    RESERVATIONS: Reservation,
    YIELD_COMMANDS: YieldCommand,
    YIELD_ACKS: YieldAck,
    ALERTS: Alert,
    HEARTBEATS: Heartbeat,
}
LOG_LINES = 40
YIELD_OUTCOMES = (YieldOutcome.CHECKPOINTED, YieldOutcome.EXITED, YieldOutcome.HARD_KILLED)


@dataclass(slots=True)
class JobSteps:
    """One job as its heartbeats tell it."""

    step: int = 0
    checkpoint_step: int | None = None
    last_beat_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Resumption:
    """A job's yield and where its trainer started again."""

    job: str
    yielded_at_step: int | None
    resumed_at_step: int | None


@dataclass(slots=True)
class Tally:
    """Counts and a short log of what happened, folded from the topics."""

    decisions: int = 0
    yield_decisions: int = 0
    resume_decisions: int = 0
    yield_commands: int = 0
    resume_commands: int = 0
    yield_demands: dict[str, int] = field(default_factory=dict)  # demand -> yield decisions for it
    outcomes: dict[str, int] = field(default_factory=dict)
    lost_gpu_seconds: float = 0.0
    alerts: list[Alert] = field(default_factory=list)
    steps: dict[str, JobSteps] = field(default_factory=dict)
    acked_steps: dict[str, int | None] = field(default_factory=dict)  # job -> its last yield's step
    resumed_steps: dict[str, int] = field(default_factory=dict)  # job -> first step after resume
    resume_acked: dict[str, float] = field(default_factory=dict)  # job -> when its resume was acked
    log: list[tuple[float, str]] = field(default_factory=list)
    on_line: Callable[[str], None] | None = None
    _new_yield: set[str] = field(default_factory=set)  # jobs resumed since their last yield ack

    def line(self, text: str, at: float) -> None:
        """Note ``text``, which happened at ``at`` (the message's own time: topics are read
        side by side, so arrival order is not the order things happened in)."""
        bisect.insort(self.log, (at, text))
        del self.log[:-LOG_LINES]
        if self.on_line is not None:
            self.on_line(text)

    def recent(self, lines: int) -> list[str]:
        return [
            f"{time.strftime('%H:%M:%S', time.localtime(at))} {text}"
            for at, text in self.log[-lines:]
        ]

    def fold(self, message: Any) -> None:
        if isinstance(message, Decision):
            self._decision(message)
        elif isinstance(message, YieldCommand):
            if message.action is CommandAction.YIELD:
                self.yield_commands += 1
            else:
                self.resume_commands += 1
        elif isinstance(message, YieldAck):
            self._ack(message)
        elif isinstance(message, Alert):
            self.alerts.append(message)
            self.line(f"alert ({message.kind.value}): {message.message}", message.raised_at)
        elif isinstance(message, Heartbeat):
            self._beat(message)
        elif isinstance(message, Reservation):
            # For the log file only: where the decider held GPUs, to read a run's story after it.
            log.info(
                "reservation %s for %s on %s until %.1f (decision %s): %s",
                message.state.value,
                message.job,
                message.nodes,
                message.until,
                message.decision_id,
                message.reason,
            )

    def _decision(self, decision: Decision) -> None:
        if decision.plan is None or not decision.commands:
            # A round that found no plan or was skipped: on the record, not an action.
            log.info(
                "round for %s: %s (%s)",
                decision.demand,
                decision.outcome.value if decision.outcome else "-",
                decision.reason,
            )
            return
        self.decisions += 1
        victims = decision.plan.victims
        log.info(  # the log file keeps where each decision put its demand, for post-mortems
            "decision %s for %s: victims %s, placement %s; candidates %s",
            decision.decision_id,
            decision.demand,
            [f"{v.job} ({', '.join(v.pods)})" for v in victims],
            decision.plan.placement,
            [
                f"{c.job} {c.outcome} ({c.gpus} GPUs, {c.lost_gpu_seconds:.0f} GPU-s if evicted)"
                for c in decision.plan.candidates
            ],
        )
        if victims:
            self.yield_decisions += 1
            self.yield_demands[decision.demand] = self.yield_demands.get(decision.demand, 0) + 1
            names = ", ".join(
                f"{v.job} ({len(v.pods)} pod{'s' * (len(v.pods) > 1)})" for v in victims
            )
            self.line(
                f"decision: make room for {decision.demand}: {names} yield", decision.decided_at
            )
        else:
            self.resume_decisions += 1
            self.line(f"decision: {decision.demand} fits again: resume it", decision.decided_at)

    def _ack(self, ack: YieldAck) -> None:
        outcome = ack.outcome.value
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if ack.outcome is YieldOutcome.RESUMED:
            self.resume_acked[ack.job] = ack.acked_at
            self.resumed_steps.pop(ack.job, None)
            self._new_yield.add(ack.job)
            self.line(f"ack from {ack.node}: {ack.job} resumed", ack.acked_at)
            return
        self.lost_gpu_seconds += ack.gpu_seconds_lost
        if ack.outcome in YIELD_OUTCOMES:
            # One yield of a job on several nodes is one ack per node: its saved step is the
            # furthest any of them reports, until a resume starts the next yield afresh.
            before = None if ack.job in self._new_yield else self.acked_steps.get(ack.job)
            self._new_yield.discard(ack.job)
            steps = [s for s in (before, ack.checkpoint_step) if s is not None]
            self.acked_steps[ack.job] = max(steps) if steps else None
        self.line(
            f"ack from {ack.node}: {ack.job} {outcome}"
            + (f" at step {ack.checkpoint_step}" if ack.checkpoint_step is not None else "")
            + f" in {ack.seconds_taken:.1f} s, {ack.gpu_seconds_lost:.0f} GPU-s lost",
            ack.acked_at,
        )

    def _beat(self, beat: Heartbeat) -> None:
        seen = self.steps.setdefault(beat.job, JobSteps())
        if beat.sent_at >= seen.last_beat_at:
            seen.step = beat.step
            seen.last_beat_at = beat.sent_at
        if beat.last_checkpoint_step is not None:
            seen.checkpoint_step = beat.last_checkpoint_step
        resumed_at = self.resume_acked.get(beat.job)
        if (
            resumed_at is not None
            and beat.sent_at > resumed_at
            and beat.job not in self.resumed_steps
        ):
            self.resumed_steps[beat.job] = beat.step
            yielded = self.acked_steps.get(beat.job)
            self.line(
                f"{beat.job} runs again from step {beat.step}"
                + (f" (its yield saved step {yielded})" if yielded is not None else ""),
                beat.sent_at,
            )

    def resumptions(self) -> list[Resumption]:
        return [
            Resumption(job, self.acked_steps.get(job), self.resumed_steps.get(job))
            for job in sorted(self.resume_acked)
        ]

    def yields(self) -> dict[str, int]:
        return {
            "commands": self.yield_commands,
            **{o.value: self.outcomes.get(o.value, 0) for o in YIELD_OUTCOMES},
        }


class TallyReader:
    """Folds the topics into a ``Tally`` until ``stop``."""

    def __init__(
        self,
        tally: Tally,
        *,
        kafka: dict[str, Any],
        prefix: str = "",
        on_message: Callable[[Any, float], None] | None = None,
    ) -> None:
        """``on_message`` also gets every message, with its record's time (its producer's
        clock, in seconds): the drill's timeline is built from those."""
        self.tally = tally
        self._on_message = on_message
        self._kafka = kafka
        self._models = {prefix + name: model for name, model in TOPICS.items()}
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(**self._kafka, group_id=None, enable_auto_commit=False)
        await consumer.start()
        self._consumer = consumer
        await consumer.topics()  # the metadata, so the partitions are known
        partitions = [
            TopicPartition(topic, p)
            for topic in self._models
            for p in sorted(consumer.partitions_for_topic(topic) or {0})
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)

    async def run(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        assert consumer is not None, "start() first"
        while not stop.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=200)
            except KafkaError as exc:
                log.warning("tally reader: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batches.items():
                model = self._models[tp.topic]
                for record in records:
                    if record.value is None:
                        continue
                    try:
                        message = decode(model, record.value)
                    except MessageError as exc:
                        log.warning("unreadable message on %s: %s", tp.topic, exc)
                        continue
                    self.tally.fold(message)
                    if self._on_message is not None:
                        self._on_message(message, record.timestamp / 1000)

    async def stop(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            self._consumer = None
