"""Yields for plain processes (the demo, tests): pods are PIDs in a Redis registry.

Outside Kubernetes there is no API that knows which process is which pod, so
whoever starts a trainer registers it: ``LocalPodRegistry.register("ns/pod",
pid)``. The registry is a Redis hash, ``<prefix>:local-pods`` (pod → PID): the
node agent already holds a Redis connection, and the launcher may be another
process (the demo's simulated cluster). A directory of pid files would need a
shared filesystem and name escaping for the same result.

A pod that is not registered counts as gone (nothing to signal). PIDs can be
reused by the OS after a process dies; the launcher should ``forget`` a pod
when its process ends, which keeps that window small for a demo.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from redis.asyncio import Redis

from gpuyield.agents.node import procfs
from gpuyield.agents.node.pods import PodRef

log = logging.getLogger(__name__)


class LocalPodRegistry:
    """Pod → PID, shared through Redis by the launcher and the node agent."""

    def __init__(self, redis: Redis, *, prefix: str = "gpuyield") -> None:
        self._redis = redis
        self.key = f"{prefix}:local-pods"

    async def register(self, pod: PodRef | str, pid: int) -> None:
        await cast("Any", self._redis.hset(self.key, str(pod), str(pid)))

    async def forget(self, pod: PodRef | str) -> None:
        await cast("Any", self._redis.hdel(self.key, str(pod)))

    async def pid(self, pod: PodRef) -> int | None:
        """The PID registered for ``namespace/name`` (or for the bare name)."""
        raw = await cast("Any", self._redis.hget(self.key, pod.key))
        if raw is None:
            raw = await cast("Any", self._redis.hget(self.key, pod.name))
        return None if raw is None else int(raw)


class LocalProcessSignaller:
    """SIGTERM/SIGKILL by PID; ``alive`` while the PID runs (a zombie counts as gone)."""

    def __init__(self, registry: LocalPodRegistry, *, proc_root: Path = Path("/proc")) -> None:
        self._registry = registry
        self._proc_root = proc_root

    async def _running(self, pod: PodRef) -> int | None:
        pid = await self._registry.pid(pod)
        if pid is None:
            return None
        running = await asyncio.to_thread(procfs.is_running, pid, self._proc_root)
        return pid if running else None

    async def signal(self, pods: Sequence[PodRef], grace_s: float) -> None:
        for pod in pods:
            pid = await self._running(pod)
            if pid is None:
                log.warning("pod %s: no running process registered", pod)
                continue
            log.info("pod %s: SIGTERM to pid %d (grace %.0f s)", pod, pid, grace_s)
            procfs.send(pid, signal.SIGTERM)

    async def alive(self, pods: Sequence[PodRef]) -> bool:
        for pod in pods:
            if await self._running(pod) is not None:
                return True
        return False

    async def kill(self, pods: Sequence[PodRef]) -> None:
        for pod in pods:
            pid = await self._running(pod)
            if pid is not None:
                log.warning("pod %s: SIGKILL to pid %d", pod, pid)
                procfs.send(pid, signal.SIGKILL)
