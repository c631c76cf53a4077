"""The controller's topics: one entry per topic, with its key, schema, layout and why.

The registry is the single place that says how a topic is laid out; the
``gpuyield topics`` command prints it and ``ensure_topics`` creates it.
Partition counts are part of the design, not tuning: a topic read by the
decider has one partition because the decider needs the whole cluster in one
ordered stream; topics keyed by job or node have ``topic_partitions`` so their
consumers can share the load while one job's (or node's) messages stay ordered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from gpuyield.schemas.base import WireModel
from gpuyield.schemas.messages import (
    Alert,
    DeadLetter,
    Decision,
    Heartbeat,
    JobProgress,
    JobProgressBatch,
    JournalEntry,
    KubeEvent,
    Reservation,
    Tick,
    YieldAck,
    YieldCommand,
)
from gpuyield.streams.settings import MAX_MESSAGE_BYTES

if TYPE_CHECKING:  # aiokafka is imported where a broker is talked to: the registry alone
    # (topic names, for every command and the metrics' labels) does not need it.
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

log = logging.getLogger(__name__)

KUBE_EVENTS = "gpuyield.kube-events"
HEARTBEATS = "gpuyield.heartbeats"
DECISIONS = "gpuyield.decisions"
YIELD_COMMANDS = "gpuyield.yield-commands"
YIELD_ACKS = "gpuyield.yield-acks"
ALERTS = "gpuyield.alerts"
DEAD_LETTERS = "gpuyield.dead-letters"
JOB_PROGRESS = "gpuyield.job-progress"
TICKS = "gpuyield.ticks"
RESERVATIONS = "gpuyield.reservations"
DECIDER_JOURNAL = "gpuyield.decider-journal"

INPUT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # seven days
"""How long the decider's inputs and its journal are kept: what ``gpuyield replay``
reads from Kafka (the archive keeps them for longer)."""

DEFAULT_PARTITIONS = 8
HOUR_MS = 60 * 60 * 1000
DAY_MS = 24 * HOUR_MS

_TOPIC_ALREADY_EXISTS = 36  # Kafka's TOPIC_ALREADY_EXISTS error code

CleanupPolicy = Literal["delete", "compact"]


@dataclass(frozen=True)
class TopicSpec:
    """How one topic is laid out, and why."""

    name: str
    key: str  # what the message key is, in words
    value_type: type[WireModel]
    partitions: int
    cleanup_policy: CleanupPolicy
    retention_ms: int | None  # None: the broker's default (or forever, for compacted topics)
    why: str
    max_message_bytes: int | None = None  # None: the broker's default (1 MiB on Kafka)

    @property
    def schema(self) -> str:
        return self.value_type.__name__

    def configs(self) -> dict[str, str]:
        """The topic-level configs (Kafka names, string values)."""
        configs: dict[str, str] = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            configs["retention.ms"] = str(self.retention_ms)
        if self.max_message_bytes is not None:
            configs["max.message.bytes"] = str(self.max_message_bytes)
        return configs

    def new_topic(self, replication_factor: int) -> NewTopic:
        from aiokafka.admin import NewTopic

        return NewTopic(
            name=self.name,
            num_partitions=self.partitions,
            replication_factor=replication_factor,
            topic_configs=self.configs(),
        )

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (for ``gpuyield topics --json``)."""
        return {
            "name": self.name,
            "key": self.key,
            "schema": self.schema,
            "partitions": self.partitions,
            "cleanup_policy": self.cleanup_policy,
            "retention_ms": self.retention_ms,
            "max_message_bytes": self.max_message_bytes,
            "why": self.why,
        }


