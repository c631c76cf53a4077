"""One node agent per simulated node, in the demo's process: ``run_node_agent`` as deployed.

The agents are the production composition (``gpuyield.agents.node.service``)
with the local signaller (pods are PIDs in ``LocalPodRegistry``) and the
local suspender (job states in ``<prefix>:local-jobs``, which the simulated
Volcano follows). They run as tasks here rather than as four
``gpuyield node-agent`` processes: the same code, without four more Python
interpreters on a small machine; the worker, whose Faust runtime wants a
process of its own, is the one subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis

from gpuyield.agents.node.executor import ExecutorSettings
from gpuyield.agents.node.local_signaller import LocalPodRegistry, LocalProcessSignaller
from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.service import AgentTopics, NodeAgentConfig, run_node_agent
from gpuyield.agents.node.suspenders import LocalJobSuspender
from gpuyield.streams.settings import Settings

log = logging.getLogger(__name__)


class PodGpus:
    """GPUs per pod from the simulated cluster: what the acks' lost-work figure multiplies."""

    def __init__(self, lookup: Callable[[str, str], int]) -> None:
        self._lookup = lookup

    async def gpus(self, pods: Sequence[PodRef]) -> int:
        return sum(self._lookup(p.namespace, p.name) for p in pods)


class NodeAgents:
    """Runs the agents until ``stop``; ``ready`` once every one consumes commands."""

    def __init__(
        self,
        nodes: Sequence[str],
        *,
        kafka: dict[str, Any],
        redis: Redis,
        redis_prefix: str,
        gpus: PodGpus,
        settings: Settings,
    ) -> None:
        self._nodes = list(nodes)
        self._kafka = kafka
        self._redis = redis
        self._prefix = redis_prefix
        self._gpus = gpus
        self._settings = settings  # the demo's deployment, the worker's too (timing.demo_settings)
        self._stop = asyncio.Event()
        self._ready: dict[str, asyncio.Event] = {n: asyncio.Event() for n in self._nodes}
        self.tasks: list[asyncio.Task[Any]] = []

    def start(self) -> None:
        registry = LocalPodRegistry(self._redis, prefix=self._prefix)
        for node in self._nodes:
            config = NodeAgentConfig(
                node=node,
                kafka=self._kafka,
                topics=AgentTopics(),
                session_timeout_s=self._settings.kafka_session_timeout_s,
                producer_max_batch_size=self._settings.kafka_producer_max_batch_size,
                redis_prefix=self._prefix,
                executor=ExecutorSettings.from_knobs(self._settings.node_agent),
            )
            self.tasks.append(
                asyncio.create_task(
                    run_node_agent(
                        config,
                        redis=self._redis,
                        signaller=LocalProcessSignaller(registry),
                        suspender=LocalJobSuspender(self._redis, prefix=self._prefix),
                        gpus=self._gpus,
                        stop=self._stop,
                        ready=self._ready[node],
                    ),
                    name=f"node-agent-{node}",
                )
            )

    @property
    def ready(self) -> bool:
        return all(e.is_set() for e in self._ready.values())

    def failed(self) -> BaseException | None:
        """The first agent that stopped on its own, with what stopped it."""
        for task in self.tasks:
            if task.done() and not task.cancelled() and not self._stop.is_set():
                return task.exception() or RuntimeError(f"{task.get_name()} stopped")
        return None

    async def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        if not self.tasks:
            return
        done, pending = await asyncio.wait(self.tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.warning("%s ended with %r", task.get_name(), task.exception())
