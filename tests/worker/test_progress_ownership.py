"""Two workers share the heartbeats: each job folded by one of them, nothing lost when one leaves.

Real processes (``gpuyield worker``) of one deployment on the session's broker,
the production topic layout (heartbeats keyed by job over 8 partitions). Who
folds what is read from each worker's own count of the heartbeats it read, by
partition (``gpuyield_heartbeats_total{partition}``); what was folded, from
the summaries forwarded to the decider on ``gpuyield.job-progress``.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
from collections import Counter
from collections.abc import Callable

import pytest
from live_worker import LiveWorker, decoded, publish, read_until
from prometheus_client.parser import text_string_to_metric_families

from gpuyield.schemas.messages import Heartbeat, JobProgress, JobProgressBatch
from gpuyield.streams.partitioning import partition_for
from gpuyield.streams.topics import DEFAULT_PARTITIONS

# two worker processes and a takeover: under a minute on 2 shared cores, more when they are busy
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

JOBS = [f"research/sweep-{i:02d}" for i in range(48)]  # on all 8 partitions
PARTITION_OF = {job: partition_for(job.encode(), range(DEFAULT_PARTITIONS)) for job in JOBS}
ROUNDS_TOGETHER = 4
ROUNDS_AFTER = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_by_partition(port: int) -> Counter[int]:
    """A worker's count of the heartbeats it read, by partition."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    counts: Counter[int] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "gpuyield_heartbeats_total":
                counts[int(s.labels["partition"])] += int(s.value)
    return counts


def beats_of_round(n: int, started: float) -> list[tuple[str, Heartbeat]]:
    """Every job's beat of round ``n``: a few hundred steps on, 4 % further, a checkpoint
    every other round (each beat moves enough to be forwarded)."""
    at = time.time()
    return [
        (
            job,
            Heartbeat(
                job=job,
                pod=f"{job.split('/')[1]}-worker-0",
                step=100 * n + i,
                progress=min(1.0, 0.04 * n),
                last_checkpoint_step=100 * (n - n % 2) + i,
                last_checkpoint_at=started + (n - n % 2) / 100,
                sent_at=at,
            ),
        )
        for i, job in enumerate(JOBS)
    ]


async def progress_reaching(
    bootstrap: str, topic: str, last: dict[str, Heartbeat], timeout_s: float
) -> dict[str, JobProgress]:
    """Each job's newest forwarded summary, read until every one shows its job's ``last`` beat."""

    def newest(raw: list[bytes]) -> dict[str, JobProgress]:
        found: dict[str, JobProgress] = {}
        for batch in decoded(raw, JobProgressBatch):
            for record in batch.summaries:
                if record.job not in found or record.step >= found[record.job].step:
                    found[record.job] = record
        return found

    def shows_last(seen: dict[str, list[bytes]]) -> bool:
        found = newest(seen[topic])
        return all(j in found and found[j].step >= last[j].step for j in last)

    seen = await read_until(bootstrap, [topic], shows_last, timeout_s=timeout_s)
    return newest(seen[topic])


def started(factory: Callable[..., LiveWorker], name: str) -> tuple[LiveWorker, int]:
    port = free_port()
    return factory(name, env={"GPUYIELD_METRICS_PORT": str(port)}), port


@pytest.mark.parametrize("leaving", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_each_jobs_progress_is_folded_by_one_worker_and_none_is_lost_when_one_leaves(
    worker_factory: Callable[..., LiveWorker],
    kafka_bootstrap: str,
    topic_prefix: str,
    leaving: signal.Signals,
) -> None:
    heartbeats = topic_prefix + "gpuyield.heartbeats"
    progress = topic_prefix + "gpuyield.job-progress"
    first, first_port = started(worker_factory, "first")
    second, second_port = started(worker_factory, "second")
    first.wait_ready()
    second.wait_ready()
    begun = time.time()
    first_beats = dict(beats_of_round(1, begun))
    await publish(kafka_bootstrap, heartbeats, list(first_beats.items()))
    await progress_reaching(kafka_bootstrap, progress, first_beats, timeout_s=90)

    # Both in the group: every partition's beats are read by exactly one of them, once.
    before = {
        first_port: read_by_partition(first_port),
        second_port: read_by_partition(second_port),
    }
    sent: Counter[int] = Counter()
    for n in range(2, 2 + ROUNDS_TOGETHER):
        beats = beats_of_round(n, begun)
        sent.update(PARTITION_OF[job] for job, _ in beats)
        await publish(kafka_bootstrap, heartbeats, beats)
    await progress_reaching(kafka_bootstrap, progress, dict(beats), timeout_s=60)
    read = {
        port: read_by_partition(port) - counts for port, counts in before.items()
    }  # what each read in these rounds
    diagnosis = f"sent {dict(sent)}, read {read}\n{first.tail(20)}\n{second.tail(20)}"
    for partition, count in sent.items():
        readers = [port for port, counts in read.items() if counts[partition]]
        assert len(readers) == 1, diagnosis
        assert read[readers[0]][partition] == count, diagnosis
    assert all(read.values()), diagnosis  # the group shares them: both fold some jobs

    # One leaves right after a round is sent (read or not); the other takes its partitions over.
    unread = 2 + ROUNDS_TOGETHER
    await publish(kafka_bootstrap, heartbeats, beats_of_round(unread, begun))
    assert second.process is not None
    second.process.send_signal(leaving)
    second.process.wait(30)
    taken_over = read_by_partition(first_port)
    for n in range(unread + 1, unread + 1 + ROUNDS_AFTER):
        beats = beats_of_round(n, begun)
        await publish(kafka_bootstrap, heartbeats, beats)
    last = dict(beats)
    final = await progress_reaching(kafka_bootstrap, progress, last, timeout_s=120)

    diagnosis = first.tail(40)
    for job, beat in last.items():
        record = final[job]
        assert (record.step, record.progress) == (beat.step, beat.progress), diagnosis
        assert (record.last_checkpoint_step, record.last_checkpoint_at) == (
            beat.last_checkpoint_step,
            beat.last_checkpoint_at,
        ), diagnosis
        # folded on from the leaver's record (recovered from the changelog), not anew
        assert record.first_seen_at == first_beats[job].sent_at, diagnosis
    after = read_by_partition(first_port) - taken_over
    assert set(after) == set(PARTITION_OF.values()), diagnosis  # the survivor reads them all
