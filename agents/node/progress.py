"""What the heartbeats say about each job, folded small, with a way to wait for news.

The node agent learns that a trainer saved its emergency checkpoint from the
trainer's heartbeats (the trainer SDK publishes one right after the save,
with ``last_checkpoint_step`` and ``last_checkpoint_at``), so it keeps, per
job, the newest checkpoint any rank reported and the newest heartbeat. That is
a few numbers per job, whatever the heartbeat rate. Heartbeats may arrive out
of order or twice (several ranks, a re-read of the topic after a restart):
the fold keeps maxima, so the order does not matter.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gpuyield.schemas.messages import Heartbeat


@dataclass(frozen=True, slots=True)
class SeenProgress:
    """A job's progress as far as its heartbeats tell."""

    step: int  # the newest heartbeat's step
    sent_at: float  # when the newest heartbeat was sent
    last_checkpoint_step: int | None
    last_checkpoint_at: float | None

    def fold(self, beat: Heartbeat) -> SeenProgress:
        newer = beat.sent_at >= self.sent_at
        step, sent_at = (beat.step, beat.sent_at) if newer else (self.step, self.sent_at)
        ckpt_step, ckpt_at = self.last_checkpoint_step, self.last_checkpoint_at
        if beat.last_checkpoint_step is not None and (
            ckpt_step is None
            or beat.last_checkpoint_step > ckpt_step
            or (
                beat.last_checkpoint_step == ckpt_step
                and (beat.last_checkpoint_at or 0) > (ckpt_at or 0)
            )
        ):
            ckpt_step, ckpt_at = beat.last_checkpoint_step, beat.last_checkpoint_at
        return SeenProgress(step, sent_at, ckpt_step, ckpt_at)

    @classmethod
    def first(cls, beat: Heartbeat) -> SeenProgress:
        return cls(beat.step, beat.sent_at, beat.last_checkpoint_step, beat.last_checkpoint_at)


class ProgressBoard:
    """Per-job progress from the heartbeat feed; waiters wake when their job reports.

    Single event loop, no locks: ``record`` is called by the feed's task and
    ``wait_for_news`` by the yields waiting on a job.
    """

    def __init__(self, *, forget_after_s: float = 24 * 3600, prune_every: int = 10_000) -> None:
        self._jobs: dict[str, SeenProgress] = {}
        self._news: dict[str, asyncio.Event] = {}
        self._forget_after_s = forget_after_s
        self._prune_every = prune_every
        self._recorded = 0

    def record(self, beat: Heartbeat) -> None:
        seen = self._jobs.get(beat.job)
        self._jobs[beat.job] = SeenProgress.first(beat) if seen is None else seen.fold(beat)
        self._recorded += 1
        if self._recorded % self._prune_every == 0:
            self._forget_before(beat.sent_at - self._forget_after_s)
        event = self._news.pop(beat.job, None)
        if event is not None:
            event.set()

    def _forget_before(self, cutoff: float) -> None:
        """Drop jobs silent since ``cutoff`` (finished or gone): the board stays as big as the
        set of live jobs. Time is the heartbeats' own, so the board needs no clock."""
        for job in [job for job, seen in self._jobs.items() if seen.sent_at < cutoff]:
            if job not in self._news:
                del self._jobs[job]

    def get(self, job: str) -> SeenProgress | None:
        return self._jobs.get(job)

    async def wait_for_news(self, job: str) -> None:
        """Return at the job's next heartbeat (the caller bounds the wait)."""
        event = self._news.get(job)
        if event is None:
            event = self._news[job] = asyncio.Event()
        await event.wait()

    def __len__(self) -> int:
        return len(self._jobs)
