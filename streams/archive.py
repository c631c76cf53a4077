"""The archive: every gpuyield topic kept as Parquet files, for audits months later.

Kafka keeps a topic for its retention (7 to 30 days here); an audit ("why was
my job evicted in March?") needs more. ``gpuyield archive`` follows every
topic and writes what it reads, byte for byte, to files that DuckDB, pandas
or pyarrow read as they are::

    DIR/<topic>/<partition>/<first offset>-<last offset>.parquet

One row per message: the original ``key`` and ``value`` bytes, ``topic``,
``partition``, ``offset``, the broker's ``timestamp_ms``, and two columns
extracted for queries (``job``, ``kind``; null where a message has none or
cannot be read: the bytes are kept all the same).

Crash safety, without transactions (Tansu has none):

- a file is written whole under a temporary name, flushed to disk, then
  renamed: a reader never sees half a file;
- the files are the record of what is archived. On start the archiver reads
  the last offset of each partition's files and resumes after it; the
  consumer group's committed offset (committed only once a file is
  durable) is a hint for operators' lag dashboards, never trusted over the
  files. So a crash between the rename and the commit re-reads nothing
  twice, and a crash before the rename loses nothing (those offsets are
  read again);
- a file's bytes depend only on its rows (fixed writer options, rows in
  offset order), so writing the same offsets again gives the same file.

Remote storage: ``DIR`` may be any fsspec URL (``s3://bucket/path``,
``gs://...``) where the matching fsspec library is installed; local paths
get the fsync-and-rename treatment, object stores the atomic single put
they offer.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from gpuyield.schemas.labels import JOB_LABEL
from gpuyield.streams.kafka_python_close import close_consumer
from gpuyield.streams.metrics import ArchiveMetrics, lag

log = logging.getLogger(__name__)

SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp_ms", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("job", pa.string()),
        pa.field("kind", pa.string()),
    ]
)
"""The row of every archive file (``docs`` and the README show a query)."""

_FILE_NAME = re.compile(r"(\d{20})-(\d{20})\.parquet")


@dataclass(frozen=True, slots=True)
class ArchivedMessage:
    """One consumed message as the archive keeps it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None


def file_name(first: int, last: int) -> str:
    """Zero-padded, so names sort by offset wherever they are listed."""
    return f"{first:020d}-{last:020d}.parquet"


def extract(value: bytes | None) -> tuple[str | None, str | None]:
    """The ``job`` and ``kind`` columns of one message; (None, None) if it is unreadable.

    ``job`` is the message's job (``demand`` for a decision; a Volcano Job's
    own name, or a pod's ``volcano.sh/job-name``, for a watch event). ``kind``
    says what happened: the object kind of a watch event, an alert's kind, a
    command's action, an ack's outcome, a reservation's state.
    """
    if not value:
        return None, None
    try:
        doc = json.loads(value)
    except ValueError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    job = doc.get("job") if isinstance(doc.get("job"), str) else None
    if job is None and isinstance(doc.get("demand"), str):
        job = doc["demand"]
    kind: Any = None
    for name in ("kind", "action", "outcome", "state"):
        if isinstance(doc.get(name), str):
            kind = doc[name]
            break
    if job is None and isinstance(doc.get("object"), dict):
        job = _kube_job(doc)
    return job, kind


def _kube_job(event: Mapping[str, Any]) -> str | None:
    meta = event["object"].get("metadata")
    if not isinstance(meta, dict):
        return None
    namespace = meta.get("namespace")
    if not isinstance(namespace, str):
        return None
    if event.get("kind") == "Job" and isinstance(meta.get("name"), str):
        return f"{namespace}/{meta['name']}"
    labels = meta.get("labels")
    if isinstance(labels, dict) and isinstance(labels.get(JOB_LABEL), str):
        return f"{namespace}/{labels[JOB_LABEL]}"
    return None


def to_parquet(messages: Sequence[ArchivedMessage]) -> bytes:
    """One file's bytes: the same rows always give the same bytes."""
    rows = sorted(messages, key=lambda m: m.offset)
    extracted = [extract(m.value) for m in rows]
    table = pa.Table.from_pydict(
        {
            "topic": [m.topic for m in rows],
            "partition": [m.partition for m in rows],
            "offset": [m.offset for m in rows],
            "timestamp_ms": [m.timestamp_ms for m in rows],
            "key": [m.key for m in rows],
            "value": [m.value for m in rows],
            "job": [job for job, _ in extracted],
            "kind": [kind for _, kind in extracted],
        },
        schema=SCHEMA,
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=max(1, len(rows)))
    return sink.getvalue()


