"""Is each worker agent keeping up? Stalls measured on the offsets, not on a timer.

An agent is stalled when it has input waiting (its group's committed offset
is below the partition's end) and that committed offset has not moved for
longer than ``GPUYIELD_AGENT_STALL_S``. A timer on the agent's own activity
would not do: a crash-looping agent is busy, and a quiet cluster is idle, not
stalled (issue 11 saw a progress agent that folded nothing for good while
``gpuyield status`` looked fresh).

``StallWatch`` is pure: it is given the positions (``consumer_lag``) and the
time, and remembers since when each partition's committed offset has stood
still with input waiting. The worker runs it on a timer and stores the
report next to the live view, where ``gpuyield status`` shows it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from aiokafka.errors import KafkaError
from pydantic import BaseModel, ConfigDict

from gpuyield.streams.consumer_lag import GroupPositions, Partition, Position
from gpuyield.streams.topics import HEARTBEATS, JOB_PROGRESS, KUBE_EVENTS, TICKS, YIELD_ACKS

log = logging.getLogger(__name__)

WORKER_AGENTS: Mapping[str, tuple[str, ...]] = {
    "progress": (HEARTBEATS,),
    "decider": (KUBE_EVENTS, JOB_PROGRESS, YIELD_ACKS, TICKS),
}
"""The worker's agents and the topics each reads (``agents/worker/app.py``)."""


def agent_topics(prefix: str = "") -> dict[str, tuple[str, ...]]:
    """``WORKER_AGENTS`` with the deployment's topic prefix."""
    return {agent: tuple(prefix + t for t in topics) for agent, topics in WORKER_AGENTS.items()}


class AgentHealth(BaseModel):
    """One agent's state in the live view (``gpuyield status``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str
    state: Literal["ok", "stalled"]
    waiting: int
    """Messages on its topics that it has not processed yet."""
    stalled_for_s: float | None
    """How long the oldest stalled partition's committed offset has stood still."""
    stalled_partitions: tuple[str, ...]
    """``topic[partition]@offset`` of each stalled partition."""
    checked_at: float


@dataclass
class _Still:
    committed: int | None
    since: float


class StallWatch:
    """Since when each partition's committed offset has stood still with input waiting."""

    def __init__(self, stall_s: float) -> None:
        if stall_s <= 0:
            raise ValueError(f"a stall bound must be positive, got {stall_s}")
        self.stall_s = stall_s
        self._still: dict[Partition, _Still] = {}

    def observe(self, now: float, positions: Mapping[Partition, Position]) -> None:
        """Take one reading; a partition with nothing waiting, or that moved, starts afresh."""
        for key, position in positions.items():
            seen = self._still.get(key)
            if position.waiting == 0 or seen is None or seen.committed != position.committed:
                self._still[key] = _Still(position.committed, now)
        for key in set(self._still) - set(positions):  # a topic gone, partitions reassigned
            del self._still[key]

    def report(
        self,
        now: float,
        positions: Mapping[Partition, Position],
        agents: Mapping[str, Sequence[str]],
    ) -> list[AgentHealth]:
        """Each agent's health after ``observe(now, positions)``."""
        out = []
        for agent, topics in agents.items():
            waiting = 0
            stalled: list[tuple[float, str]] = []
            for key, position in sorted(positions.items()):
                if key[0] not in topics:
                    continue
                waiting += position.waiting
                still = self._still.get(key)
                if position.waiting and still is not None and now - still.since > self.stall_s:
                    offset = position.committed if position.committed is not None else 0
                    stalled.append((now - still.since, f"{key[0]}[{key[1]}]@{offset}"))
            out.append(
                AgentHealth(
                    agent=agent,
                    state="stalled" if stalled else "ok",
                    waiting=waiting,
                    stalled_for_s=round(max(s for s, _ in stalled), 1) if stalled else None,
                    stalled_partitions=tuple(name for _, name in stalled),
                    checked_at=now,
                )
            )
        return out


Publish = Callable[[list[AgentHealth], float], Awaitable[None]]


class StallReporter:
    """Reads the group's positions, updates the watch and publishes the report (a worker timer)."""

    def __init__(
        self,
        positions: GroupPositions,
        watch: StallWatch,
        agents: Mapping[str, Sequence[str]],
        publish: Publish,
    ) -> None:
        self.positions = positions
        self.watch = watch
        self.agents = agents
        self.publish = publish
        self._topics = [t for topics in agents.values() for t in topics]

    async def check(self, now: float) -> list[AgentHealth] | None:
        """One round; None when the broker could not be read (the next round tries again)."""
        try:
            current = await self.positions.read(self._topics)
        except (KafkaError, OSError) as exc:
            log.warning("could not read the agents' offsets: %s", exc)
            return None
        self.watch.observe(now, current)
        report = self.watch.report(now, current, self.agents)
        for health in report:
            if health.state == "stalled":
                log.error(
                    "agent %s stalled: %d message(s) waiting, no progress for %.0f s on %s",
                    health.agent,
                    health.waiting,
                    health.stalled_for_s or 0.0,
                    ", ".join(health.stalled_partitions),
                )
        await self.publish(report, now)
        return report
