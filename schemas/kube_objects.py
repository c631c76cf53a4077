"""Kubernetes and Volcano objects shaped as a GPU cluster's API server serves them.

The one set of builders for every object gpuyield reads from a cluster: the
tests (``tests/fakes``, ``tests/controller``), the demo's simulated cluster
(``agents/demo/objects.py``) and the benchmarks (``bench/``) all build their
nodes, pods, PodGroups, Volcano Jobs and Queues here, so a field the
controller learns to read is set in one place for all of them. Pure: plain
dicts and one wire model (``KubeEvent``), no I/O.

Field names follow the Volcano API types (volcano-sh/volcano
``staging/src/volcano.sh/apis/pkg/apis``: ``batch/v1alpha1/job.go``,
``scheduling/v1beta1/types.go``) and what Volcano's job controller writes on
the pods it creates (``pkg/controllers/job/job_controller_util.go``:
``createJobPod``), so code reading them meets the shapes it will meet in a
cluster. Builders return plain dicts without server-set metadata (uid,
resourceVersion, timestamps): ``FakeKubeApi.create`` adds those. Where no
API server is in between (the demo and the controller's tests publish watch
events themselves), ``uid=``, ``created_at=`` and the pods' ``started_at=``
and ``terminating_at=`` set them as the server would::

    job = api.create(a_volcano_job("llama", queue="research", replicas=2))
    api.create(pod_group_for(job, phase="Running"))
    for pod in pods_for(job, nodes=["gpu-1", "gpu-2"]):
        api.create(pod)
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuyield.schemas.labels import GROUP_ANNOTATION, JOB_LABEL
from gpuyield.schemas.messages import KubeEvent, KubeEventType, KubeKind

Object = dict[str, Any]
Resources = Mapping[str, str | int]

GPU = "nvidia.com/gpu"
VOLCANO_JOBS = "batch.volcano.sh/v1alpha1"
VOLCANO_SCHEDULING = "scheduling.volcano.sh/v1beta1"
GROUP_NAME = GROUP_ANNOTATION
JOB_NAME = JOB_LABEL
JOB_NAMESPACE = "volcano.sh/job-namespace"
QUEUE_NAME = "volcano.sh/queue-name"
TASK_SPEC = "volcano.sh/task-spec"
TASK_INDEX = "volcano.sh/task-index"
RACK_LABEL = "topology.kubernetes.io/rack"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
TRAINING_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
LAST_TRANSITION = "2026-01-01T00:00:00Z"
KINDS = {
    "Node": KubeKind.NODE,
    "Pod": KubeKind.POD,
    "PodGroup": KubeKind.POD_GROUP,
    "Job": KubeKind.JOB,
    "Queue": KubeKind.QUEUE,
}


def rfc3339(at: float) -> str:
    """A timestamp as the API server writes it (RFC 3339, whole seconds, UTC)."""
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(
    obj: Object, at: float, kind: KubeEventType = KubeEventType.ADDED, version: int = 1
) -> KubeEvent:
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


def _served(metadata: Object, uid: str | None, created_at: float | None) -> Object:
    """The metadata an API server adds, where a caller stands in for the server."""
    if uid is not None:
        metadata["uid"] = uid
    if created_at is not None:
        metadata["creationTimestamp"] = rfc3339(created_at)
    return metadata


def _quantities(resources: Resources | None) -> dict[str, str]:
    return {name: str(value) for name, value in (resources or {}).items()}


def a_gpu_node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    gpu_memory_mib: int = 81559,
    zone: str = "us-east-1a",
    rack: str | None = None,
    clique: str | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
) -> Object:
    """A GPU node as the kubelet, NVIDIA's device plugin and GPU feature discovery publish it."""
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": zone[:-1],
        "topology.kubernetes.io/zone": zone,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(gpu_memory_mib),
    }
    if rack is not None:
        node_labels[RACK_LABEL] = rack
    if clique is not None:
        node_labels[CLIQUE_LABEL] = clique
    node_labels.update(labels or {})
    capacity = {
        "cpu": "192",
        "memory": "2097152000Ki",
        "ephemeral-storage": "3750000000Ki",
        "pods": "110",
        GPU: str(gpus),
    }
    allocatable = {**capacity, "cpu": "191500m", "memory": "2090000000Ki"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {
            "providerID": f"aws:///{zone}/i-{zlib.crc32(name.encode()):012x}",
            "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}],
            **({"unschedulable": True} if unschedulable else {}),
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "lastTransitionTime": LAST_TRANSITION,
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.33.2",
                "containerRuntimeVersion": "containerd://1.7.27",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
        },
    }


