"""How many GPUs a yield's pods hold: the factor in the GPU-seconds a yield loses.

Yield commands name pods, not GPU counts, so the agent asks a ``GpuCounter``
once, when it signals (the pods still exist then) and keeps the number in the
yield's record. ``FixedGpuCounter`` assumes a number per pod (local runs);
``kube_signaller.KubernetesGpuCounter`` reads the pods' GPU limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpuyield.agents.node.pods import PodRef


class GpuCounter(Protocol):
    async def gpus(self, pods: Sequence[PodRef]) -> int:
        """GPUs held by the pods together (0 when unknown)."""
        ...


class FixedGpuCounter:
    """Every pod holds ``per_pod`` GPUs."""

    def __init__(self, per_pod: int = 1) -> None:
        if per_pod < 0:
            raise ValueError("per_pod must be >= 0")
        self._per_pod = per_pod

    async def gpus(self, pods: Sequence[PodRef]) -> int:
        return self._per_pod * len(pods)
