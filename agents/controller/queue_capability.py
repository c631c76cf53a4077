"""A queue whose ``spec.capability`` names resources but not ``nvidia.com/gpu``.

How Volcano reads it depends on its version (volcano-sh/volcano, the
``proportion`` plugin's ``OnSessionOpen``, where each queue's
``realCapability`` is built):

- **v1.5.0 to v1.8.1**: ``realCapability = helpers.Min(realCapability,
  capability)``. ``helpers.Min`` keeps only the scalar resources both sides
  name, reading a missing one as 0 (``pkg/scheduler/api/helpers/helpers.go``,
  ``Min``). A capability of ``{cpu, memory}`` therefore gives the queue **0
  GPUs**: its GPU jobs are never enqueued or allocated (the symptom of
  volcano-sh/volcano#1330), and evicting for one of them frees GPUs nobody gets.
- **v1.8.2, v1.9.0 and later** (commit b5764b960, "queue realcapability change
  to min dimension of queue capability and cluster realcapability", PR #3448;
  backported as 8050ee7c5 to v1.8.2 and a6421813b to v1.9.0):
  ``realCapability.MinDimensionResource(capability, api.Infinity)``; a
  dimension the capability does not name keeps the cluster-derived value
  ``ExceededPart(total, totalGuarantee) + guarantee``: the cluster's GPUs less
  the other queues' guarantees. The ``capacity`` plugin reads it the same way
  (``capacity.go``, same ``MinDimensionResource(..., api.Infinity)``).
- A queue with **no capability at all** is unlimited in the contract, and
  gpuyield keeps that reading.

gpuyield cannot see the scheduler's version, so the reading is a setting,
``ControllerConfig.capability_without_gpu``: ``zero`` (the default: it never
evicts for a job some Volcano will not admit) or ``cluster`` (for Volcano
v1.8.2 and later). Either way an alert names the queue and the fix that makes
every version agree: add ``nvidia.com/gpu`` to ``spec.capability``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpuyield.agents.controller.records import NODE, QUEUE, Overlay

if TYPE_CHECKING:
    from gpuyield.agents.controller.cluster import JobView
    from gpuyield.agents.controller.config import ControllerConfig

GPU = "nvidia.com/gpu"
Reading = Literal["zero", "cluster"]


def lacks_gpu(queue: Mapping[str, Any]) -> bool:
    """True when the queue's capability names resources, none of them GPUs."""
    return queue.get("capability") is None and bool(queue.get("capability_lists"))


def gpu_capability(
    name: str, queues: Mapping[str, Mapping[str, Any]], cluster_gpus: int, reading: Reading
) -> int | None:
    """The GPU capability of queue ``name`` as Volcano reads it (None: unlimited)."""
    queue = queues[name]
    if not lacks_gpu(queue):
        cap: int | None = queue.get("capability")
        return cap
    if reading == "zero":
        return 0
    others = sum(int(q.get("guarantee", 0)) for other, q in queues.items() if other != name)
    return max(0, cluster_gpus - others)


@dataclass(frozen=True, slots=True)
class Misconfigured:
    """One queue Volcano reads otherwise than its author probably meant, as an alert."""

    queue: str
    parts: tuple[str, ...]
    message: str
    details: dict[str, Any] = field(default_factory=dict)


def misconfigured(
    queues: Mapping[str, Mapping[str, Any]],
    gpu_queues: Iterable[str],
    cluster_gpus: int,
    reading: Reading,
) -> list[Misconfigured]:
    """The queues that hold or want GPU jobs (``gpu_queues``) but name no GPU capability.

    A CPU-only queue with ``capability: {cpu, memory}`` is fine and says
    nothing; it matters once a GPU job uses it.
    """
    out = []
    for name in sorted(set(gpu_queues)):
        queue = queues.get(name)
        if queue is None or not lacks_gpu(queue):
            continue
        listed = list(queue["capability_lists"])
        read_as = gpu_capability(name, queues, cluster_gpus, reading)
        out.append(
            Misconfigured(
                queue=name,
                parts=("queue-misconfigured", name, ",".join(listed)),
                message=(
                    f"queue '{name}' has spec.capability {', '.join(listed)} but not {GPU}: "
                    "Volcano v1.5-v1.8.1 admits 0 GPUs to it, v1.8.2 and later the "
                    "cluster's GPUs less the other queues' guarantees; gpuyield reads it "
                    f"as {read_as} GPUs (capability_without_gpu={reading}) and evicts for "
                    f"its jobs only within that. Fix: add {GPU} to spec.capability, e.g. "
                    f"kubectl patch queue {name} --type merge "
                    f'-p \'{{"spec":{{"capability":{{"{GPU}":"<GPUs>"}}}}}}\''
                ),
                details={
                    "queue": name,
                    "capability_lists": listed,
                    "read_as_gpus": read_as,
                    "reading": reading,
                    "fix": f"add {GPU} to spec.capability",
                },
            )
        )
    return out


def check(
    records: Overlay, views: Iterable[JobView], config: ControllerConfig
) -> list[Misconfigured]:
    """``misconfigured`` over the decider's records: what the decider alerts on."""
    queues = {key[len(QUEUE) :]: q for key, q in records.with_prefix(QUEUE)}
    cluster_gpus = sum(node["gpus"] for _, node in records.with_prefix(NODE))
    return misconfigured(
        queues, (v.queue for v in views), cluster_gpus, config.capability_without_gpu
    )
