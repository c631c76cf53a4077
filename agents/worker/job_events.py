"""The decider's Kubernetes Events, written by the worker after it published an outcome.

The Events are built by ``agents/controller/job_events.py`` from the decisions
that acted; the Volcano Jobs' uids come from the decider's own records (the
watch put them there), so ``kubectl describe vcjob`` finds them without one
more API read. Writing is best effort, in a thread (the client is synchronous).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuyield.agents.controller.job_events import decision_events
from gpuyield.agents.controller.records import VJOB
from gpuyield.schemas.config import SPARED_EVENTS
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


async def write_events(
    writer: EventWriter,
    decisions: Sequence[Decision],
    records: Mapping[str, Any],
    instance: str,
    spared_limit: int = SPARED_EVENTS,
) -> list[str]:
    """Write the Events of ``decisions``; the failures, logged, never raised."""
    events = decision_events(decisions, uid_lookup(records), instance, spared_limit=spared_limit)
    if not events:
        return []
    try:
        return await asyncio.to_thread(writer.create, events)
    except Exception as exc:  # a bug in the client must not stop the decider
        log.exception("could not write the Kubernetes Events")
        return [f"{type(exc).__name__}: {exc}"]
