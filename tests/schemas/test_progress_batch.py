"""``gpuyield.job-progress``'s message: a batch of summaries; an older bare summary reads as one."""

from __future__ import annotations

import json

import pytest

from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import PROGRESS_BATCH_MAX, JobProgress, JobProgressBatch

NOW = 1_790_000_000.0


def summary(job: str, step: int = 1200) -> JobProgress:
    return JobProgress(
        job=job,
        step=step,
        progress=0.4,
        last_checkpoint_step=1000,
        last_checkpoint_at=NOW - 60,
        first_seen_at=NOW - 3600,
        updated_at=NOW,
        forwarded_at=NOW,
    )


def refused(raw: bytes) -> str:
    with pytest.raises(MessageError) as caught:
        decode(JobProgressBatch, raw)
    return str(caught.value)


def test_a_batch_round_trips_byte_for_byte() -> None:
    batch = JobProgressBatch(summaries=(summary("research/a"), summary("research/b")))
    assert decode(JobProgressBatch, encode(batch)) == batch
    assert encode(decode(JobProgressBatch, encode(batch))) == encode(batch)


def test_a_bare_summary_written_before_batches_reads_as_a_batch_of_that_one() -> None:
    one = summary("research/sweep-17")
    assert decode(JobProgressBatch, encode(one)).summaries == (one,)


def test_a_batch_without_summaries_is_refused_naming_the_field() -> None:
    assert "summaries" in refused(b'{"v":1,"summaries":[]}')


def test_a_bad_summary_inside_a_batch_is_refused_naming_its_place_and_field() -> None:
    doc = json.loads(encode(JobProgressBatch(summaries=(summary("research/a"),))))
    doc["summaries"][0]["step"] = "1200"
    assert "summaries[0].step" in refused(json.dumps(doc).encode())


def test_a_batch_of_an_unknown_version_is_refused_saying_so() -> None:
    assert "unknown format version 2" in refused(b'{"v":2,"summaries":[]}')


def test_a_batch_larger_than_a_message_may_carry_is_refused() -> None:
    doc = {"v": 1, "summaries": [summary(f"research/j{i}").model_dump() for i in range(257)]}
    assert PROGRESS_BATCH_MAX == 256
    assert "summaries" in refused(json.dumps(doc).encode())


def test_the_largest_batch_fits_kafka_s_default_message_limit() -> None:
    widest = JobProgress(
        job="\U0001f680" * 512,  # the longest name, of 4-byte characters
        step=2**53 - 1,
        progress=0.123456789012345,
        step_rate=123456.78901234567,
        last_checkpoint_step=2**53 - 1,
        last_checkpoint_at=4_102_444_799.123456,
        checkpoint_interval_s=315_359_999.123456,
        first_seen_at=4_102_444_799.123456,
        updated_at=4_102_444_799.123456,
        forwarded_at=4_102_444_799.123456,
        clock_offset_s=-123456789.12345678,
    )
    batch = JobProgressBatch(summaries=(widest,) * PROGRESS_BATCH_MAX)
    assert len(encode(batch)) < 1_048_576