def a_container(*, gpus: int, image: str = TRAINING_IMAGE, name: str = "trainer") -> Object:
    """A training container; extended resources need requests equal to limits."""
    resources: dict[str, str] = {"cpu": "16", "memory": "256Gi"}
    if gpus:
        resources[GPU] = str(gpus)
    return {
        "name": name,
        "image": image,
        "command": ["torchrun", "train.py"],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }


def a_task(
    name: str = "worker",
    *,
    replicas: int = 2,
    gpus: int = 8,
    min_available: int | None = None,
    policies: Sequence[Object] = (),
    image: str = TRAINING_IMAGE,
) -> Object:
    """A Volcano ``TaskSpec``: replicas of one pod template."""
    task: Object = {
        "name": name,
        "replicas": replicas,
        "template": {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [a_container(gpus=gpus, image=image)],
            },
        },
    }
    if min_available is not None:
        task["minAvailable"] = min_available
    if policies:
        task["policies"] = list(policies)
    return task


def a_volcano_job(
    name: str,
    *,
    namespace: str = "default",
    queue: str = "default",
    priority_class: str | None = None,
    tasks: Sequence[Object] | None = None,
    replicas: int = 2,
    gpus_per_pod: int = 8,
    min_available: int | None = None,
    phase: str = "Running",
    policies: Sequence[Object] | None = None,
    max_retry: int = 3,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    uid: str | None = None,
    created_at: float | None = None,
    running: int | None = None,
) -> Object:
    """A ``batch.volcano.sh/v1alpha1`` Job; by default gang-scheduled, restarted when evicted.

    ``running``: pods running (default: all of them when ``phase`` is Running, else none).
    """
    job_tasks = list(tasks) if tasks is not None else [a_task(replicas=replicas, gpus=gpus_per_pod)]
    total = sum(int(t["replicas"]) for t in job_tasks)
    spec: Object = {
        "schedulerName": "volcano",
        "minAvailable": total if min_available is None else min_available,
        "queue": queue,
        "maxRetry": max_retry,
        "tasks": job_tasks,
        "policies": list(
            policies
            if policies is not None
            else [
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "PodFailed", "action": "RestartJob"},
            ]
        ),
        "plugins": {"pytorch": ["--master=master", "--worker=worker", "--port=23456"]},
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if running is None:
        running = total if phase == "Running" else 0
    return {
        "apiVersion": VOLCANO_JOBS,
        "kind": "Job",
        "metadata": _served(
            {
                "name": name,
                "namespace": namespace,
                "labels": dict(labels or {}),
                "annotations": dict(annotations or {}),
            },
            uid,
            created_at,
        ),
        "spec": spec,
        "status": {
            "state": {"phase": phase, "lastTransitionTime": LAST_TRANSITION},
            "minAvailable": spec["minAvailable"],
            "running": running,
            "pending": max(0, total - running),
            "version": 1,
            "retryCount": 0,
            "taskStatusCount": {
                t["name"]: {"phase": {"Running" if running else "Pending": t["replicas"]}}
                for t in job_tasks
            },
        },
    }


def pod_group_name(job: Object) -> str:
    """Volcano names a job's PodGroup ``<job>-<job uid>`` (just ``<job>`` before a uid exists)."""
    uid = job["metadata"].get("uid")
    return f"{job['metadata']['name']}-{uid}" if uid else str(job["metadata"]["name"])


