"""Kubernetes and Volcano objects as an API server serves them, for the simulated cluster.

The demo publishes these on ``gpuyield.kube-events`` exactly as ``gpuyield
watch`` would, so the worker reads the fields it reads in a cluster (see
``gpuyield.agents.controller.kube_facts``): a pod's job label and PodGroup
annotation, its resolved priority, GPU limits, node and start time; a
PodGroup's owner Job, queue, phase and Unschedulable condition; a Volcano
Job's tasks; a Queue's guarantee, capability and reclaimability. Names follow
Volcano's job controller: pods ``<job>-<task>-<index>``, PodGroup
``<job>-<job uid>``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuyield.schemas.messages import KubeEvent, KubeEventType, KubeKind

Obj = dict[str, Any]

GPU = "nvidia.com/gpu"
VOLCANO_JOBS = "batch.volcano.sh/v1alpha1"
VOLCANO_SCHEDULING = "scheduling.volcano.sh/v1beta1"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
JOB_LABEL = "volcano.sh/job-name"
QUEUE_LABEL = "volcano.sh/queue-name"
TASK_LABEL = "volcano.sh/task-spec"
RACK_LABEL = "topology.kubernetes.io/rack"
IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
KINDS = {
    "Node": KubeKind.NODE,
    "Pod": KubeKind.POD,
    "PodGroup": KubeKind.POD_GROUP,
    "Job": KubeKind.JOB,
    "Queue": KubeKind.QUEUE,
}


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, gpus: int, *, rack: str) -> Obj:
    """A Ready GPU node as the kubelet and NVIDIA's device plugin publish it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": str(gpus),
                RACK_LABEL: rack,
            },
        },
        "spec": {"taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "192", "memory": "2Ti", GPU: str(gpus)},
            "allocatable": {"cpu": "191500m", "memory": "2Ti", GPU: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def queue(
    name: str, *, weight: int, guarantee: int, capability: int | None, reclaimable: bool
) -> Obj:
    spec: Obj = {"weight": weight, "reclaimable": reclaimable}
    if capability is not None:
        spec["capability"] = {GPU: str(capability)}
    if guarantee:
        spec["guarantee"] = {"resource": {GPU: str(guarantee)}}
    return {
        "apiVersion": VOLCANO_SCHEDULING,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"state": "Open"},
    }


def _container(gpus: int) -> Obj:
    resources = {"cpu": "16", "memory": "256Gi", GPU: str(gpus)}
    return {
        "name": "trainer",
        "image": IMAGE,
        "command": ["torchrun", "train.py"],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }


def volcano_job(
    namespace: str,
    name: str,
    *,
    uid: str,
    queue: str,
    priority_class: str,
    replicas: int,
    gpus_per_pod: int,
    min_available: int,
    created_at: float,
    phase: str,
    running: int = 0,
) -> Obj:
    """A ``batch.volcano.sh/v1alpha1`` Job with one task (``worker``)."""
    return {
        "apiVersion": VOLCANO_JOBS,
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": rfc3339(created_at),
        },
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": min_available,
            "queue": queue,
            "priorityClassName": priority_class,
            "maxRetry": 3,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "metadata": {"name": "worker"},
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [_container(gpus_per_pod)],
                        },
                    },
                }
            ],
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
        },
        "status": {
            "state": {"phase": phase},
            "minAvailable": min_available,
            "running": running,
            "pending": max(0, replicas - running),
        },
    }


def pod_group(
    namespace: str,
    job: str,
    *,
    job_uid: str,
    queue: str,
    priority_class: str,
    min_member: int,
    created_at: float,
    phase: str,
    unschedulable: bool,
) -> Obj:
    """The PodGroup Volcano's job controller creates for a Job (phase Pending/Inqueue/Running)."""
    conditions: list[Obj] = []
    if unschedulable:
        conditions.append(
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": f"{min_member}/{min_member} tasks in gang unschedulable",
            }
        )
    elif phase == "Running":
        conditions.append(
            {"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready"}
        )
    return {
        "apiVersion": VOLCANO_SCHEDULING,
        "kind": "PodGroup",
        "metadata": {
            "name": f"{job}-{job_uid}",
            "namespace": namespace,
            "creationTimestamp": rfc3339(created_at),
            "ownerReferences": [
                {
                    "apiVersion": VOLCANO_JOBS,
                    "kind": "Job",
                    "name": job,
                    "uid": job_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": priority_class},
        "status": {"phase": phase, "conditions": conditions},
    }


def pod(
    namespace: str,
    job: str,
    index: int,
    *,
    uid: str,
    job_uid: str,
    queue: str,
    priority_class: str,
    priority: int,
    gpus: int,
    node: str | None,
    phase: str,
    started_at: float | None,
    terminating_at: float | None = None,
) -> Obj:
    """A pod of a Volcano Job: Pending (unschedulable), Running on ``node``, or finished."""
    scheduled = node is not None
    conditions: list[Obj] = [
        {"type": "PodScheduled", "status": "True"}
        if scheduled
        else {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/4 nodes are available: insufficient nvidia.com/gpu",
        }
    ]
    metadata: Obj = {
        "name": f"{job}-worker-{index}",
        "namespace": namespace,
        "uid": uid,
        "labels": {JOB_LABEL: job, TASK_LABEL: "worker", QUEUE_LABEL: queue},
        "annotations": {GROUP_ANNOTATION: f"{job}-{job_uid}", JOB_LABEL: job},
        "ownerReferences": [
            {
                "apiVersion": VOLCANO_JOBS,
                "kind": "Job",
                "name": job,
                "uid": job_uid,
                "controller": True,
            }
        ],
    }
    if terminating_at is not None:
        metadata["deletionTimestamp"] = rfc3339(terminating_at)
        metadata["deletionGracePeriodSeconds"] = 30
    status: Obj = {"phase": phase, "conditions": conditions, "qosClass": "Guaranteed"}
    if started_at is not None:
        status["startTime"] = rfc3339(started_at)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": "volcano",
            "priorityClassName": priority_class,
            "priority": priority,
            "restartPolicy": "OnFailure",
            "terminationGracePeriodSeconds": 30,
            "containers": [_container(gpus)],
            **({"nodeName": node} if scheduled else {}),
        },
        "status": status,
    }


def event(obj: Obj, at: float, kind: KubeEventType, version: int) -> KubeEvent:
    """One watch event for ``obj``, as ``gpuyield watch`` publishes it."""
    meta = obj["metadata"]
    return KubeEvent(
        type=kind,
        kind=KINDS[obj["kind"]],
        namespace=meta.get("namespace"),
        name=meta["name"],
        resource_version=str(version),
        object=obj,
        observed_at=at,
    )
