"""A decision record of a big cluster reaches its topic, through the worker's own producer.

A decision carries the planner's whole input and output: the snapshot and
every candidate's verdicts, 3 MB at 1,000 nodes. Kafka's 1 MiB default made
the worker's producer refuse it (``MessageSizeTooLargeError``) from about 300
nodes, and the yield commands sent after it never left.
"""

from __future__ import annotations

import faust
from aiokafka import AIOKafkaConsumer
from builders import HOUR, NOW, a_job, a_node, a_queue, a_snapshot

from gpuyield.agents.planner import plan
from gpuyield.schemas import Snapshot
from gpuyield.schemas.messages import Decision
from gpuyield.streams.kafka_client import faust_app_kwargs
from gpuyield.streams.settings import MAX_MESSAGE_BYTES, settings_from
from gpuyield.streams.topics import DECISIONS, TopicSpec, registry

NODES = 600  # three jobs a node, full: a decision record of about 2 MB


def full_cluster() -> Snapshot:
    nodes = [a_node(f"gpu-{n:04d}") for n in range(NODES)]
    jobs = [
        a_job(f"research/run-{n:04d}-{k}")
        .in_queue("research")
        .running([(f"gpu-{n:04d}", gpus)], started_at=NOW - (k + 1) * HOUR)
        for n in range(NODES)
        for k, gpus in enumerate((4, 2, 2))
    ]
    urgent = a_job("prod/fine-tune").in_queue("production").priority(1000).pending(4, 8)
    queues = [a_queue("research"), a_queue("production", guarantee=64)]
    return a_snapshot(nodes=nodes, queues=queues, jobs=[*jobs, urgent])


def big_decision() -> bytes:
    snapshot = full_cluster()
    result = plan(snapshot, "prod/fine-tune", explain=True)
    decision = Decision(
        decision_id="d-1",
        demand="prod/fine-tune",
        decided_at=NOW,
        snapshot=snapshot,
        plan=result,
    )
    return decision.model_dump_json().encode()


def test_the_decisions_topic_is_created_to_hold_a_big_cluster_s_records() -> None:
    spec = next(s for s in registry() if s.name == DECISIONS)
    assert spec.configs()["max.message.bytes"] == str(MAX_MESSAGE_BYTES)


async def test_the_worker_s_producer_sends_a_decision_of_a_600_node_cluster(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    value = big_decision()
    assert len(value) > 1024 * 1024  # more than Kafka's default limit
    topic = fresh_topics[DECISIONS].name
    app = faust.App(**faust_app_kwargs(settings_from({}), [kafka_bootstrap]), store="memory://")
    await app.producer.start()
    try:
        await app.producer.send_and_wait(topic, b"prod/fine-tune", value, None, None, None)
    finally:
        await app.producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        got = await consumer.getmany(timeout_ms=10_000)
    finally:
        await consumer.stop()
    values = [m.value for batch in got.values() for m in batch]
    assert values == [value]
    assert Decision.model_validate_json(values[0]).plan is not None
