"""How a yield reaches the training processes: the ``Signaller`` protocol.

A signaller does three things to a job's pods on this node: ask them to stop
gracefully (phase 1), tell whether any is still running (phase 2), and kill
them when the deadline passes. The executor knows nothing else about how, so
each way of reaching a process is one small class:

- ``kube_signaller.KubernetesEvictionSignaller``: the Eviction API with a grace
  period (kubelet runs preStop, then SIGTERM, then SIGKILL at the grace end).
- ``hostpid.HostPidSignaller``: a hostPID agent signals the container's main
  process itself, found through the pod UID in ``/proc/<pid>/cgroup``.
- ``local_signaller.LocalProcessSignaller``: plain processes (the demo, tests).

Adding a Kubernetes EvictionRequest responder (KEP-4563) later takes one more
class here and nothing else: its ``signal`` creates an ``EvictionRequest`` for
each pod naming gpuyield as the interceptor (the trainer's own responder, or
this agent, then runs the checkpoint), ``alive`` reads the pods as the eviction
signaller does, and ``kill`` deletes them. The executor, the ledger, the
checkpoint detection (heartbeats) and the acks stay as they are, because
they depend only on this protocol.

Every method must be safe to call again after a crash: ``signal`` twice is
at worst a second SIGTERM (the trainer SDK saves once), ``kill`` on a gone pod
does nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpuyield.agents.node.pods import PodRef


class Signaller(Protocol):
    async def signal(self, pods: Sequence[PodRef], grace_s: float) -> None:
        """Ask the pods' training processes to checkpoint and exit within ``grace_s``."""
        ...

    async def alive(self, pods: Sequence[PodRef]) -> bool:
        """True while any of the pods still runs (a missing pod is not running)."""
        ...

    async def kill(self, pods: Sequence[PodRef]) -> None:
        """Stop the pods now, without grace."""
        ...