class Archive:
    """The archive's storage: a local directory or an fsspec URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        fs, root = fsspec.core.url_to_fs(url)
        self.fs: fsspec.AbstractFileSystem = fs
        self.root = str(root).rstrip("/")

    def _dir(self, topic: str, partition: int) -> str:
        return f"{self.root}/{topic}/{partition}"

    def files(self, topic: str, partition: int) -> list[tuple[int, int, str]]:
        """``(first, last, path)`` of one partition's files, in offset order."""
        directory = self._dir(topic, partition)
        if not self.fs.exists(directory):
            return []
        found = []
        for path in self.fs.ls(directory, detail=False):
            match = _FILE_NAME.fullmatch(str(path).rsplit("/", 1)[-1])
            if match:
                found.append((int(match[1]), int(match[2]), str(path)))
        return sorted(found)

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The first offset not archived yet, or None when nothing is."""
        files = self.files(topic, partition)
        return files[-1][1] + 1 if files else None

    def write(self, messages: Sequence[ArchivedMessage]) -> str:
        """Write one partition's messages as one file, atomically; return its path."""
        if not messages:
            raise ValueError("an archive file needs at least one message")
        topic, partition = messages[0].topic, messages[0].partition
        if any((m.topic, m.partition) != (topic, partition) for m in messages):
            raise ValueError("an archive file holds one topic partition")
        offsets = [m.offset for m in messages]
        directory = self._dir(topic, partition)
        path = f"{directory}/{file_name(min(offsets), max(offsets))}"
        data = to_parquet(messages)
        if isinstance(self.fs, LocalFileSystem):
            _write_local(directory, path, data)
        else:
            # Object stores make a single put atomic: the object appears whole or not at all.
            self.fs.makedirs(directory, exist_ok=True)
            self.fs.pipe_file(path, data)
        return path

    def read(self, topics: Iterable[str] | None = None) -> pa.Table:
        """Every archived row (of ``topics``), in topic, partition and offset order."""
        wanted = set(topics) if topics is not None else None
        tables = []
        if self.fs.exists(self.root):
            for topic_dir in sorted(self.fs.ls(self.root, detail=False)):
                topic = str(topic_dir).rsplit("/", 1)[-1]
                if wanted is not None and topic not in wanted:
                    continue
                for partition_dir in sorted(self.fs.ls(topic_dir, detail=False)):
                    name = str(partition_dir).rsplit("/", 1)[-1]
                    if not name.isdigit():
                        continue
                    for _, _, path in self.files(topic, int(name)):
                        with self.fs.open(path, "rb") as handle:
                            tables.append(pq.read_table(handle))
        if not tables:
            return SCHEMA.empty_table()
        return pa.concat_tables(tables)


def _write_local(directory: str, path: str, data: bytes) -> None:
    os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class ArchiveWriter:
    """Writes messages produced elsewhere (no broker) as an archive, ``gpuyield archive``'s files.

    For ``gpuyield simulate --archive``: each message gets the next offset of
    its topic partition, from 0, and a partition's file is written once it
    holds ``flush_records`` messages (and the rest on ``close``), so memory
    stays bounded however long the run. ``partitions`` gives each topic's
    partition count (the deployment's layout); a keyed message goes to the
    partition Kafka's default partitioner would pick (``partition``). An
    archive directory that already holds any of the topics is refused: its
    offsets would collide.
    """

    def __init__(
        self,
        archive: Archive,
        partitions: Mapping[str, int],
        partition: Callable[[bytes, int], int],
        *,
        flush_records: int = 10_000,
    ) -> None:
        if flush_records < 1:
            raise ValueError("flush_records must be >= 1")
        for topic in partitions:
            if archive.fs.exists(f"{archive.root}/{topic}"):
                raise ValueError(f"{archive.url} already holds {topic}: write to a new directory")
        self.archive = archive
        self.partitions = dict(partitions)
        self._partition = partition
        self.flush_records = flush_records
        self._next: dict[tuple[str, int], int] = {}
        self._pending: dict[tuple[str, int], list[ArchivedMessage]] = {}
        self.written: list[str] = []
        self.bytes_written = 0

    def add(self, topic: str, key: bytes, value: bytes, timestamp_ms: int) -> None:
        count = self.partitions.get(topic)
        if count is None:
            raise ValueError(f"{topic}: not a topic of this archive")
        partition = self._partition(key, count) if count > 1 else 0
        where = (topic, partition)
        offset = self._next.get(where, 0)
        self._next[where] = offset + 1
        pending = self._pending.setdefault(where, [])
        pending.append(ArchivedMessage(topic, partition, offset, timestamp_ms, key, value))
        if len(pending) >= self.flush_records:
            self._flush(where)

    def _flush(self, where: tuple[str, int]) -> None:
        pending = self._pending.pop(where, None)
        if pending:
            path = self.archive.write(pending)
            self.written.append(path)
            self.bytes_written += int(self.archive.fs.size(path))

    def close(self) -> None:
        for where in sorted(self._pending):
            self._flush(where)


@dataclass
class _Pending:
    messages: list[ArchivedMessage] = field(default_factory=list)
    since: float = 0.0


