"""What the controller keeps of each Kubernetes object: a small JSON record.

The watch delivers whole objects (a pod is kilobytes); the decider needs a
dozen fields of each. Records are plain JSON-able dicts so the Faust table
that holds them can store and replay them as they are, and so a decision
record's inputs are readable without this code.

Where Volcano offers several sources for one fact, the choice is written down
next to it (docs/design/0003-controller.md collects them):

- a pod's job: label ``volcano.sh/job-name``, else its PodGroup
  (annotation ``scheduling.k8s.io/group-name``);
- a PodGroup's job: its owner of kind ``Job``, else the PodGroup itself
  (plain pods grouped by hand);
- priority: the pods' ``spec.priority`` (the admission plugin resolved the
  PriorityClass into it), else the configured class table, else 0;
- GPUs: container limits of ``nvidia.com/gpu`` (requests must equal limits
  for extended resources), summed over containers and init containers taken
  as their maximum, the way the scheduler counts them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpuyield.schemas.labels import GPU, GROUP_ANNOTATION, JOB_LABEL, PREEMPTABLE, SLA_ANNOTATION

Record = dict[str, Any]


class FactError(ValueError):
    """An object the controller cannot read; the message names the field."""


def _dig(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def parse_time(value: Any) -> float | None:
    """RFC 3339 (``2026-11-30T01:02:03Z``) as Unix seconds; None when absent."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise FactError(f"not an RFC 3339 time: {value!r}") from None


MAX_GPUS_PER_OBJECT = 256
"""More GPUs than any node carries (8 on a DGX/HGX node, 72 in a whole NVL72
rack): a node, pod or container claiming more is broken input, refused with
the field named rather than folded into a plan (issue 11: a pod of 10,000
one-GPU containers showed as 10,000 GPUs on an 8-GPU node)."""

MAX_GPUS_PER_QUEUE = 10_000_000
"""A queue's capability or guarantee spans the cluster: bounded far above any
real cluster, only so that an absurd number is refused rather than planned with."""

_DIGITS = re.compile(r"[0-9]{1,12}")


def gpu_quantity(value: Any, where: str, at_most: int = MAX_GPUS_PER_OBJECT) -> int:
    """A whole number of GPUs, written as the API serves it: plain decimal digits.

    Extended resources admit no fractions, and the API server writes their
    quantities in canonical form, so anything else (``"1_000"``, ``" 8"``,
    ``"+8"``, ``"10^21"``, ``"1e3"``, a bool, a float) is refused instead of
    being read by Python's lenient ``int()``.
    """
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        amount = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        amount = int(value)
    else:
        raise FactError(f"{where}: {GPU} must be a whole number, got {value!r}")
    if amount < 0:
        raise FactError(f"{where}: {GPU} must not be negative, got {amount}")
    if amount > at_most:
        what = "any node has" if at_most == MAX_GPUS_PER_OBJECT else "any cluster has"
        raise FactError(f"{where}: {GPU} {amount} is more than {what} (at most {at_most})")
    return amount


def _container_gpus(container: Mapping[str, Any], where: str) -> int:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    return gpu_quantity(limits.get(GPU, requests.get(GPU)), where)


def pod_gpus(pod: Mapping[str, Any]) -> int:
    spec = pod.get("spec") or {}
    name = _dig(pod, "metadata", "name")
    main = sum(
        _container_gpus(c, f"pod {name} container {c.get('name')}")
        for c in spec.get("containers") or ()
    )
    init = max(
        (
            _container_gpus(c, f"pod {name} initContainer {c.get('name')}")
            for c in spec.get("initContainers") or ()
        ),
        default=0,
    )
    total = max(main, init)
    if total > MAX_GPUS_PER_OBJECT:
        containers = len(spec.get("containers") or ())
        raise FactError(
            f"pod {name}: {total} {GPU} over {containers} containers is more than any node has "
            f"(at most {MAX_GPUS_PER_OBJECT})"
        )
    return total


MAX_SLA_S = 366 * 86400.0
"""An SLA longer than a year is a typo (milliseconds?), not a budget."""


def _sla_seconds(meta: Mapping[str, Any]) -> float | None:
    """``gpuyield.io/sla-seconds``: a positive number of seconds, or absent."""
    raw = (meta.get("annotations") or {}).get(SLA_ANNOTATION)
    if raw is None:
        return None
    where = f"{meta.get('namespace') or 'default'}/{meta.get('name')}: annotation {SLA_ANNOTATION}"
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise FactError(f"{where}: {raw!r} is not a number of seconds") from None
    if not 0 < value <= MAX_SLA_S:  # also rejects NaN and inf
        raise FactError(f"{where}: {raw!r} is not between 0 and {MAX_SLA_S:.0f} seconds")
    return value


def _preemptable(meta: Mapping[str, Any]) -> bool:
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        if str(source.get(PREEMPTABLE, "true")).lower() == "false":
            return False
    return True


def node_record(node: Mapping[str, Any], *, rack_label: str, nvlink_label: str) -> Record:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    unschedulable = bool(_dig(node, "spec", "unschedulable"))
    return {
        "gpus": gpu_quantity(allocatable.get(GPU), f"node {meta.get('name')}"),
        "schedulable": ready and not unschedulable,
        "rack": labels.get(rack_label),
        "nvlink": labels.get(nvlink_label),
    }


