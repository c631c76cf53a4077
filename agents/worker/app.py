"""The Faust app of ``gpuyield worker``: thin agents around the controller's pure core.

Two agents and a timer:

- ``progress``: heartbeats (keyed by job, many partitions) folded into the
  ``progress`` table in batches (``heartbeats.ProgressFolder``); the records
  that changed enough are forwarded to the decider on ``gpuyield.job-progress``,
  one ``JobProgressBatch`` message per batch of beats.
- ``decider``: one stream of the single-partition topics (watch events, job
  progress, yield acks, ticks). Faust assigns co-subscribed topics with the
  same partition count together, so exactly one worker in the group owns
  partition 0 of all of them, and with it the ``decider`` table: that is how
  there is one decider at a time (docs/design/0003-controller.md). Its table
  holds demands, yields in flight and nominations, so an owner that takes
  over after a rebalance recovers them from the changelog and does not repeat
  an eviction; a message it reprocesses gives the same decision and command
  ids, which the node agents execute once.
- a timer that sends a ``Tick`` so deadlines and retries fire when the
  cluster is quiet.

Every message is read from raw bytes; one that does not decode, or that the
core rejects, goes to ``gpuyield.dead-letters`` with its reason and origin,
and the agent goes on. The agents only wire topics and tables to
``shell.py`` (decide, apply the writes, publish in order) and
``heartbeats.py``, which are tested without a broker.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import faust
from faust.serializers import codecs
from faust.types import EventT

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import INPUT_MODELS, Input, Outcome
from gpuyield.agents.controller.journal import Journal
from gpuyield.agents.controller.live_view import live_view
from gpuyield.agents.controller.progress import ForwardRule
from gpuyield.agents.planner import plan
from gpuyield.agents.worker.attempts import Attempts, attempt
from gpuyield.agents.worker.frozen_heap import FrozenHeap
from gpuyield.agents.worker.heartbeats import ProgressFolder, forward_batches
from gpuyield.agents.worker.job_events import EventWriting
from gpuyield.agents.worker.metrics import WorkerMetrics
from gpuyield.agents.worker.reservations import ReservationSync, enforce_reservations
from gpuyield.agents.worker.shell import (
    DeciderIndex,
    OutcomeSinks,
    Send,
    TableView,
    apply_writes,
    decide,
    publish_outcome,
)
from gpuyield.agents.worker.view_pacing import ViewPacer
from gpuyield.schemas.config import SPARED_EVENTS
from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import (
    Heartbeat,
    Tick,
)
from gpuyield.streams.dead_letters import dead_letter
from gpuyield.streams.fast_delivery import deliver_without_tasks
from gpuyield.streams.kube_job_events import EventWriter
from gpuyield.streams.kube_reservations import ReservationEnforcer
from gpuyield.streams.topics import (
    ALERTS,
    DEAD_LETTERS,
    DECIDER_JOURNAL,
    DECISIONS,
    HEARTBEATS,
    JOB_PROGRESS,
    KUBE_EVENTS,
    RESERVATIONS,
    TICKS,
    YIELD_ACKS,
    YIELD_COMMANDS,
)

log = logging.getLogger(__name__)

ViewSink = Callable[[dict[str, Any], float], Awaitable[None]]

RECORD_CODEC = "gpuyield-records"


class _RecordCodec(codecs.Codec):
    """JSON for table records, where an empty value is a deletion.

    Tansu hands back a deleted key's tombstone as empty bytes rather than
    null, which faust's JSON codec cannot read: recovery then fails on every
    batch holding a deletion. Reading empty as None keeps recovery going; the
    table view treats a None value as absent.
    """

    def _dumps(self, obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def _loads(self, s: bytes) -> Any:
        return json.loads(s) if s else None


codecs.register(RECORD_CODEC, _RecordCodec())


@dataclass(frozen=True)
class WorkerOptions:
    """What the CLI (or a test) decides about one worker process."""

    app_kwargs: dict[str, Any]
    """``faust.App`` broker arguments (``gpuyield.streams.kafka_client.faust_app_kwargs``)."""

    topic_prefix: str = ""
    """Put in front of every topic name: tests share one broker between runs."""

    tick_s: float = 2.0
    """How often each worker sends a tick: the resolution of deadlines and retries."""

    heartbeat_partitions: int = 8

    data_dir: str | None = None
    """Where faust keeps its local files (default: ``<app id>-data`` in the working directory)."""

    heartbeat_batch: int = 1000
    """Heartbeats folded per batch (or fewer after ``heartbeat_batch_window_s``)."""

    heartbeat_batch_window_s: float = 0.1
    """The longest the progress agent waits to fill a batch before folding what it has."""

    reservation_enforcer: ReservationEnforcer | None = None
    """Makes the decider's holds true on the cluster; None: no Kubernetes access (as before)."""

    reservation_reconcile_s: float = 30.0

    heap_refreeze_s: float = 0.0
    """Freeze the heap once the decider's index is built, and again this often
    (``frozen_heap.FrozenHeap``); 0: never (tests share their process)."""

    event_writer: EventWriter | None = None
    """Writes a Kubernetes Event on each Volcano Job a decision yields, spares or resumes;
    None: no Kubernetes access (as before)."""

    instance: str = "gpuyield-worker"
    """The Events' ``reportingInstance``: this worker (its pod's name in a cluster)."""

    spared_events: int = SPARED_EVENTS
    """At most this many ``Spared`` Events per decision (``GPUYIELD_KUBE_EVENTS_SPARED``)."""

    metrics: WorkerMetrics | None = None
    """Prometheus families to update (``--metrics-port``); None: nothing is measured."""

    attempts: Attempts = field(default_factory=Attempts)
    """How often a message's effects are tried before it goes to dead letters (``attempts.py``)."""


