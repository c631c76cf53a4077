"""Fixtures: a fake API server per test, and a watcher wired to it.

``kube_api``: a started ``FakeKubeApi`` (bookmarks only on demand).
``published``: what the watcher published, in order.
``sleeps``: the watcher's injected sleep; records every backoff delay and,
  while held, keeps the workers waiting (so a test can change the cluster
  while the watch is down).
``start_watcher``: starts a ``KubeWatcher`` on the fake with fast settings, no
  jitter and a fixed clock, and waits until its first lists are published.
  Every watcher is stopped after the test, and no watch thread may outlive it.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fakes.kube_api import FakeKubeApi
from fakes.waiting import eventually

from gpuyield.streams.kube_watch import KubeWatcher

from .harness import FAST, OBSERVED_AT, NoJitter, Published, Sleeps, StartWatcher


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        yield api


@pytest.fixture
def published() -> Published:
    return Published()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def start_watcher(
    kube_api: FakeKubeApi, published: Published, sleeps: Sleeps
) -> AsyncIterator[StartWatcher]:
    watchers: list[KubeWatcher] = []

    async def start(**overrides: Any) -> KubeWatcher:
        options: dict[str, Any] = {
            "configuration": kube_api.configuration(),
            "publish": published.publish,
            "settings": FAST,
            "clock": lambda: OBSERVED_AT,
            "sleep": sleeps,
            "rng": NoJitter(),
            **overrides,
        }
        watcher = KubeWatcher(**options)
        watchers.append(watcher)
        await watcher.start()
        await eventually(lambda: watcher.synced, "the first list of every resource")
        return watcher

    yield start
    sleeps.release()
    for watcher in watchers:
        await watcher.stop()


@pytest.fixture(autouse=True)
def _no_watch_thread_outlives_its_test() -> Iterator[None]:
    yield
    leaked = [t.name for t in threading.enumerate() if t.name.startswith("kube-watch-")]
    assert not leaked, f"watch threads still running: {leaked}"
