"""The topic registry, and topic creation on a real (Tansu) broker: idempotent, configs applied."""

from __future__ import annotations

import logging

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from gpuyield.agents.controller.decider import INPUT_MODELS
from gpuyield.schemas.messages import (
    Alert,
    DeadLetter,
    Decision,
    Heartbeat,
    JobProgressBatch,
    JournalEntry,
    KubeEvent,
    Reservation,
    Tick,
    YieldAck,
    YieldCommand,
)
from gpuyield.streams.topics import (
    ALERTS,
    DAY_MS,
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
    TopicSpec,
    ensure_topics,
    registry,
)

EXPECTED = {  # name: (schema, partitions, retention)
    KUBE_EVENTS: (KubeEvent, 1, 7 * DAY_MS),
    HEARTBEATS: (Heartbeat, 8, DAY_MS),
    JOB_PROGRESS: (JobProgressBatch, 1, 7 * DAY_MS),
    TICKS: (Tick, 1, 7 * DAY_MS),
    DECIDER_JOURNAL: (JournalEntry, 1, 7 * DAY_MS),
    DECISIONS: (Decision, 1, 30 * DAY_MS),
    YIELD_COMMANDS: (YieldCommand, 8, 7 * DAY_MS),
    YIELD_ACKS: (YieldAck, 1, 7 * DAY_MS),
    ALERTS: (Alert, 1, 30 * DAY_MS),
    DEAD_LETTERS: (DeadLetter, 1, 30 * DAY_MS),
    RESERVATIONS: (Reservation, 1, 30 * DAY_MS),
}


def test_every_topic_has_its_schema_layout_and_reason() -> None:
    specs = registry()
    layout = {spec.name: (spec.value_type, spec.partitions, spec.retention_ms) for spec in specs}
    assert layout == EXPECTED
    for spec in specs:
        assert spec.key
        assert spec.why
        # nothing a replay or an audit reads is compacted away
        assert spec.configs()["cleanup.policy"] == "delete"
        assert spec.configs()["retention.ms"] == str(spec.retention_ms)


def test_only_the_decisions_topic_takes_messages_beyond_kafka_s_default_size() -> None:
    limits = {spec.name: spec.configs().get("max.message.bytes") for spec in registry()}
    assert limits.pop(DECISIONS) == str(64 * 1024 * 1024)
    assert set(limits.values()) == {None}
    sized = {spec.name: spec.max_message_bytes for spec in registry(max_message_bytes=8 << 20)}
    assert sized[DECISIONS] == 8 << 20


def test_the_configured_partitions_apply_to_the_job_and_node_keyed_topics() -> None:
    partitions = {spec.name: spec.partitions for spec in registry(topic_partitions=3)}
    assert partitions[HEARTBEATS] == partitions[YIELD_COMMANDS] == 3
    assert partitions[KUBE_EVENTS] == partitions[YIELD_ACKS] == 1


def test_a_prefix_renames_every_topic() -> None:
    assert [spec.name for spec in registry(prefix="t1.")] == [
        "t1." + spec.name for spec in registry()
    ]


async def describe(bootstrap: str, specs: tuple[TopicSpec, ...]) -> dict[str, tuple[int, dict]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        listed = set(await admin.list_topics())
        missing = [spec.name for spec in specs if spec.name not in listed]
        assert not missing, f"not created: {missing}"
        topics = await admin.describe_topics([spec.name for spec in specs])
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, spec.name) for spec in specs]
        )
    finally:
        await admin.close()
    configs: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response.resources:
            configs[resource[3]] = {entry[0]: entry[1] for entry in resource[4]}
    return {item["topic"]: (len(item["partitions"]), configs[item["topic"]]) for item in topics}


async def test_ensure_topics_creates_them_once(kafka_bootstrap: str, topic_prefix: str) -> None:
    specs = registry(topic_partitions=4, prefix=topic_prefix)
    client = {"bootstrap_servers": kafka_bootstrap}
    created = await ensure_topics(client, specs, replication_factor=1)
    assert sorted(created) == sorted(spec.name for spec in specs)
    assert await ensure_topics(client, specs, replication_factor=1) == []
    described = await describe(kafka_bootstrap, specs)
    for spec in specs:
        partitions, configs = described[spec.name]
        assert partitions == spec.partitions
        assert spec.configs().items() <= configs.items()  # a real Kafka lists its defaults too


async def test_only_the_missing_topics_are_created(kafka_bootstrap: str, topic_prefix: str) -> None:
    specs = registry(prefix=topic_prefix)
    client = {"bootstrap_servers": kafka_bootstrap}
    assert await ensure_topics(client, specs[:2], replication_factor=1) == [
        spec.name for spec in specs[:2]
    ]
    assert await ensure_topics(client, specs, replication_factor=1) == [
        spec.name for spec in specs[2:]
    ]
    assert await ensure_topics(client, [], replication_factor=1) == []


async def test_an_existing_topic_with_other_partitions_is_kept_and_reported(
    kafka_bootstrap: str, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    (heartbeats,) = [spec for spec in registry(prefix=topic_prefix) if spec.name.endswith("beats")]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(heartbeats.name, 2, 1)])
    finally:
        await admin.close()
    with caplog.at_level(logging.WARNING, logger="gpuyield.streams.topics"):
        created = await ensure_topics(
            {"bootstrap_servers": kafka_bootstrap}, [heartbeats], replication_factor=1
        )
    assert created == []
    assert f"topic {heartbeats.name} has 2 partitions, the registry says 8" in caplog.text


async def test_fresh_topics_fixture_gives_each_test_its_own(
    fresh_topics: dict[str, TopicSpec], topic_prefix: str
) -> None:
    assert set(fresh_topics) == set(EXPECTED)
    assert all(spec.name.startswith(topic_prefix) for spec in fresh_topics.values())


def test_the_decider_reads_each_of_its_input_topics_as_the_registry_says() -> None:
    schemas = {spec.name: spec.value_type for spec in registry()}
    assert {name: schemas[name] for name in INPUT_MODELS} == dict(INPUT_MODELS)
    assert set(INPUT_MODELS) == {KUBE_EVENTS, JOB_PROGRESS, YIELD_ACKS, TICKS}
