"""Kubernetes and Volcano objects as the API server serves them, for the controller's tests.

Field names follow the real APIs (core/v1 Node and Pod, Volcano's
batch.volcano.sh/v1alpha1 Job and scheduling.volcano.sh/v1beta1 PodGroup and
Queue), so the translation under test reads what a cluster would send.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuyield.schemas.messages import KubeEvent, KubeEventType, KubeKind

Obj = dict[str, Any]
T0 = 1_764_460_800.0  # 2025-11-30T00:00:00Z
T0_RFC = "2025-11-30T00:00:00Z"


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, gpus: int = 8, *, rack: str = "rack-a", ready: bool = True) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "topology.kubernetes.io/rack": rack,
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1TiB", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def queue(
    name: str,
    *,
    weight: int = 1,
    capability: int | None = None,
    guarantee: int = 0,
    reclaimable: bool = True,
) -> Obj:
    spec: Obj = {"weight": weight, "reclaimable": reclaimable}
    if capability is not None:
        spec["capability"] = {"nvidia.com/gpu": str(capability)}
    if guarantee:
        spec["guarantee"] = {"resource": {"nvidia.com/gpu": str(guarantee)}}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"state": "Open"},
    }


def pod_group(
    job: str,
    *,
    namespace: str = "default",
    queue: str = "default",
    min_member: int = 1,
    phase: str = "Running",
    unschedulable: bool = False,
) -> Obj:
    conditions = (
        [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources"}]
        if unschedulable
        else []
    )
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"{job}-6b0d3e2a",
            "namespace": namespace,
            "creationTimestamp": T0_RFC,
            "ownerReferences": [
                {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job}
            ],
        },
        "spec": {"minMember": min_member, "queue": queue},
        "status": {"phase": phase, "conditions": conditions},
    }


def pod(
    job: str,
    index: int,
    *,
    namespace: str = "default",
    gpus: int = 8,
    node: str | None = None,
    priority: int = 100,
    task: str = "worker",
    started: float = T0,
) -> Obj:
    placed = node is not None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{task}-{index}",
            "namespace": namespace,
            "uid": f"uid-{job}-{index}",
            "labels": {"volcano.sh/job-name": job, "volcano.sh/task-spec": task},
            "annotations": {"scheduling.k8s.io/group-name": f"{job}-6b0d3e2a"},
        },
        "spec": {
            "schedulerName": "volcano",
            "priority": priority,
            **({"nodeName": node} if placed else {}),
            "containers": [
                {
                    "name": "trainer",
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(gpus)},
                        "requests": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
        "status": {
            "phase": "Running" if placed else "Pending",
            **({"startTime": rfc3339(started)} if placed else {}),
            "conditions": []
            if placed
            else [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


KINDS = {
    "Node": KubeKind.NODE,
    "Pod": KubeKind.POD,
    "PodGroup": KubeKind.POD_GROUP,
    "Job": KubeKind.JOB,
    "Queue": KubeKind.QUEUE,
}


def event(obj: Obj, at: float, kind: KubeEventType = KubeEventType.ADDED) -> KubeEvent:
    meta = obj["metadata"]
    return KubeEvent(
        type=kind,
        kind=KINDS[obj["kind"]],
        namespace=meta.get("namespace"),
        name=meta["name"],
        resource_version="1",
        object=obj,
        observed_at=at,
    )


def volcano_job(
    job: str,
    *,
    namespace: str = "default",
    queue: str = "default",
    replicas: int = 1,
    gpus: int = 8,
    min_available: int | None = None,
    phase: str = "Running",
) -> Obj:
    """A batch.volcano.sh/v1alpha1 Job with one task of ``replicas`` pods (Aborted: suspended)."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": job,
            "namespace": namespace,
            "uid": f"uid-{job}",
            "creationTimestamp": T0_RFC,
        },
        "spec": {
            "queue": queue,
            "minAvailable": replicas if min_available is None else min_available,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "trainer",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
        "status": {"state": {"phase": phase}},
    }
