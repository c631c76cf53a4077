"""The worker's two fault watchers, as faust tasks: the broker guard and the stall reporter.

``gpuyield worker`` adds them to its app (issue 11): the guard exits the
process with status 75 when the broker lost its state
(``streams/broker_state.py``); the reporter publishes each agent's health,
stalled or not, beside the live view (``streams/agent_stalls.py``). Kept out
of ``app.py``, which wires only the agents, so tests that build the app
without a broker to guard do not run them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import faust

from gpuyield.streams.agent_stalls import Publish, StallReporter, StallWatch, agent_topics
from gpuyield.streams.broker_state import BrokerState, guard_broker
from gpuyield.streams.consumer_lag import GroupPositions
from gpuyield.streams.settings import Settings


def add_fault_tasks(
    app: faust.App,
    settings: Settings,
    kafka: Mapping[str, Any],
    baseline: BrokerState,
    publish_agents: Publish,
    *,
    broker_alive: Callable[[], bool] | None = None,
) -> None:
    """Run the broker guard and the stall reporter for as long as ``app`` runs."""

    async def guard() -> None:
        await guard_broker(
            "gpuyield worker",
            kafka,
            baseline,
            interval_s=settings.broker_check_s,
            alive=broker_alive,
        )

    reporter = StallReporter(
        GroupPositions(kafka, settings.app_id),
        StallWatch(settings.agent_stall_s),
        agent_topics(settings.topic_prefix),
        publish_agents,
    )
    every_s = min(5.0, max(1.0, settings.agent_stall_s / 4))

    async def report_stalls() -> None:  # from the start, then every few seconds
        try:
            while True:
                await reporter.check(time.time())
                await asyncio.sleep(every_s)
        finally:
            await reporter.positions.close()

    app.task(guard)
    app.task(report_stalls)