def _owner(job: Object) -> Object:
    return {
        "apiVersion": VOLCANO_JOBS,
        "kind": "Job",
        "name": job["metadata"]["name"],
        "uid": job["metadata"].get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def a_pod_group(
    name: str,
    *,
    namespace: str = "default",
    min_member: int = 1,
    queue: str = "default",
    priority_class: str | None = None,
    phase: str = "Pending",
    min_resources: Resources | None = None,
    min_task_member: Mapping[str, int] | None = None,
    owner: Object | None = None,
    unschedulable: bool | None = None,
    created_at: float | None = None,
) -> Object:
    """A ``scheduling.volcano.sh/v1beta1`` PodGroup (phase Pending, Inqueue, Running, ...).

    ``unschedulable``: whether the scheduler set the ``Unschedulable`` condition
    (default: in phase Pending or Inqueue; an Aborted job's group is Pending
    without it).
    """
    spec: Object = {"minMember": min_member, "queue": queue}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if min_resources:
        spec["minResources"] = _quantities(min_resources)
    if min_task_member:
        spec["minTaskMember"] = dict(min_task_member)
    metadata = _served({"name": name, "namespace": namespace}, None, created_at)
    if owner is not None:
        metadata["ownerReferences"] = [_owner(owner)]
    status: Object = {"phase": phase}
    if phase == "Running":
        status["running"] = min_member
    if unschedulable is None:
        unschedulable = phase in ("Pending", "Inqueue")
    if unschedulable:
        status["conditions"] = [
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": f"{min_member}/{min_member} tasks in gang unschedulable",
                "lastTransitionTime": LAST_TRANSITION,
            }
        ]
    return {
        "apiVersion": VOLCANO_SCHEDULING,
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def pod_group_for(job: Object, *, phase: str = "Running") -> Object:
    """The PodGroup Volcano's job controller creates for ``job``."""
    spec = job["spec"]
    gpus = 0
    min_task_member: dict[str, int] = {}
    for task in spec["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            limits = container.get("resources", {}).get("limits", {})
            gpus += int(limits.get(GPU, 0)) * int(task["replicas"])
        min_task_member[task["name"]] = int(task.get("minAvailable", task["replicas"]))
    return a_pod_group(
        pod_group_name(job),
        namespace=job["metadata"]["namespace"],
        min_member=int(spec["minAvailable"]),
        queue=spec.get("queue", "default"),
        priority_class=spec.get("priorityClassName"),
        phase=phase,
        min_resources={GPU: gpus} if gpus else None,
        min_task_member=min_task_member,
        owner=job,
    )


def a_pod(
    name: str,
    *,
    namespace: str = "default",
    node: str | None = None,
    gpus: int = 8,
    phase: str | None = None,
    pod_group: str | None = None,
    queue: str = "default",
    priority_class: str | None = None,
    priority: int | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    uid: str | None = None,
    owner: Object | None = None,
    started_at: float | None = None,
    terminating_at: float | None = None,
) -> Object:
    """A pod scheduled by Volcano: Running on ``node`` if given, else Pending and unschedulable.

    ``owner``: the Volcano Job that owns it; ``started_at``: its ``startTime``
    (default: a fixed time once Running); ``terminating_at``: deleted then,
    within its 30-second grace period.
    """
    pod_phase = phase or ("Running" if node else "Pending")
    pod_annotations = dict(annotations or {})
    if pod_group is not None:
        pod_annotations[GROUP_NAME] = pod_group
    spec: Object = {
        "schedulerName": "volcano",
        "restartPolicy": "OnFailure",
        "containers": [a_container(gpus=gpus)],
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
    }
    if node is not None:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    if priority is not None:
        spec["priority"] = priority
    scheduled = node is not None
    conditions: list[Object] = [
        {
            "type": "PodScheduled",
            "status": "True" if scheduled else "False",
            "lastTransitionTime": LAST_TRANSITION,
            **(
                {}
                if scheduled
                else {"reason": "Unschedulable", "message": "0/8 nodes are available"}
            ),
        }
    ]
    if pod_phase == "Running":
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": LAST_TRANSITION}
        )
    status: Object = {"phase": pod_phase, "conditions": conditions, "qosClass": "Guaranteed"}
    if started_at is not None:
        status["startTime"] = rfc3339(started_at)
    elif pod_phase == "Running":
        status["startTime"] = LAST_TRANSITION
    metadata = _served(
        {
            "name": name,
            "namespace": namespace,
            "labels": {**({QUEUE_NAME: queue} if pod_group else {}), **(labels or {})},
            "annotations": pod_annotations,
        },
        uid,
        None,
    )
    if owner is not None:
        metadata["ownerReferences"] = [_owner(owner)]
    if terminating_at is not None:
        metadata["deletionTimestamp"] = rfc3339(terminating_at)
        metadata["deletionGracePeriodSeconds"] = 30
        spec["terminationGracePeriodSeconds"] = 30
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def pods_for(job: Object, *, nodes: Sequence[str | None] = ()) -> list[Object]:
    """The pods Volcano's job controller creates for ``job``: ``<job>-<task>-<index>``.

    ``nodes`` places the pods in order (None or a short list leaves the rest Pending).
    """
    meta, spec = job["metadata"], job["spec"]
    name, namespace, queue = meta["name"], meta["namespace"], spec.get("queue", "default")
    pods: list[Object] = []
    for task in spec["tasks"]:
        template = task["template"]
        for index in range(int(task["replicas"])):
            node = nodes[len(pods)] if len(pods) < len(nodes) else None
            gpus = sum(
                int(c.get("resources", {}).get("limits", {}).get(GPU, 0))
                for c in template["spec"]["containers"]
            )
            pod = a_pod(
                f"{name}-{task['name']}-{index}",
                namespace=namespace,
                node=node,
                gpus=gpus,
                pod_group=pod_group_name(job),
                queue=queue,
                priority_class=spec.get("priorityClassName"),
                labels={
                    TASK_INDEX: str(index),
                    JOB_NAME: name,
                    TASK_SPEC: task["name"],
                    JOB_NAMESPACE: namespace,
                },
                annotations={
                    TASK_INDEX: str(index),
                    TASK_SPEC: task["name"],
                    JOB_NAME: name,
                    QUEUE_NAME: queue,
                    "volcano.sh/job-version": str(job.get("status", {}).get("version", 0)),
                    "volcano.sh/template-uid": f"{name}-{task['name']}",
                    "volcano.sh/job-retry-count": "0",
                },
            )
            pod["spec"]["containers"] = [dict(c) for c in template["spec"]["containers"]]
            if "terminationGracePeriodSeconds" in template["spec"]:  # the template's, as Volcano
                pod["spec"]["terminationGracePeriodSeconds"] = template["spec"][
                    "terminationGracePeriodSeconds"
                ]
            pod["metadata"]["ownerReferences"] = [_owner(job)]
            pods.append(pod)
    return pods


def a_queue(
    name: str,
    *,
    weight: int = 1,
    capability: Resources | None = None,
    guarantee: Resources | None = None,
    deserved: Resources | None = None,
    reclaimable: bool = True,
    parent: str | None = None,
    priority: int | None = None,
    state: str = "Open",
) -> Object:
    """A ``scheduling.volcano.sh/v1beta1`` Queue, e.g. ``capability={GPU: 256}``."""
    spec: Object = {"weight": weight, "reclaimable": reclaimable}
    if capability:
        spec["capability"] = _quantities(capability)
    if guarantee:
        spec["guarantee"] = {"resource": _quantities(guarantee)}
    if deserved:
        spec["deserved"] = _quantities(deserved)
    if parent is not None:
        spec["parent"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": VOLCANO_SCHEDULING,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"state": state, "allocated": {}, "running": 0, "pending": 0, "inqueue": 0},
    }