def registry(
    topic_partitions: int = DEFAULT_PARTITIONS,
    prefix: str = "",
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> tuple[TopicSpec, ...]:
    """Every topic of the controller.

    ``topic_partitions`` is ``Settings.topic_partitions``; ``prefix`` is put in
    front of every name (tests use it to get their own topics on a shared broker);
    ``max_message_bytes`` is ``Settings.kafka_max_message_bytes``, the decisions
    topic's ``max.message.bytes``.
    """
    specs = (
        TopicSpec(
            KUBE_EVENTS,
            key="the object: Kind/namespace/name (Kind/name for cluster-scoped objects)",
            value_type=KubeEvent,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=INPUT_RETENTION_MS,
            why=(
                "The decider needs the whole cluster in one ordered stream; the watchers "
                "relist on start, so a week covers replays and audits."
            ),
        ),
        TopicSpec(
            HEARTBEATS,
            key="the job (namespace/name)",
            value_type=Heartbeat,
            partitions=topic_partitions,
            cleanup_policy="delete",
            retention_ms=DAY_MS,
            why=(
                "The busiest topic: spread over partitions, one job's beats stay ordered; only "
                "the latest beat matters, so a day is plenty."
            ),
        ),
        TopicSpec(
            DECISIONS,
            key="the preemptor (the demand served)",
            value_type=Decision,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=30 * DAY_MS,
            why=(
                "The audit trail: one decider writes it, in decision order; kept 30 days so "
                "any decision can be explained and replayed. Its records carry the snapshot "
                "(3 MB at 1,000 nodes): max.message.bytes is raised for them."
            ),
            max_message_bytes=max_message_bytes,
        ),
        TopicSpec(
            YIELD_COMMANDS,
            key="the node",
            value_type=YieldCommand,
            partitions=topic_partitions,
            cleanup_policy="delete",
            retention_ms=7 * DAY_MS,
            why=(
                "Node agents share the partitions; one node's commands stay in order "
                "(yield before resume)."
            ),
        ),
        TopicSpec(
            YIELD_ACKS,
            key="the job (namespace/name)",
            value_type=YieldAck,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=INPUT_RETENTION_MS,
            why="The decider reads the acks next to the cluster events, in one ordered stream.",
        ),
        TopicSpec(
            ALERTS,
            key="the job, or the alert kind when no job is concerned",
            value_type=Alert,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=30 * DAY_MS,
            why="Few messages; subscribers read them in the order they were raised.",
        ),
        TopicSpec(
            DEAD_LETTERS,
            key="the source topic",
            value_type=DeadLetter,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=30 * DAY_MS,
            why="Unreadable messages, kept with the reason long enough for a human to look.",
        ),
        TopicSpec(
            JOB_PROGRESS,
            key="none (a batch's summaries name their jobs)",
            value_type=JobProgressBatch,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=INPUT_RETENTION_MS,
            why=(
                "The progress agents forward the summaries that changed in each batch of "
                "heartbeats to the decider, one message per batch; a decider input, so kept "
                "whole (not compacted) for replays."
            ),
        ),
        TopicSpec(
            RESERVATIONS,
            key="the preemptor (namespace/name)",
            value_type=Reservation,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=30 * DAY_MS,
            why=(
                "GPUs held for a preemptor and their release, in decision order: what the "
                "enforcers (node taints, the demo's cluster) apply and audits read."
            ),
        ),
        TopicSpec(
            TICKS,
            key="the constant 'tick'",
            value_type=Tick,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=INPUT_RETENTION_MS,
            why=(
                "The passage of time for the decider's deadlines; a decider input, so kept as "
                "long as the others for replays."
            ),
        ),
        TopicSpec(
            DECIDER_JOURNAL,
            key="the constant 'decider'",
            value_type=JournalEntry,
            partitions=1,
            cleanup_policy="delete",
            retention_ms=INPUT_RETENTION_MS,
            why=(
                "The order in which the decider took its four input topics: what "
                "gpuyield replay feeds its step in; kept as long as the inputs."
            ),
        ),
    )
    return tuple(replace(spec, name=prefix + spec.name) for spec in specs) if prefix else specs


PROGRESS_TABLE = "progress"
"""The progress agents' table: one record per job, partitioned like the heartbeats."""
DECIDER_TABLE = "decider"
"""The decider's table: one partition, like every topic the decider reads."""


def changelogs(app_id: str, topic_partitions: int = DEFAULT_PARTITIONS) -> tuple[TopicSpec, ...]:
    """The worker's table changelogs, named as faust names them (``<app id>-<table>-changelog``).

    faust creates them itself when they are missing, but a producer that
    writes to a topic Tansu does not have makes Tansu create it with its own
    default of 4 partitions: after a broker restart that would split the
    decider's one-partition changelog. Creating them with the other topics,
    before any client starts, keeps their layout.
    """
    return (
        TopicSpec(
            f"{app_id}-{PROGRESS_TABLE}-changelog",
            key="the job (namespace/name)",
            value_type=JobProgress,
            partitions=topic_partitions,
            cleanup_policy="compact",
            retention_ms=None,
            why="The progress table's changelog: each job's last forwarded summary.",
        ),
        TopicSpec(
            f"{app_id}-{DECIDER_TABLE}-changelog",
            key="the record's key (node/..., pod/..., demand/..., ...)",
            value_type=WireModel,
            partitions=1,
            cleanup_policy="compact",
            retention_ms=None,
            why="The decider table's changelog: a new owner recovers its records from it.",
        ),
    )


class TopicCreationError(RuntimeError):
    """The broker refused to create a topic for another reason than that it exists."""


async def ensure_topics(
    client_kwargs: Mapping[str, Any],
    topics: Iterable[TopicSpec],
    replication_factor: int,
    *,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create the topics that do not exist yet; return the names created.

    Safe to run on every start and from several processes at once: "already
    exists" is success. An existing topic is not changed (Kafka cannot
    shrink partitions; configs are an operator's call), but a partition count
    that differs from the registry is logged, since it breaks the ordering
    the registry promises.

    Measured on Tansu: ``create_topics`` answers per topic (code 36 for one
    that exists) instead of raising; asking for metadata of an unknown topic
    creates it with the broker's defaults, so never describe a topic before
    creating it.
    """
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import for_code

    wanted = {spec.name: spec for spec in topics}
    if not wanted:
        return []
    admin = AIOKafkaAdminClient(
        **client_kwargs, request_timeout_ms=int(timeout_s * 1000), client_id="gpuyield-topics"
    )
    await admin.start()
    try:
        response = await admin.create_topics(
            [spec.new_topic(replication_factor) for spec in wanted.values()],
            timeout_ms=int(timeout_s * 1000),
        )
        created: list[str] = []
        existing: list[str] = []
        failures: list[str] = []
        for topic_error in response.topic_errors:
            name, code = topic_error[0], topic_error[1]
            message = topic_error[2] if len(topic_error) > 2 else None  # v0 has no message
            if code == 0:
                created.append(name)
            elif code == _TOPIC_ALREADY_EXISTS:
                existing.append(name)
            else:
                failures.append(f"{name}: {message or for_code(code).__name__}")
        if failures:
            raise TopicCreationError("cannot create topics: " + "; ".join(failures))
        if existing:
            await _warn_on_layout_drift(admin, [wanted[name] for name in existing])
        log.info("topics created: %s; already there: %s", created or "none", existing or "none")
        return created
    finally:
        await admin.close()


async def _warn_on_layout_drift(admin: AIOKafkaAdminClient, specs: list[TopicSpec]) -> None:
    described = await admin.describe_topics([spec.name for spec in specs])
    partitions = {item["topic"]: len(item["partitions"]) for item in described}
    for spec in specs:
        actual = partitions.get(spec.name)
        if actual is not None and actual != spec.partitions:
            log.warning(
                "topic %s has %d partitions, the registry says %d: ordering per key and "
                "consumer parallelism differ from the design",
                spec.name,
                actual,
                spec.partitions,
            )