def build_app(
    options: WorkerOptions,
    config: ControllerConfig,
    *,
    publish_view: ViewSink | None = None,
    view_pacer: ViewPacer | None = None,
) -> faust.App:
    """A configured app with its agents; ``faust.Worker(app)`` runs it."""
    p = options.topic_prefix
    metrics = options.metrics
    planner = metrics.timed_planner() if metrics is not None else plan
    local: dict[str, Any] = {}
    if options.data_dir:
        # faust makes only the last level, and a worker on external Kafka and Redis has
        # created nothing under its state directory yet.
        Path(options.data_dir).mkdir(parents=True, exist_ok=True)
        local["datadir"] = options.data_dir
    app = faust.App(
        **options.app_kwargs,
        store="memory://",
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=True,
        table_cleanup_interval=3600.0,
        **local,
    )
    deliver_without_tasks(app)
    event_writing: EventWriting | None = None
    if options.event_writer is not None:
        event_writing = EventWriting(
            options.event_writer, options.instance, options.spared_events, loop=app.loop
        )
        app.add_dependency(event_writing)

    def topic(name: str) -> faust.TopicT:
        return app.topic(p + name, value_serializer="raw", key_serializer="raw", internal=False)

    heartbeats = topic(HEARTBEATS)
    job_progress = topic(JOB_PROGRESS)
    decider_inputs = app.topic(
        p + KUBE_EVENTS,
        p + JOB_PROGRESS,
        p + YIELD_ACKS,
        p + TICKS,
        value_serializer="raw",
        key_serializer="raw",
    )
    ticks = topic(TICKS)
    decisions = topic(DECISIONS)
    commands = topic(YIELD_COMMANDS)
    alerts = topic(ALERTS)
    reservations = topic(RESERVATIONS)
    dead_letters = topic(DEAD_LETTERS)
    journal = topic(DECIDER_JOURNAL)

    # use_partitioner: a batch mixes partitions, so a record's changelog
    # partition comes from its key (as the heartbeats' producers chose it),
    # not from "the current event".
    progress_table = app.Table(
        "progress",
        partitions=options.heartbeat_partitions,
        key_type=bytes,
        value_type=bytes,  # a forwarded record's wire bytes (heartbeats.py), serialised once
        use_partitioner=True,
    )
    decider_table = app.Table("decider", partitions=1, key_type=bytes)
    # faust derives a table's codec from its value type (json for anything but
    # bytes); set ours before the changelog topic is first built.
    cast(Any, decider_table).value_serializer = RECORD_CODEC
    folder = ProgressFolder(
        cast(Any, progress_table), config.max_clock_skew_s, ForwardRule.of(config)
    )

    @app.on_partitions_revoked.connect
    async def forget_folds(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        folder.forget()

    sinks = OutcomeSinks(
        reservations=_sender(reservations),
        decisions=_sender(decisions),
        commands=_sender(commands),
        alerts=_sender(alerts),
    )

    async def reject(event: EventT[bytes], reason: str) -> None:
        message = event.message
        letter = dead_letter(
            reason,
            message.topic,
            message.partition,
            message.offset,
            message.key,
            message.value,
            time.time(),
        )
        log.warning(
            "dead letter from %s[%d]@%d: %s",
            message.topic,
            message.partition,
            message.offset,
            reason,
        )
        failure = await attempt(
            partial(dead_letters.send, key=message.topic.encode(), value=encode(letter)),
            f"dead letter for {message.topic}[{message.partition}]@{message.offset}",
            options.attempts,
        )
        if failure is not None:  # not lost: the offset stays uncommitted, read again on restart
            raise RuntimeError(f"cannot write to the dead-letter topic: {failure}")
        if metrics is not None:
            metrics.dead_letter(message.topic)

    def consumed(event: EventT[bytes]) -> None:
        """The consumer lag of ``event``'s partition, once it is read."""
        if metrics is None:
            return
        message = event.message
        try:
            highwater: int | None = app.consumer.highwater(message.tp)
        except Exception:  # not known yet (or no consumer in a test): no figure
            highwater = None
        metrics.consumed(message.topic, message.partition, message.offset, highwater)

    @app.agent(heartbeats)
    async def progress(stream: faust.StreamT[bytes]) -> None:
        batches = cast(Any, stream).take_events(
            options.heartbeat_batch, within=options.heartbeat_batch_window_s
        )
        async for events in batches:
            changed: dict[str, EventT[bytes]] = {}  # job -> its last beat in the batch
            for event in events:
                try:
                    beat = decode(Heartbeat, event.value)
                except MessageError as exc:
                    await reject(event, str(exc))
                    continue
                try:
                    # The worker's clock, not the trainer's; the record's timestamp says
                    # when the beat was queued, so a backlog is not taken for skew.
                    job = folder.fold(beat, time.time(), event.message.timestamp)
                except Exception as exc:  # a bug must not stop the agent: keep the input
                    log.exception("progress failed on %s", beat.job)
                    await reject(event, f"internal error ({type(exc).__name__}): {exc}")
                    continue
                if job is not None:
                    changed[job] = event
            if metrics is not None and events:
                metrics.heartbeats_read(e.message.partition for e in events)
                newest = {e.message.partition: e for e in events}  # the last read of each
                for event in newest.values():
                    consumed(event)
            for batch in forward_batches(folder.forward_changed(changed)):
                failure = await attempt(
                    partial(job_progress.send, key=None, value=batch.raw),
                    f"forwarding the progress of {len(batch.jobs)} job(s)",
                    options.attempts,
                )
                if failure is not None:  # the beat that made each summary goes to dead letters
                    for job in batch.jobs:
                        await reject(changed[job], failure)

    models: dict[str, type[Input]] = {p + name: model for name, model in INPUT_MODELS.items()}
    pacer = view_pacer if view_pacer is not None else ViewPacer()

    def observe(message: Input, outcome: Outcome) -> None:
        """The metrics of one step, read against the table before its writes."""
        if metrics is not None:
            metrics.observe_step(TableView(decider_table), message, outcome, index=index.index)

    reservation_sync = ReservationSync(
        options.reservation_enforcer, options.reservation_reconcile_s
    )

    journaller = Journal(config)
    heap = FrozenHeap(options.heap_refreeze_s) if options.heap_refreeze_s > 0 else None
    index = DeciderIndex(config, heap)

    async def partitions_moved(_sender: Any, *_args: Any, **_kwargs: Any) -> None:
        index.reset()  # the table may be recovered from its changelog: rebuild from it

    for moved in (app.on_partitions_revoked, app.on_partitions_assigned):
        cast(Any, moved).connect(partitions_moved)

    async def send_outcome(outcome: Outcome) -> None:
        # Holds first: on the cluster (before any command can free a GPU), then
        # on their topic; a hold the cluster refused becomes an alert.
        failed = await enforce_reservations(
            reservation_sync,
            TableView(decider_table),
            outcome.reservations,
            time.time(),
            index.index,  # apply_writes has brought it up to this step's writes
        )
        if failed:
            outcome = dataclasses.replace(outcome, alerts=(*outcome.alerts, *failed))
        await publish_outcome(outcome, sinks)

    @app.agent(decider_inputs)
    async def decider(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            message = event.message
            origin = f"{message.topic}/{message.partition}/{message.offset}"
            # The order of the inputs, for replays: journalled before the step runs.
            entry = journaller.entry(
                message.topic,
                message.partition,
                message.offset,
                TableView(decider_table),
                time.time(),
            )
            await journal.send(key=b"decider", value=encode(entry))
            started = time.perf_counter()
            outcome = decide(
                decider_table,
                models[message.topic],
                event.value,
                origin,
                config,
                planner=planner,
                observe=observe,
                index=index,
            )
            if metrics is not None:
                metrics.step_seconds.observe(time.perf_counter() - started)
                consumed(event)
            if isinstance(outcome, str):
                await reject(event, outcome)
                continue
            apply_writes(cast(Any, decider_table), outcome.writes, index)
            failure = await attempt(
                partial(send_outcome, outcome), f"sending what {origin} decided", options.attempts
            )
            if failure is not None:  # tried enough: the input goes to dead letters, not round
                await reject(event, failure)
                continue
            if event_writing is not None and outcome.decisions:
                await event_writing.submit(outcome.decisions, TableView(decider_table))
            if publish_view is not None:
                now = time.time()
                if pacer.due(time.monotonic(), decided=bool(outcome.decisions)):
                    begun = time.monotonic()
                    try:
                        view = live_view(TableView(decider_table), config, now, index=index.index)
                        await publish_view(view, now)
                    except Exception:
                        log.exception("could not publish the live view")
                    pacer.built(begun, time.monotonic() - begun)

    async def tick() -> None:
        await ticks.send(key=b"tick", value=encode(Tick(at=time.time())))

    app.timer(interval=options.tick_s)(tick)

    app.gpuyield_agents = (progress, decider, tick)  # type: ignore[attr-defined]
    app.gpuyield_progress_folder = folder  # type: ignore[attr-defined]
    return app


def _sender(topic: faust.TopicT) -> Send:
    async def send(key: bytes, value: bytes) -> None:
        await topic.send(key=key, value=value)

    return send
