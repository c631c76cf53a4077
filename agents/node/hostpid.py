"""Signalling a pod's training process directly, for agents deployed with ``hostPID: true``.

Where the Eviction API is not wanted (the pod must keep its object and IP
while it checkpoints, or the cluster's eviction path is slow), a node agent
that sees the host's processes can signal the training process itself. The
pod is found by its UID in each process's cgroup path (see ``procfs``); the
main process of each of its containers gets SIGTERM (as from the runtime on a
stop), and a kill sends SIGKILL to every process of the pod except the
sandbox's. The pod object stays; the job's suspension removes it afterwards
(until then a kubelet may restart a killed container under ``restartPolicy:
OnFailure``, which the kill's wait reports as pods still running).

Pod names become UIDs through a ``PodUidResolver`` (the API server in a
cluster, ``kube_signaller.KubernetesPodUidResolver``; a mapping in tests). It
is asked on every call rather than cached: Volcano recreates pods under the
same names, and a cached UID would point at a previous incarnation.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from gpuyield.agents.node import procfs
from gpuyield.agents.node.pods import PodRef

log = logging.getLogger(__name__)


class PodUidResolver(Protocol):
    async def uid(self, pod: PodRef) -> str | None:
        """The pod's UID, or None when no such pod exists."""
        ...


class StaticUidResolver:
    """UIDs from a mapping of ``namespace/name`` to UID (tests, static setups)."""

    def __init__(self, uids: Mapping[str, str]) -> None:
        self._uids = dict(uids)

    async def uid(self, pod: PodRef) -> str | None:
        return self._uids.get(pod.key)


class HostPidSignaller:
    """SIGTERM/SIGKILL to a pod's processes, found in a ``/proc`` tree by pod UID."""

    def __init__(
        self,
        resolver: PodUidResolver,
        *,
        proc_root: Path = Path("/proc"),
        send: Callable[[int, int], bool] = procfs.send,
    ) -> None:
        self._resolver = resolver
        self._proc_root = proc_root
        self._send = send

    async def _workload(self, pod: PodRef) -> list[procfs.ProcInfo]:
        uid = await self._resolver.uid(pod)
        if uid is None:
            return []
        processes = await asyncio.to_thread(procfs.pod_processes, self._proc_root, uid)
        return procfs.workload(processes)

    async def main_pids(self, pod: PodRef) -> list[int]:
        """The PIDs a graceful stop signals: each container's main process."""
        return [p.pid for p in procfs.container_mains(await self._workload(pod))]

    async def signal(self, pods: Sequence[PodRef], grace_s: float) -> None:
        for pod in pods:
            targets = await self.main_pids(pod)
            if not targets:
                log.warning("pod %s: no process found under %s", pod, self._proc_root)
            for pid in targets:
                log.info("pod %s: SIGTERM to pid %d", pod, pid)
                self._send(pid, signal.SIGTERM)

    async def alive(self, pods: Sequence[PodRef]) -> bool:
        for pod in pods:
            if await self._workload(pod):
                return True
        return False

    async def kill(self, pods: Sequence[PodRef]) -> None:
        for pod in pods:
            for proc in await self._workload(pod):
                log.warning("pod %s: SIGKILL to pid %d (%s)", pod, proc.pid, proc.name)
                self._send(proc.pid, signal.SIGKILL)
