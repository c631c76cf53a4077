"""What the watcher tests plug into a ``KubeWatcher``: a recording publish and sleep."""

from __future__ import annotations

import random
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpuyield.schemas.messages import KubeEvent, KubeEventType
from gpuyield.streams.kube_watch import Backoff, KubeWatcher, KubeWatchSettings

OBSERVED_AT = 1_764_000_000.0

FAST = KubeWatchSettings(
    page_size=500,
    watch_timeout_s=30,
    read_timeout_margin_s=5.0,
    connect_timeout_s=2.0,
    list_timeout_s=5.0,
    stop_timeout_s=5.0,
    backoff=Backoff(initial_s=0.5, max_s=8.0, multiplier=2.0, jitter=0.5),
)


class NoJitter(random.Random):
    """``random()`` is always 0: each backoff delay is exactly its nominal value."""

    def random(self) -> float:
        return 0.0


@dataclass
class Published:
    """The events a watcher published; ``fail_on`` makes publish raise once for a name."""

    events: list[KubeEvent] = field(default_factory=list)
    fail_on: set[str] = field(default_factory=set)

    async def publish(self, event: KubeEvent) -> None:
        if event.name in self.fail_on:
            self.fail_on.discard(event.name)
            raise RuntimeError(f"publish failed for {event.name}")
        self.events.append(event)

    def of(self, kind: str) -> list[tuple[str, str]]:
        """(type, name) of every event of ``kind`` (e.g. "Pod"), in order."""
        return [(e.type.value, e.name) for e in self.events if e.kind.value == kind]

    def has(self, type_: KubeEventType, name: str) -> bool:
        return any(e.type is type_ and e.name == name for e in self.events)


class Sleeps:
    """The workers' sleep: records delays; ``hold()`` keeps them asleep until ``release()``."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._open = threading.Event()
        self._open.set()

    def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self._open.wait(10)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()


StartWatcher = Callable[..., Awaitable[KubeWatcher]]
"""The ``start_watcher`` fixture: keyword overrides of ``KubeWatcher``'s arguments."""
