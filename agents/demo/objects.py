"""The simulated cluster's objects, built by the one set of builders (``schemas.kube_objects``).

The demo publishes these on ``gpuyield.kube-events`` exactly as ``gpuyield
watch`` would, so the worker reads the fields it reads in a cluster (see
``gpuyield.agents.controller.kube_facts``): a pod's job label and PodGroup
annotation, its resolved priority, GPU limits, node and start time; a
PodGroup's owner Job, queue, phase and Unschedulable condition; a Volcano
Job's tasks; a Queue's guarantee, capability and reclaimability. Names follow
Volcano's job controller: pods ``<job>-<task>-<index>`` (one task,
``worker``), PodGroup ``<job>-<job uid>``. This module only maps the demo's
job plans onto the builders' arguments; no API server stands in between, so
uids and timestamps are set here.
"""

from __future__ import annotations

from gpuyield.schemas import kube_objects as k
from gpuyield.schemas.messages import KubeEvent, KubeEventType

Obj = k.Object
GPU = k.GPU
TASK = "worker"


def node(name: str, gpus: int, *, rack: str) -> Obj:
    """A Ready GPU node as the kubelet and NVIDIA's device plugin publish it."""
    return k.a_gpu_node(name, gpus=gpus, rack=rack)


def queue(
    name: str, *, weight: int, guarantee: int, capability: int | None, reclaimable: bool
) -> Obj:
    return k.a_queue(
        name,
        weight=weight,
        guarantee={GPU: guarantee} if guarantee else None,
        capability=None if capability is None else {GPU: capability},
        reclaimable=reclaimable,
    )


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
    return k.a_volcano_job(
        name,
        namespace=namespace,
        queue=queue,
        priority_class=priority_class,
        tasks=[k.a_task(TASK, replicas=replicas, gpus=gpus_per_pod)],
        min_available=min_available,
        phase=phase,
        policies=[{"event": "PodEvicted", "action": "RestartJob"}],
        uid=uid,
        created_at=created_at,
        running=running,
    )


def _owner(name: str, uid: str) -> Obj:
    return {"metadata": {"name": name, "uid": uid}}


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
    return k.a_pod_group(
        f"{job}-{job_uid}",
        namespace=namespace,
        min_member=min_member,
        queue=queue,
        priority_class=priority_class,
        phase=phase,
        owner=_owner(job, job_uid),
        unschedulable=unschedulable,
        created_at=created_at,
    )


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
    return k.a_pod(
        f"{job}-{TASK}-{index}",
        namespace=namespace,
        node=node,
        gpus=gpus,
        phase=phase,
        pod_group=f"{job}-{job_uid}",
        queue=queue,
        priority_class=priority_class,
        priority=priority,
        labels={k.JOB_NAME: job, k.TASK_SPEC: TASK, k.TASK_INDEX: str(index)},
        annotations={k.JOB_NAME: job},
        uid=uid,
        owner=_owner(job, job_uid),
        started_at=started_at,
        terminating_at=terminating_at,
    )


def event(obj: Obj, at: float, kind: KubeEventType, version: int) -> KubeEvent:
    """One watch event for ``obj``, as ``gpuyield watch`` publishes it."""
    return k.event(obj, at, kind, version)