class Archiver:
    """Reads the topics with kafka-python and writes a file per partition batch.

    ``consumer`` is a ``kafka.KafkaConsumer`` (or anything with its
    ``topics``/``partitions_for_topic``/``assign``/``seek``/
    ``seek_to_beginning``/``poll``/``commit``/``close``), built by the caller
    with ``group_id`` set and auto-commit off. The archiver assigns every
    partition itself (no group rebalance: one archiver per deployment, its
    files decide where it resumes).
    """

    def __init__(
        self,
        consumer: Any,
        archive: Archive,
        topics: Sequence[str],
        *,
        flush_records: int = 5000,
        flush_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: ArchiveMetrics | None = None,
    ) -> None:
        if flush_records < 1 or flush_s <= 0:
            raise ValueError("flush_records must be >= 1 and flush_s > 0")
        self.consumer = consumer
        self.archive = archive
        self.topics = tuple(topics)
        self.flush_records = flush_records
        self.flush_s = flush_s
        self.clock = clock
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.written: list[str] = []
        self.metrics = metrics

    def assign(self) -> int:
        """Assign the partitions of every topic that exists; return how many are new.

        Only topics the broker lists are asked about: asking Tansu for the
        metadata of a missing topic creates it, with its own layout.
        """
        from kafka import TopicPartition

        existing = self.consumer.topics()
        partitions = set(self.assigned)
        for topic in self.topics:
            if topic in existing:
                for partition in self.consumer.partitions_for_topic(topic) or ():
                    partitions.add((topic, partition))
        new = partitions - self.assigned
        if not new:
            return 0
        self.consumer.assign([TopicPartition(t, p) for t, p in sorted(partitions)])
        for topic, partition in sorted(new):
            tp = TopicPartition(topic, partition)
            resume = self.archive.next_offset(topic, partition)
            if resume is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, resume)
            log.info("archiving %s[%d] from %s", topic, partition, resume or "the beginning")
        for topic, partition in sorted(self.assigned):
            # assign() resets positions: put the old partitions back after what is buffered.
            tp = TopicPartition(topic, partition)
            buffered = self.pending.get((topic, partition))
            if buffered and buffered.messages:
                self.consumer.seek(tp, buffered.messages[-1].offset + 1)
            else:
                resume = self.archive.next_offset(topic, partition)
                if resume is None:
                    self.consumer.seek_to_beginning(tp)
                else:
                    self.consumer.seek(tp, resume)
        self.assigned = partitions
        return len(new)

    def poll(self, timeout_ms: int = 500) -> int:
        """Read what is there, write the batches that are due; return messages read."""
        batches = self.consumer.poll(timeout_ms=timeout_ms)
        now = self.clock()
        count = 0
        for tp, records in batches.items():
            pending = self.pending.setdefault((tp.topic, tp.partition), _Pending(since=now))
            if not pending.messages:
                pending.since = now
            for record in records:
                pending.messages.append(
                    ArchivedMessage(
                        record.topic,
                        record.partition,
                        record.offset,
                        record.timestamp if record.timestamp is not None else None,
                        record.key,
                        record.value,
                    )
                )
                count += 1
                if len(pending.messages) >= self.flush_records:
                    self._flush(tp.topic, tp.partition)
                    pending = self.pending.setdefault((tp.topic, tp.partition), _Pending())
                    pending.since = now
        for (topic, partition), pending in list(self.pending.items()):
            if pending.messages and now - pending.since >= self.flush_s:
                self._flush(topic, partition)
        if self.metrics is not None and batches:
            self.metrics.positions(
                (tp.topic, tp.partition, lag(self.consumer.highwater(tp), records[-1].offset + 1))
                for tp, records in batches.items()
                if records
            )
        return count

    def flush(self) -> None:
        """Write every buffered batch (on stop)."""
        for topic, partition in list(self.pending):
            self._flush(topic, partition)

    def _flush(self, topic: str, partition: int) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        pending = self.pending.pop((topic, partition), None)
        if pending is None or not pending.messages:
            return
        path = self.archive.write(pending.messages)
        self.written.append(path)
        if self.metrics is not None:
            self.metrics.written(topic, len(pending.messages))
        last = pending.messages[-1].offset
        # Committed only once the file is durable; a failed commit costs nothing,
        # since the files, not the group, say where to resume.
        with contextlib.suppress(Exception):
            self.consumer.commit(
                {TopicPartition(topic, partition): OffsetAndMetadata(last + 1, "", -1)}
            )
        log.info(
            "archived %s[%d] %d..%d to %s", topic, partition, pending.messages[0].offset, last, path
        )

    def close(self) -> None:
        self.flush()
        close_consumer(self.consumer)


def archive_until_caught_up(
    client_kwargs: Mapping[str, Any],
    out: str,
    topics: Sequence[str],
    *,
    group_id: str = "gpuyield-archive",
    idle_s: float = 1.0,
    timeout_s: float = 120.0,
) -> list[str]:
    """Archive ``topics`` to ``out`` until nothing new comes for ``idle_s``; the files written.

    The one-shot form of ``gpuyield archive``, for a run that is over (``gpuyield
    demo --archive``): the same ``Archiver``, so the same files and the same
    resumption from them.
    """
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        **client_kwargs,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="gpuyield-archive",
    )
    archiver = Archiver(consumer, Archive(out), topics)
    try:
        archiver.assign()
        deadline = time.monotonic() + timeout_s
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < idle_s and time.monotonic() < deadline:
            if archiver.poll(timeout_ms=200):
                idle_since = time.monotonic()
    finally:
        archiver.close()
    return archiver.written