def pod_record(pod: Mapping[str, Any]) -> Record:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    scheduled_false = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in status.get("conditions") or ()
    )
    return {
        "namespace": meta.get("namespace") or "default",
        "job": labels.get(JOB_LABEL) or annotations.get(JOB_LABEL),
        "group": annotations.get(GROUP_ANNOTATION),
        "gpus": pod_gpus(pod),
        "node": spec.get("nodeName") or None,
        "phase": status.get("phase") or "Pending",
        "terminating": meta.get("deletionTimestamp") is not None,
        "unschedulable": scheduled_false,
        "priority": spec.get("priority"),
        "priority_class": spec.get("priorityClassName"),
        "started_at": parse_time(status.get("startTime")),
        "preemptable": _preemptable(meta),
        "uid": meta.get("uid"),
        "evicted": eviction_mark(pod),
    }


EVICT_REASON = "Evict"
EVICT_MESSAGE = "Pod is evicted, because of "
PREEMPTED_REASON = "PreemptionByScheduler"


def eviction_mark(pod: Mapping[str, Any]) -> Record | None:
    """The scheduler eviction ``pod``'s status records (``scheduler``, ``action``), or None.

    Volcano's evictor writes ``Ready=False`` reason ``Evict`` (message ``Pod is
    evicted, because of <action>``) and, from 1.13, ``DisruptionTarget=True``
    reason ``PreemptionByScheduler`` (message ``<scheduler>: preempting ...``,
    as kube-scheduler's preemption does); see ``volcano_evictions``.
    """
    status = pod.get("status") or {}
    conditions = [c for c in status.get("conditions") or () if isinstance(c, Mapping)]
    for c in conditions:
        if (c.get("type"), c.get("status"), c.get("reason")) == ("Ready", "False", EVICT_REASON):
            message = str(c.get("message") or "")
            action = message[len(EVICT_MESSAGE) :] if message.startswith(EVICT_MESSAGE) else ""
            scheduler = (pod.get("spec") or {}).get("schedulerName") or "volcano"
            return {"scheduler": str(scheduler), "action": action.strip() or "evict"}
    for c in conditions:
        if (c.get("type"), c.get("status"), c.get("reason")) == (
            "DisruptionTarget",
            "True",
            PREEMPTED_REASON,
        ):
            scheduler, _, _ = str(c.get("message") or "").partition(":")
            return {"scheduler": scheduler.strip() or "unknown", "action": "preempt"}
    return None


def pod_group_record(group: Mapping[str, Any]) -> Record:
    meta = group.get("metadata") or {}
    spec = group.get("spec") or {}
    status = group.get("status") or {}
    owner = next(
        (o.get("name") for o in meta.get("ownerReferences") or () if o.get("kind") == "Job"),
        None,
    )
    unschedulable = any(
        c.get("type") == "Unschedulable" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return {
        "namespace": meta.get("namespace") or "default",
        "job": owner or meta.get("name"),
        "queue": spec.get("queue") or "default",
        "min_member": spec.get("minMember"),
        "priority_class": spec.get("priorityClassName"),
        "phase": status.get("phase") or "Pending",
        "unschedulable": unschedulable,
        "created_at": parse_time(meta.get("creationTimestamp")),
        "preemptable": _preemptable(meta),
        "sla_s": _sla_seconds(meta),
    }


def volcano_job_record(job: Mapping[str, Any]) -> Record:
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    tasks = []
    for task in spec.get("tasks") or ():
        pod = {"metadata": {"name": task.get("name")}, "spec": _dig(task, "template", "spec")}
        tasks.append(
            {
                "name": task.get("name") or "task",
                "replicas": int(task.get("replicas") or 0),
                "gpus_per_pod": pod_gpus(pod),
            }
        )
    return {
        "namespace": meta.get("namespace") or "default",
        "queue": spec.get("queue") or "default",
        "min_available": spec.get("minAvailable"),
        "priority_class": spec.get("priorityClassName"),
        "phase": _dig(job, "status", "state", "phase") or "Pending",
        "tasks": tasks,
        "created_at": parse_time(meta.get("creationTimestamp")),
        "preemptable": _preemptable(meta),
        "uid": meta.get("uid"),
        "sla_s": _sla_seconds(meta),
    }


def queue_record(queue: Mapping[str, Any]) -> Record:
    meta = queue.get("metadata") or {}
    spec = queue.get("spec") or {}
    name = meta.get("name")
    limits = spec.get("capability") or {}
    capability = limits.get(GPU)
    guarantee = _dig(spec, "guarantee", "resource", GPU)
    reclaimable = spec.get("reclaimable")
    return {
        "weight": float(spec.get("weight") or 1),
        "capability": None
        if capability is None
        else gpu_quantity(capability, f"queue {name} capability", MAX_GPUS_PER_QUEUE),
        # The resources spec.capability names: a capability that names some
        # but not nvidia.com/gpu is read by the version rule in queue_capability.
        "capability_lists": sorted(str(k) for k in limits),
        "guarantee": gpu_quantity(guarantee, f"queue {name} guarantee", MAX_GPUS_PER_QUEUE),
        "reclaimable": True if reclaimable is None else bool(reclaimable),
        "parent": spec.get("parent") if spec.get("parent") not in (None, "", "root") else None,
    }
