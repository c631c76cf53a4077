"""Workers for the end-to-end tests: real processes, the session's broker, a real Redis."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from live_worker import LiveWorker

from gpuyield.streams.topics import TopicSpec


@pytest.fixture
def worker_factory(
    kafka_bootstrap: str,
    redis_url: str,
    topic_prefix: str,
    fresh_topics: dict[str, TopicSpec],
    tmp_path: Path,
) -> Iterator[Callable[..., LiveWorker]]:
    """Start workers of one deployment (same topics, same consumer group); all stopped after."""
    app_id = f"gy-{secrets.token_hex(4)}"
    cluster_id = f"c-{secrets.token_hex(4)}"
    started: list[LiveWorker] = []

    def start(name: str = "worker", env: dict[str, str] | None = None) -> LiveWorker:
        worker = LiveWorker(
            kafka_bootstrap,
            redis_url,
            topic_prefix,
            app_id,
            cluster_id,
            tmp_path,
            name=name,
            env=env or {},
        ).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
