"""Shared test configuration.

Hypothesis profiles, chosen by the ``HYPOTHESIS_PROFILE`` environment variable:

- ``ci`` (the default): derandomized, so every run tries the same examples and
  a red build can be replayed; no deadline (CI machines are slow and noisy).
- ``dev``: random examples, more of them, to look for new counterexamples
  locally: ``HYPOTHESIS_PROFILE=dev pytest tests/planner``.

Live services (``kafka_bootstrap``, ``redis_url``, ...): see the section below.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from gpuyield.streams.topics import TopicSpec

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --- Live services: one real Kafka-protocol broker and one Redis per test session ---------
#
# ``kafka_bootstrap`` (session): ``host:port`` of a Tansu broker started on first use
#   and stopped at the end of the session; GPUYIELD_TEST_KAFKA_BOOTSTRAP points the
#   tests at another broker instead (a real Kafka, say).
# ``topic_prefix`` (per test): a unique prefix; use topic names ``topic_prefix + name``
#   (or ``registry(prefix=topic_prefix)``) so tests never see each other's messages.
# ``fresh_topics`` (per test, async): the controller's topics under ``topic_prefix``,
#   created on the broker, as a mapping from the canonical name (``gpuyield.heartbeats``)
#   to the TopicSpec. Create topics before any client touches them: Tansu creates an
#   unknown topic on a metadata request, with its default layout, not the registry's.
# ``redis_url`` (per test): ``redis://...`` of the machine's Redis at 127.0.0.1:6379 if
#   it answers PING, else of an embedded Valkey (GPUYIELD_TEST_REDIS_URL overrides).
#   That Redis is shared with other test runs, so never FLUSHDB: write keys under
#   ``redis_prefix``; the keys under it are deleted after the test.
#
# The streaming imports are inside the fixtures, so a suite that uses none of them
# (the planner's, say) neither pays for nor depends on the streaming stack.


MACHINE_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from gpuyield.streams.embedded import EmbeddedBroker

    external = os.environ.get("GPUYIELD_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker.bootstrap


@pytest.fixture
def topic_prefix() -> str:
    return f"t{secrets.token_hex(6)}."


@pytest.fixture
async def fresh_topics(kafka_bootstrap: str, topic_prefix: str) -> dict[str, TopicSpec]:
    from gpuyield.streams.topics import ensure_topics, registry

    specs = registry(prefix=topic_prefix)  # the production layout (8 partitions where keyed)
    await ensure_topics({"bootstrap_servers": kafka_bootstrap}, specs, replication_factor=1)
    return {spec.name.removeprefix(topic_prefix): spec for spec in specs}


def _answers_ping(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def _redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from gpuyield.streams.embedded import EmbeddedRedis

    configured = os.environ.get("GPUYIELD_TEST_REDIS_URL")
    if configured:
        yield configured
    elif _answers_ping(MACHINE_REDIS):
        yield MACHINE_REDIS
    else:
        with EmbeddedRedis(tmp_path_factory.mktemp("valkey")) as server:
            yield server.url


@pytest.fixture
def redis_prefix() -> str:
    return f"gpuyield-test:{secrets.token_hex(6)}:"


@pytest.fixture
def redis_url(_redis_server: str, redis_prefix: str) -> Iterator[str]:
    import redis

    yield _redis_server
    client = redis.Redis.from_url(_redis_server)
    with contextlib.closing(client):
        keys = list(client.scan_iter(match=f"{redis_prefix}*", count=1000))
        if keys:
            client.delete(*keys)
