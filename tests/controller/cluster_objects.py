"""Kubernetes and Volcano objects as the API server serves them, for the controller's tests.

Built by the one set of builders (``gpuyield.schemas.kube_objects``) with
the conventions these tests share: times around ``T0``, a PodGroup named
``<job>-6b0d3e2a``, pods ``<job>-<task>-<index>`` with uid ``uid-<job>-<index>``.
"""

from __future__ import annotations

from gpuyield.schemas import kube_objects as k
from gpuyield.schemas.kube_objects import KINDS, event, rfc3339

__all__ = ["KINDS", "T0", "T0_RFC", "Obj", "event", "node", "pod", "pod_group", "queue", "rfc3339"]

Obj = k.Object
T0 = 1_764_460_800.0  # 2025-11-30T00:00:00Z
T0_RFC = "2025-11-30T00:00:00Z"
GROUP_UID = "6b0d3e2a"


def node(name: str, gpus: int = 8, *, rack: str = "rack-a", ready: bool = True) -> Obj:
    return k.a_gpu_node(name, gpus=gpus, rack=rack, ready=ready)


def queue(
    name: str,
    *,
    weight: int = 1,
    capability: int | None = None,
    guarantee: int = 0,
    reclaimable: bool = True,
) -> Obj:
    return k.a_queue(
        name,
        weight=weight,
        capability=None if capability is None else {k.GPU: capability},
        guarantee={k.GPU: guarantee} if guarantee else None,
        reclaimable=reclaimable,
    )


def pod_group(
    job: str,
    *,
    namespace: str = "default",
    queue: str = "default",
    min_member: int = 1,
    phase: str = "Running",
    unschedulable: bool = False,
) -> Obj:
    return k.a_pod_group(
        f"{job}-{GROUP_UID}",
        namespace=namespace,
        min_member=min_member,
        queue=queue,
        phase=phase,
        owner={"metadata": {"name": job}},
        unschedulable=unschedulable,
        created_at=T0,
    )


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
    return k.a_pod(
        f"{job}-{task}-{index}",
        namespace=namespace,
        node=node,
        gpus=gpus,
        pod_group=f"{job}-{GROUP_UID}",
        priority=priority,
        labels={k.JOB_NAME: job, k.TASK_SPEC: task},
        uid=f"uid-{job}-{index}",
        started_at=started if node is not None else None,
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
