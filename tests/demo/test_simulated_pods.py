"""Pods without a process (``Runner.SIMULATED``): the drill's serving fleet and other tenants.

They run from placement until deleted, start nothing and register nothing
with the node agents (no yield is ever meant to reach them); a deletion ends
them as a process that exits on SIGTERM would, reaped on the next look.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gpuyield.agents.demo.children import Children
from gpuyield.agents.demo.cluster import PodExit
from gpuyield.agents.demo.drill import drill_scenario
from gpuyield.agents.demo.pods import PodLauncher
from gpuyield.agents.demo.scenario import JobPlan, Runner
from gpuyield.agents.node.local_signaller import LocalPodRegistry
from gpuyield.agents.node.pods import PodRef


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def serving() -> JobPlan:
    return next(j for j in drill_scenario().jobs if j.name == "serving")


def launcher(children: Children, registry: LocalPodRegistry, tmp_path: Path) -> PodLauncher:
    return PodLauncher(
        children,
        registry,
        workdir=tmp_path,
        bootstrap="127.0.0.1:9",  # never dialled: nothing here starts a trainer
        heartbeats_topic="gpuyield.heartbeats",
        train_tiny=None,
        seed=1,
    )


async def test_a_simulated_pod_starts_no_process_and_is_not_registered(
    redis: Redis, redis_prefix: str, tmp_path: Path
) -> None:
    children = Children()
    registry = LocalPodRegistry(redis, prefix=redis_prefix)
    pods = launcher(children, registry, tmp_path)
    job = serving()
    assert job.runner is Runner.SIMULATED
    await pods.launch(job, "serving-worker-3", 3)
    assert children.get(f"pod:{job.namespace}/serving-worker-3") is None
    assert await registry.pid(PodRef(job.namespace, "serving-worker-3")) is None
    assert pods.started[Runner.SIMULATED] == 1
    assert await pods.exits() == []  # it runs until deleted
    children.close()


async def test_a_deleted_simulated_pod_ends_once_as_if_its_process_exited_on_sigterm(
    redis: Redis, redis_prefix: str, tmp_path: Path
) -> None:
    children = Children()
    pods = launcher(children, LocalPodRegistry(redis, prefix=redis_prefix), tmp_path)
    job = serving()
    await pods.launch(job, "serving-worker-3", 3)
    await pods.launch(job, "serving-worker-4", 4)
    pods.terminate(job, "serving-worker-3")
    pods.kill(job, "serving-worker-3")  # already gone: nothing more to end
    assert await pods.exits() == [PodExit(job.key, 3, 0, completed=False)]
    assert await pods.exits() == []
    children.close()
