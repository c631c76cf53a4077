"""The archive: every message kept byte for byte in Parquet, none twice, none lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, KafkaProducer

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import (
    Alert,
    AlertKind,
    CommandAction,
    Heartbeat,
    KubeEvent,
    KubeEventType,
    KubeKind,
    YieldCommand,
)
from gpuyield.streams.archive import (
    Archive,
    ArchivedMessage,
    Archiver,
    ArchiveWriter,
    extract,
    to_parquet,
)
from gpuyield.streams.metrics import ArchiveMetrics
from gpuyield.streams.partitioning import partition_for
from gpuyield.streams.topics import TopicSpec

NOW = 1_764_460_800.0
GPUYIELD = Path(sys.executable).with_name("gpuyield")


def beat(step: int) -> bytes:
    return encode(
        Heartbeat(job="research/sweep-17", pod="sweep-17-0", step=step, progress=0.5, sent_at=NOW)
    )


def message(offset: int, value: bytes | None = b"{}", topic: str = "t") -> ArchivedMessage:
    return ArchivedMessage(topic, 0, offset, 1_764_460_800_000 + offset, b"k", value)


def wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_a_heartbeat_is_filed_under_its_job() -> None:
    assert extract(beat(3)) == ("research/sweep-17", None)


def test_a_command_is_filed_under_its_job_and_action() -> None:
    command = YieldCommand(
        command_id="c1",
        decision_id="d1",
        action=CommandAction.RESUME,
        node="gpu-01",
        job="research/sweep-17",
        issued_at=NOW,
        deadline=NOW + 120,
    )
    assert extract(encode(command)) == ("research/sweep-17", "resume")


def test_an_alert_is_filed_under_its_kind() -> None:
    alert = Alert(alert_id="a1", kind=AlertKind.LIVELOCK, job="ml/a", message="loop", raised_at=NOW)
    assert extract(encode(alert)) == ("ml/a", "livelock")


def test_a_watched_pod_is_filed_under_its_volcano_job() -> None:
    pod = {
        "metadata": {"name": "ft-0", "namespace": "prod", "labels": {"volcano.sh/job-name": "ft"}}
    }
    event = KubeEvent(
        type=KubeEventType.ADDED, kind=KubeKind.POD, name="ft-0", object=pod, observed_at=NOW
    )
    assert extract(encode(event)) == ("prod/ft", "Pod")


@pytest.mark.parametrize("value", [None, b"", b"\x00\xff not json", b"[1, 2]"])
def test_unreadable_bytes_are_kept_with_empty_query_columns(value: bytes | None) -> None:
    assert extract(value) == (None, None)


def test_the_same_rows_make_the_same_file_bytes_in_any_order() -> None:
    rows = [message(i, beat(i)) for i in range(5)]
    assert to_parquet(rows) == to_parquet(list(reversed(rows)))


def test_a_file_is_named_by_its_offset_range_and_holds_the_original_bytes(
    tmp_path: Path,
) -> None:
    archive = Archive(str(tmp_path))
    garbage = b"\x00\xff garbage"
    path = archive.write([message(7, beat(7)), message(8, garbage), message(9, None)])
    assert path.endswith("t/0/00000000000000000007-00000000000000000009.parquet")
    table = pq.read_table(path)
    assert table.column("value").to_pylist() == [beat(7), garbage, None]
    assert table.column("offset").to_pylist() == [7, 8, 9]
    assert archive.next_offset("t", 0) == 10
    assert not [p for p in os.listdir(Path(path).parent) if ".tmp-" in p]


def test_an_empty_partition_has_no_resume_point(tmp_path: Path) -> None:
    assert Archive(str(tmp_path)).next_offset("t", 3) is None


def test_a_fsspec_url_is_an_archive_too() -> None:
    archive = Archive("memory://audit-archive")
    archive.write([message(0, beat(0)), message(1, beat(1))])
    assert archive.read().column("offset").to_pylist() == [0, 1]


def by_job_hash(key: bytes, partitions: int) -> int:
    return partition_for(key, range(partitions))


def test_a_writer_numbers_each_partitions_messages_and_files_them_by_offset_range(
    tmp_path: Path,
) -> None:
    archive = Archive(str(tmp_path))
    writer = ArchiveWriter(archive, {"beats": 4, "ticks": 1}, by_job_hash, flush_records=3)
    jobs = [f"research/sweep-{i}".encode() for i in range(6)]
    for step in range(5):
        for job in jobs:
            writer.add("beats", job, beat(step), 1_700_000_000_000 + step)
        writer.add("ticks", b"tick", b"{}", 1_700_000_000_000 + step)
    writer.close()

    rows = archive.read().to_pylist()
    assert len(rows) == 35
    for topic, partition in {(r["topic"], r["partition"]) for r in rows}:
        held = [r for r in rows if (r["topic"], r["partition"]) == (topic, partition)]
        assert [r["offset"] for r in held] == list(range(len(held)))
        files = archive.files(topic, partition)
        assert all(last - first < 3 for first, last, _ in files)  # flushed every 3 rows
        assert [(f, last) for f, last, _ in files] == [
            (first, min(first + 2, len(held) - 1)) for first in range(0, len(held), 3)
        ]
    for row in rows:  # a job's messages on the partition Kafka's own partitioner picks
        if row["topic"] == "beats":
            assert row["partition"] == by_job_hash(row["key"], 4)
    assert writer.bytes_written == sum(os.path.getsize(path) for path in writer.written)


def test_a_writer_refuses_a_directory_that_holds_its_topics(tmp_path: Path) -> None:
    archive = Archive(str(tmp_path))
    archive.write([message(0, beat(0))])  # topic "t"
    with pytest.raises(ValueError, match="already holds t: write to a new directory"):
        ArchiveWriter(archive, {"t": 1}, by_job_hash)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, batch_size=1)
    try:
        for value in values:
            producer.send(topic, key=b"research/sweep-17", value=value, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close()


def archived_offsets(archive: Archive, topic: str) -> list[int]:
    return [int(o) for o in archive.read([topic]).column("offset").to_pylist()]


def test_the_archiver_keeps_every_message_of_every_topic(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec], tmp_path: Path
) -> None:
    heartbeats = fresh_topics["gpuyield.heartbeats"].name
    alerts = fresh_topics["gpuyield.alerts"].name
    values = [beat(i) for i in range(12)]
    produce(kafka_bootstrap, heartbeats, values)
    produce(kafka_bootstrap, alerts, [b"\x00 not json"])
    archive = Archive(str(tmp_path))
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id=f"{heartbeats}-archive",
        enable_auto_commit=False,
    )
    archiver = Archiver(consumer, archive, [heartbeats, alerts], flush_records=5, flush_s=0.5)
    try:
        archiver.assign()
        assert wait_for(
            lambda: archiver.poll(200) >= 0 and len(archived_offsets(archive, heartbeats)) == 12,
            timeout_s=60,
        )
        assert wait_for(lambda: archiver.poll(200) >= 0 and archived_offsets(archive, alerts), 30)
    finally:
        archiver.close()
    table = archive.read([heartbeats])
    assert table.column("value").to_pylist() == values
    assert set(table.column("job").to_pylist()) == {"research/sweep-17"}
    assert archive.read([alerts]).column("value").to_pylist() == [b"\x00 not json"]


def test_the_archivers_metrics_count_what_its_files_hold_and_its_lag(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec], topic_prefix: str, tmp_path: Path
) -> None:
    heartbeats = fresh_topics["gpuyield.heartbeats"].name
    produce(kafka_bootstrap, heartbeats, [beat(i) for i in range(7)])
    archive = Archive(str(tmp_path))
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id=f"{heartbeats}-archive",
        enable_auto_commit=False,
    )
    metrics = ArchiveMetrics(prefix=topic_prefix)
    archiver = Archiver(
        consumer, archive, [heartbeats], flush_records=5, flush_s=0.5, metrics=metrics
    )
    try:
        archiver.assign()
        assert wait_for(
            lambda: archiver.poll(200) >= 0 and len(archived_offsets(archive, heartbeats)) == 7,
            timeout_s=60,
        )
    finally:
        archiver.close()
    sample = metrics.registry.get_sample_value
    assert sample("gpuyield_archived_messages_total", {"topic": "gpuyield.heartbeats"}) == 7
    assert sample("gpuyield_archive_files_total", {}) == 2  # 5, then the other 2 after 0.5 s
    assert sample("gpuyield_consumer_lag_messages", {"topic": "gpuyield.heartbeats"}) == 0


def start_archiver(bootstrap: str, out: Path, prefix: str) -> subprocess.Popen[bytes]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUYIELD_")},
        "GPUYIELD_KAFKA_BOOTSTRAP": bootstrap,
        "GPUYIELD_TOPIC_PREFIX": prefix,
        "GPUYIELD_APP_ID": prefix.rstrip("."),
        "GPUYIELD_STATE_DIR": str(out.parent / "state"),
    }
    return subprocess.Popen(
        [str(GPUYIELD), "archive", "--out", str(out), "--flush-records", "4", "--flush-s", "0.5"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
def test_an_archiver_killed_and_restarted_leaves_no_gap_and_no_duplicate(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec], topic_prefix: str, tmp_path: Path
) -> None:
    topic = fresh_topics["gpuyield.heartbeats"].name
    out = tmp_path / "archive"
    archive = Archive(str(out))
    produce(kafka_bootstrap, topic, [beat(i) for i in range(10)])
    first = start_archiver(kafka_bootstrap, out, topic_prefix)
    try:
        assert wait_for(lambda: len(archived_offsets(archive, topic)) >= 8, timeout_s=90)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert first.stderr is not None
        first.stderr.close()
    produce(kafka_bootstrap, topic, [beat(i) for i in range(10, 25)])
    second = start_archiver(kafka_bootstrap, out, topic_prefix)
    try:
        assert wait_for(lambda: len(archived_offsets(archive, topic)) >= 25, timeout_s=90)
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = second.communicate(timeout=30)
    assert archived_offsets(archive, topic) == list(range(25))
    steps = [json.loads(v)["step"] for v in archive.read([topic]).column("value").to_pylist()]
    assert steps == list(range(25))
    assert second.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr
