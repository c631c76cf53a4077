"""The progress agent's fold, outside Faust: a batch of heartbeats to the summaries worth sending.

Beats are taken in batches: a job that beat several times in one batch is
forwarded (and its table record written) at most once, which is what lets
one worker keep up with thousands of beats a second. Only forwarded records
are written to the table, so the changelog carries a few messages per job
per minute, not every heartbeat; a new owner after a rebalance starts from
the last forwarded record, at most a minute or a percent behind.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from gpuyield.agents.controller import progress as progress_rules
from gpuyield.schemas.messages import Heartbeat, JobProgress


class ProgressFolder:
    """This worker's newest fold per job (not persisted), over the progress table."""

    def __init__(self, table: MutableMapping[bytes, Any], max_skew_s: float = 300.0) -> None:
        self.table = table
        self.max_skew_s = max_skew_s
        self.latest: dict[str, JobProgress] = {}

    def _stored(self, job: str) -> JobProgress | None:
        raw = self.table.get(job.encode())
        return None if raw is None else JobProgress.model_validate(raw)

    def fold(self, beat: Heartbeat, received_at: float | None = None) -> str | None:
        """Fold one beat, read at ``received_at`` (the worker's clock), into its job's record.

        Returns the job if its record changed.
        """
        base = self.latest.get(beat.job) or self._stored(beat.job)
        folded = progress_rules.fold(base, beat, received_at, self.max_skew_s)
        if folded is None:
            return None
        self.latest[beat.job] = folded
        return beat.job

    def to_forward(self, job: str) -> JobProgress | None:
        """The record to persist and forward, if the decider's copy is stale enough."""
        folded = self.latest[job]
        if not progress_rules.should_forward(self._stored(job), folded):
            return None
        forwarded = folded.model_copy(update={"forwarded_at": folded.updated_at})
        self.table[job.encode()] = forwarded.model_dump(mode="json")
        return forwarded

    def forward_changed(self, jobs: dict[str, None]) -> list[JobProgress]:
        """After a batch: each changed job's record, where it is worth forwarding."""
        out = []
        for job in jobs:
            forwarded = self.to_forward(job)
            if forwarded is not None:
                out.append(forwarded)
        return out
