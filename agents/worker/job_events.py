"""The decider's Kubernetes Events, written by the worker after it published an outcome.

The Events are built by ``agents/controller/job_events.py`` from the decisions
that acted; the Volcano Jobs' uids come from the decider's own records (the
watch put them there), so ``kubectl describe vcjob`` finds them without one
more API read. Writing is best effort, in a thread (the client is synchronous).

The decider used to await the writing before its next input: one API round
trip per Event, about 21 per decision, so a slow API server slowed every
decision after it. ``EventWriting`` builds a decision's Events at once (from
the records as the decision left them) and writes them in a task of its own,
in order; the decider waits only when ``depth`` decisions' Events are still
unwritten (the queue is bounded: a stalled API server holds the decider
rather than the worker's memory). On a graceful stop it writes what is
queued for up to ``drain_s`` seconds, and logs what it could not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mode

from gpuyield.agents.controller.job_events import decision_events
from gpuyield.agents.controller.records import VJOB
from gpuyield.schemas.config import SPARED_EVENTS
from gpuyield.schemas.kube_objects import Object
from gpuyield.schemas.messages import Decision
from gpuyield.streams.kube_job_events import EventWriter

log = logging.getLogger(__name__)


def uid_lookup(records: Mapping[str, Any]) -> Callable[[str], str | None]:
    """``job -> uid`` from the decider's Volcano Job records (None when unknown)."""

    def uid_of(job: str) -> str | None:
        record = records.get(VJOB + job)
        uid = record.get("uid") if isinstance(record, dict) else None
        return uid if isinstance(uid, str) else None

    return uid_of


EVENT_BATCHES = 64
"""Decisions whose Events may wait unwritten before the decider waits for them."""


class EventWriting(mode.Service):
    """Writes the decisions' Events behind the decider, in order (module docstring)."""

    def __init__(
        self,
        writer: EventWriter,
        instance: str,
        spared_limit: int = SPARED_EVENTS,
        *,
        depth: int = EVENT_BATCHES,
        drain_s: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.writer = writer
        self.instance = instance
        self.spared_limit = spared_limit
        self.depth = depth
        self.drain_s = drain_s
        self.failed = 0
        """Events that could not be written (each logged by ``EventWriter.create``)."""
        self._queue: asyncio.Queue[list[Object]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def submit(self, decisions: Sequence[Decision], records: Mapping[str, Any]) -> None:
        """Queue the Events of ``decisions``, built now from ``records``.

        Before the service has started (or after it stopped), they are written at once.
        """
        events = decision_events(
            decisions, uid_lookup(records), self.instance, spared_limit=self.spared_limit
        )
        if not events:
            return
        if self._queue is None or self._task is None or self._task.done():
            await self._write(events)
            return
        await self._queue.put(events)

    @property
    def unwritten(self) -> int:
        """Decisions whose Events are queued, not yet written."""
        return 0 if self._queue is None else self._queue.qsize()

    async def on_start(self) -> None:
        self._queue = asyncio.Queue(maxsize=self.depth)
        self._task = asyncio.ensure_future(self._drain_forever(self._queue))

    async def on_stop(self) -> None:
        queue, task = self._queue, self._task
        self._queue = self._task = None
        if queue is None or task is None:
            return
        try:
            await asyncio.wait_for(queue.join(), self.drain_s)
        except TimeoutError:
            log.warning(
                "stopping with the Kubernetes Events of %d decisions not written", queue.qsize()
            )
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _drain_forever(self, queue: asyncio.Queue[list[Object]]) -> None:
        while True:
            events = await queue.get()
            try:
                await self._write(events)
            finally:
                queue.task_done()

    async def _write(self, events: list[Object]) -> None:
        try:
            self.failed += len(await asyncio.to_thread(self.writer.create, events))
        except Exception:  # a bug in the client must not stop the writing
            log.exception("could not write the Kubernetes Events")
            self.failed += len(events)
