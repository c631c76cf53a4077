"""The progress agent's fold, outside Faust: a batch of heartbeats to the summaries worth sending.

Beats are taken in batches: a job that beat several times in one batch is
forwarded (and its table record written) at most once, which is what lets
one worker keep up with thousands of beats a second. Only forwarded records
are written to the table, so the changelog carries a few messages per job
per few minutes, not every heartbeat; a new owner after a rebalance starts
from the last forwarded record, at most a percent or the forward rule's
silence behind (``progress.ForwardRule``).

A forwarded record is serialised once: the table keeps its wire bytes, which
are both the changelog record and the summary forwarded to the decider (the
same compact JSON the table held as a document before). The summaries of one
batch of beats go to the decider as one ``JobProgressBatch`` message
(``forward_batches``): the decider takes each message as a step, with a
journal entry and changelog writes of its own, and one message per summary
made those most of its work per heartbeat. The folder remembers
which bytes it wrote, so reading its own record back parses nothing; bytes it
did not write (recovered from the changelog after a rebalance) are parsed.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass

from gpuyield.agents.controller import progress as progress_rules
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import PROGRESS_BATCH_MAX, Heartbeat, JobProgress


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A record to send to the decider, with its wire bytes (also the table's value)."""

    record: JobProgress
    raw: bytes


class ProgressFolder:
    """This worker's newest fold per job (not persisted), over the progress table.

    The table maps a job's key to the wire bytes of its last forwarded record
    (``None`` or empty bytes: none; a deletion reads back empty from Tansu).
    """

    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        max_skew_s: float = 300.0,
        rule: progress_rules.ForwardRule = progress_rules.DEFAULT_FORWARD,
    ) -> None:
        self.table = table
        self.max_skew_s = max_skew_s
        self.rule = rule
        self.latest: dict[str, JobProgress] = {}
        self._written: dict[str, Forwarded] = {}
        """Per job, what this folder last wrote to the table: read back without parsing."""

    def forget(self) -> None:
        """Drop what is held in memory: after a rebalance the table is the truth.

        Partitions may have moved away and back, with another worker's records
        recovered in between; folding on from this worker's older copy would
        forward a record behind the one the decider already has.
        """
        self.latest.clear()
        self._written.clear()

    def _stored(self, job: str) -> JobProgress | None:
        raw = self.table.get(job.encode())
        if not raw:
            return None
        mine = self._written.get(job)
        if mine is not None and mine.raw is raw:
            return mine.record
        return JobProgress.model_validate_json(raw)

    def fold(
        self, beat: Heartbeat, received_at: float | None = None, queued_at: float | None = None
    ) -> str | None:
        """Fold one beat, read at ``received_at`` (the worker's clock), into its job's record.

        ``queued_at`` is its Kafka record's timestamp (``progress.in_worker_time``).
        Returns the job if its record changed.
        """
        base = self.latest.get(beat.job) or self._stored(beat.job)
        folded = progress_rules.fold(base, beat, received_at, self.max_skew_s, queued_at)
        if folded is None:
            return None
        self.latest[beat.job] = folded
        return beat.job

    def to_forward(self, job: str) -> Forwarded | None:
        """The record to persist and forward, if the decider's copy is stale enough."""
        folded = self.latest.get(job)
        if folded is None:  # forgotten in a rebalance since it was folded
            return None
        if not progress_rules.should_forward(self._stored(job), folded, self.rule):
            return None
        record = folded.model_copy(update={"forwarded_at": folded.updated_at})
        forwarded = Forwarded(record, encode(record))
        self.table[job.encode()] = forwarded.raw
        self._written[job] = forwarded
        return forwarded

    def forward_changed(self, jobs: Iterable[str]) -> list[Forwarded]:
        """After a batch: each changed job's record, persisted, where it is worth forwarding,
        in the order given."""
        out = []
        for job in jobs:
            forwarded = self.to_forward(job)
            if forwarded is not None:
                out.append(forwarded)
        return out


_BATCH_OPEN = b'{"v":1,"summaries":['
_BATCH_CLOSE = b"]}"


@dataclass(frozen=True, slots=True)
class ForwardBatch:
    """One message for the decider: the jobs whose summaries it carries, in order, and its
    wire bytes (a ``JobProgressBatch``)."""

    jobs: tuple[str, ...]
    raw: bytes


def forward_batches(
    forwarded: Sequence[Forwarded], most: int = PROGRESS_BATCH_MAX
) -> list[ForwardBatch]:
    """``forwarded``'s summaries as ``JobProgressBatch`` messages of at most ``most`` each, in
    order.

    Each summary's bytes are the ones the table holds, set inside the batch's
    envelope as they are: what encoding the batch model gives, byte for byte
    (the same compact JSON, fields in model order), without serialising any
    summary again.
    """
    if most < 1:
        raise ValueError(f"a batch holds at least one summary, got most={most}")
    out = []
    for start in range(0, len(forwarded), most):
        chunk = forwarded[start : start + most]
        raw = _BATCH_OPEN + b",".join(f.raw for f in chunk) + _BATCH_CLOSE
        out.append(ForwardBatch(tuple(f.record.job for f in chunk), raw))
    return out
