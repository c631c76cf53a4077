"""The progress agent's fold over the progress table, without a broker.

The table is a plain mapping here, as faust's memory store is: a job's key to
the wire bytes of its last forwarded record.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.progress import ForwardRule, fold
from gpuyield.agents.worker.app import WorkerOptions, build_app
from gpuyield.agents.worker.heartbeats import Forwarded, ProgressFolder, forward_batches
from gpuyield.schemas.decoding import decode, encode
from gpuyield.schemas.messages import Heartbeat, JobProgress, JobProgressBatch

NOW = 1_790_000_000.0
JOB = "research/sweep-0"


def beat(
    step: int, at: float, progress: float, checkpoint_at: float | None = None, job: str = JOB
) -> Heartbeat:
    return Heartbeat(
        job=job,
        pod=f"{job.split('/')[1]}-0",
        step=step,
        progress=progress,
        sent_at=at,
        last_checkpoint_step=None if checkpoint_at is None else step,
        last_checkpoint_at=checkpoint_at,
    )


def stored(table: dict[bytes, bytes], job: str = JOB) -> JobProgress:
    return JobProgress.model_validate_json(table[job.encode()])


def test_a_batch_forwards_each_changed_job_once_and_persists_only_what_it_forwards() -> None:
    table: dict[bytes, bytes] = {}
    folder = ProgressFolder(table)
    changed: dict[str, None] = {}
    for i in range(5):  # one job beats five times in one batch
        job = folder.fold(beat(100 + i, NOW + i, 0.10 + i / 1000))
        if job is not None:
            changed[job] = None
    forwarded = folder.forward_changed(changed)
    assert [(f.record.job, f.record.step) for f in forwarded] == [(JOB, 104)]
    assert stored(table).step == 104
    # A beat that moves nothing that matters is folded but neither forwarded nor written.
    folder.fold(beat(105, NOW + 10, 0.1045))
    assert folder.forward_changed({JOB: None}) == []
    assert stored(table).step == 104


def test_a_job_that_barely_moves_is_forwarded_again_only_after_the_configured_silence() -> None:
    config = ControllerConfig(progress_forward_delta=0.05, progress_forward_silence_s=120)
    folder = ProgressFolder({}, rule=ForwardRule.of(config))
    folder.fold(beat(100, NOW, 0.10))
    assert folder.to_forward(JOB) is not None
    forwarded_at = {}
    for i in range(1, 30):  # a beat every 10 s, 0.1 % of progress each
        folder.fold(beat(100 + i, NOW + 10 * i, 0.10 + i / 1000))
        record = folder.to_forward(JOB)
        if record is not None:
            forwarded_at[i * 10] = record.record.progress
    assert forwarded_at == {120: 0.112, 240: 0.124}  # 1.2 % each time: below the 5 % delta


def test_a_job_that_moves_the_configured_delta_is_forwarded_at_once() -> None:
    config = ControllerConfig(progress_forward_delta=0.05, progress_forward_silence_s=3600)
    folder = ProgressFolder({}, rule=ForwardRule.of(config))
    folder.fold(beat(100, NOW, 0.10))
    assert folder.to_forward(JOB) is not None
    folder.fold(beat(200, NOW + 10, 0.149))
    assert folder.to_forward(JOB) is None
    folder.fold(beat(300, NOW + 20, 0.16))
    forwarded = folder.to_forward(JOB)
    assert forwarded is not None
    assert forwarded.record.step == 300


def test_the_table_holds_the_very_bytes_forwarded_to_the_decider() -> None:
    table: dict[bytes, bytes] = {}
    folder = ProgressFolder(table)
    folder.fold(beat(100, NOW, 0.1, checkpoint_at=NOW - 30))
    forwarded = folder.to_forward(JOB)
    assert forwarded is not None
    assert table[JOB.encode()] is forwarded.raw
    assert forwarded.raw == encode(forwarded.record)
    assert forwarded.record.forwarded_at == NOW


def test_a_new_owner_folds_on_from_the_last_forwarded_record() -> None:
    table: dict[bytes, bytes] = {}
    first = ProgressFolder(table)
    first.fold(beat(100, NOW, 0.1))
    first.forward_changed({JOB: None})
    second = ProgressFolder(table)  # after a rebalance: nothing in memory
    assert second.fold(beat(100, NOW, 0.1)) is None  # a redelivery
    assert second.fold(beat(200, NOW + 30, 0.2)) == JOB


def test_a_record_the_earlier_codec_wrote_as_a_json_document_is_read_on_recovery() -> None:
    written = JobProgress(job=JOB, step=300, progress=0.3, first_seen_at=NOW, updated_at=NOW)
    document = json.dumps(written.model_dump(mode="json"), separators=(",", ":")).encode()
    folder = ProgressFolder({JOB.encode(): document})
    assert folder.fold(beat(300, NOW, 0.3)) is None  # nothing newer than the record
    assert folder.fold(beat(400, NOW + 10, 0.4)) == JOB
    assert folder.latest[JOB].first_seen_at == NOW


def test_a_deleted_record_read_back_as_empty_bytes_is_no_record() -> None:
    folder = ProgressFolder({JOB.encode(): b""})  # Tansu's tombstone, after recovery
    assert folder.fold(beat(100, NOW, 0.1)) == JOB
    assert folder.latest[JOB].first_seen_at == NOW


def test_after_a_rebalance_a_worker_folds_on_from_the_table_not_its_older_copy() -> None:
    table: dict[bytes, bytes] = {}
    mine = ProgressFolder(table)
    mine.fold(beat(100, NOW, 0.10))
    mine.forward_changed({JOB: None})
    # The partition moved to another worker, which folded a checkpoint, and back:
    # the table now holds the other worker's record (recovered from the changelog).
    other = ProgressFolder(table)
    other.fold(beat(200, NOW + 20, 0.20, checkpoint_at=NOW + 15))
    other.forward_changed({JOB: None})
    mine.forget()
    # A redelivered beat the other worker had folded already is old news.
    assert mine.fold(beat(150, NOW + 10, 0.15)) is None
    assert mine.forward_changed({JOB: None}) == []
    assert stored(table).last_checkpoint_at == NOW + 15


def test_a_job_forgotten_between_its_fold_and_its_forward_is_not_forwarded() -> None:
    folder = ProgressFolder({})
    folder.fold(beat(100, NOW, 0.1))
    folder.forget()  # a rebalance while the batch was being forwarded
    assert folder.to_forward(JOB) is None


beats = st.lists(
    st.tuples(
        st.integers(0, 40),  # seconds since the previous beat (0: a duplicate time)
        st.integers(0, 500),  # steps since the previous beat
        st.integers(0, 3),  # hundredths of progress since the previous beat
        st.booleans(),  # carries a new checkpoint
    ),
    min_size=1,
    max_size=40,
)


@given(beats=beats, cuts=st.lists(st.integers(1, 8), min_size=1, max_size=20))
def test_whatever_the_batches_each_forwarded_record_is_the_fold_of_every_beat_so_far(
    beats: list[tuple[int, int, int, bool]], cuts: list[int]
) -> None:
    table: dict[bytes, bytes] = {}
    folder = ProgressFolder(table)
    reference: JobProgress | None = None
    at, step, hundredths = NOW, 0, 0
    batch_ends, end = set(), 0
    for size in cuts:
        end += size
        batch_ends.add(end)
    changed: dict[str, None] = {}
    for i, (dt, dstep, dprogress, checkpoint) in enumerate(beats, start=1):
        at, step, hundredths = at + dt, step + dstep, min(100, hundredths + dprogress)
        heartbeat = beat(step, at, hundredths / 100, checkpoint_at=at if checkpoint else None)
        reference = fold(reference, heartbeat, at, 300.0) or reference
        if folder.fold(heartbeat, at) is not None:
            changed[JOB] = None
        if i in batch_ends or i == len(beats):
            for forwarded in folder.forward_changed(changed):
                record = forwarded.record
                assert reference is not None
                assert record == reference.model_copy(update={"forwarded_at": reference.updated_at})
                assert stored(table) == record
            changed = {}


async def test_the_worker_forgets_its_folds_when_its_partitions_are_revoked() -> None:
    app = build_app(
        WorkerOptions(app_kwargs={"id": "forget", "broker": "kafka://127.0.0.1:9"}),
        ControllerConfig(),
    )
    folder = app.gpuyield_progress_folder
    folder.fold(beat(100, NOW, 0.1))
    await app.on_partitions_revoked.send(set())
    assert folder.latest == {}


def test_the_worker_forwards_progress_by_its_configured_rule() -> None:
    config = ControllerConfig(progress_forward_delta=0.02, progress_forward_silence_s=45)
    app = build_app(
        WorkerOptions(app_kwargs={"id": "rule", "broker": "kafka://127.0.0.1:9"}), config
    )
    assert app.gpuyield_progress_folder.rule == ForwardRule(0.02, 45)


def forwarded_jobs(folder: ProgressFolder, jobs: list[str]) -> list[Forwarded]:
    for i, job in enumerate(jobs):
        folder.fold(beat(100 + i, NOW, 0.2, job=job))
    return folder.forward_changed(jobs)


def test_the_summaries_of_a_batch_of_beats_go_to_the_decider_as_one_message() -> None:
    table: dict[bytes, bytes] = {}
    jobs = ["research/a", "research/b", "research/c"]
    forwarded = forwarded_jobs(ProgressFolder(table), jobs)
    [batch] = forward_batches(forwarded)
    assert batch.jobs == tuple(jobs)
    message = decode(JobProgressBatch, batch.raw)
    assert message.summaries == tuple(stored(table, job) for job in jobs)
    assert batch.raw == encode(message)  # the summaries' own bytes, in the batch's envelope


@given(st.integers(min_value=0, max_value=40), st.integers(min_value=1, max_value=12))
def test_summaries_beyond_what_one_message_holds_go_in_more_messages_in_order(
    count: int, most: int
) -> None:
    jobs = [f"research/job-{i:02d}" for i in range(count)]
    forwarded = forwarded_jobs(ProgressFolder({}), jobs)
    batches = forward_batches(forwarded, most)
    assert all(0 < len(b.jobs) <= most for b in batches)
    assert [job for b in batches for job in b.jobs] == jobs
    read = [decode(JobProgressBatch, b.raw) for b in batches]
    assert [s for m in read for s in m.summaries] == [f.record for f in forwarded]
    assert len(batches) == -(-count // most)


def test_a_batch_must_hold_at_least_one_summary() -> None:
    with pytest.raises(ValueError, match="at least one"):
        forward_batches([], 0)
