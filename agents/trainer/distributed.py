"""The few collectives a yielding DDP job needs, and their no-op twins for one process.

Every rank must stop after the same step: a rank that stops early leaves the
others blocked in their next gradient all-reduce until the kubelet kills them,
and the checkpoint would mix steps. A SIGTERM may reach one rank only, or all
of them at slightly different times, so each rank's local flag is combined with
a MAX all-reduce at a step boundary that every rank passes: one tensor of two
ints (the yield code and "a time-based checkpoint is due"), about 0.5 ms
between two gloo ranks on a 2-core machine. That is negligible next to a
gradient all-reduce; where it is not, ``sync_every_steps=k`` agrees only every
k steps (and at the last one), so a yield waits at most k - 1 more steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist


class Collective(Protocol):
    """What the session needs from the job's process group."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def max_ints(self, values: Sequence[int]) -> list[int]:
        """The element-wise maximum over all ranks (a barrier, too)."""
        ...

    def broadcast_int(self, value: int) -> int:
        """Rank 0's value, on every rank."""
        ...

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's small object, in rank order, on rank 0 (None elsewhere)."""
        ...


class SingleProcess:
    """A job of one process: every collective is the identity."""

    rank = 0
    world_size = 1

    def max_ints(self, values: Sequence[int]) -> list[int]:
        return list(values)

    def broadcast_int(self, value: int) -> int:
        return value

    def gather(self, obj: Any) -> list[Any] | None:
        return [obj]


class ProcessGroup:
    """``torch.distributed`` on an initialised group (gloo on CPU, NCCL on GPUs)."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self._group = group
        self._rank = dist.get_rank(group)
        self._world_size = dist.get_world_size(group)
        backend = dist.get_backend(group)
        # NCCL only moves CUDA tensors; gloo only CPU ones.
        self._device = (
            torch.device("cuda", torch.cuda.current_device())
            if backend == dist.Backend.NCCL
            else torch.device("cpu")
        )

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    def max_ints(self, values: Sequence[int]) -> list[int]:
        tensor = torch.tensor(list(values), dtype=torch.int64, device=self._device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self._group)
        return [int(v) for v in tensor.tolist()]

    def broadcast_int(self, value: int) -> int:
        tensor = torch.tensor([value], dtype=torch.int64, device=self._device)
        dist.broadcast(tensor, src=self._global_rank(0), group=self._group)
        return int(tensor.item())

    def gather(self, obj: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * self._world_size if self._rank == 0 else None
        dist.gather_object(obj, out, dst=self._global_rank(0), group=self._group)
        return out

    def _global_rank(self, group_rank: int) -> int:
        if self._group is None:
            return group_rank
        return dist.get_global_rank(self._group, group_rank)


def current(group: dist.ProcessGroup | None = None) -> Collective:
    """The job's collective: a process group if one is initialised with more than one rank."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        return ProcessGroup(group)
    return SingleProcess()
