"""gpuyield doctor's checks: each of seed 003's pitfalls in a dump is found with its id, where
it is and the fix; a healthy cluster has none."""

from __future__ import annotations

from typing import Any

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.doctor import CHECKS, DoctorFinding, diagnose
from gpuyield.schemas.kube_objects import (
    GPU,
    a_gpu_node,
    a_pod,
    a_pod_group,
    a_queue,
    a_task,
    a_volcano_job,
    pod_group_for,
    pods_for,
)

NOW = 1_767_225_600.0
CONFIG = ControllerConfig()
Obj = dict[str, Any]
GOOD_CONF = (
    'actions: "enqueue, allocate, backfill"\n'
    "tiers:\n- plugins:\n  - name: priority\n  - name: gang\n  - name: conformance\n"
    "- plugins:\n  - name: drf\n  - name: predicates\n  - name: proportion\n  - name: binpack\n"
)


def training_job(name: str, *, nodes: list[str | None], **overrides: Any) -> list[Obj]:
    """A well-configured preemptable training job: no restart on eviction, retries to spare,
    a grace long enough to checkpoint; its PodGroup and pods."""
    task = a_task("worker", replicas=len(nodes), gpus=overrides.pop("gpus", 8))
    task["template"]["spec"]["terminationGracePeriodSeconds"] = 300
    job = a_volcano_job(
        name,
        namespace="research",
        queue="research",
        tasks=[task],
        policies=[{"event": "PodFailed", "action": "RestartJob"}],
        max_retry=10,
        **overrides,
    )
    running = all(n is not None for n in nodes)
    group = pod_group_for(job, phase="Running" if running else "Pending")
    return [job, group, *pods_for(job, nodes=nodes)]


def healthy() -> list[Obj]:
    return [
        *(a_gpu_node(f"gpu-{i:02d}") for i in range(4)),
        a_queue("production", weight=4, capability={GPU: 32}, guarantee={GPU: 16}),
        a_queue("research", weight=1, capability={GPU: 32}),
        *training_job("sweep", nodes=["gpu-00", "gpu-01"]),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
            "data": {"volcano-scheduler.conf": GOOD_CONF},
        },
    ]


def checks(objects: list[Obj], **kwargs: Any) -> list[DoctorFinding]:
    return diagnose(objects, CONFIG, NOW, **kwargs)


def only(found: list[DoctorFinding], check: str) -> DoctorFinding:
    (finding,) = [f for f in found if f.check == check]
    assert finding.severity == CHECKS[check]
    assert finding.message
    assert finding.fix
    return finding


def test_a_healthy_cluster_has_no_finding() -> None:
    assert checks(healthy()) == []


def test_a_queue_whose_capability_omits_gpus() -> None:
    objects = healthy()
    objects[5]["spec"]["capability"] = {"cpu": "512", "memory": "4Ti"}  # research
    finding = only(checks(objects), "queue-capability-missing-gpu")
    assert finding.object == "Queue/research"
    assert "nvidia.com/gpu" in finding.fix


def test_a_guarantee_above_the_capability() -> None:
    objects = [*healthy(), a_queue("inference", capability={GPU: 8}, guarantee={GPU: 12})]
    assert only(checks(objects), "queue-guarantee-exceeds-capability").object == "Queue/inference"


def test_guarantees_adding_up_to_more_than_the_cluster() -> None:
    objects = [*healthy(), a_queue("inference", capability={GPU: 32}, guarantee={GPU: 24})]
    finding = only(checks(objects), "queue-guarantees-exceed-cluster")
    assert "40 GPUs" in finding.message
    assert "has 32" in finding.message


def test_two_20_gpu_gangs_pending_on_30_free_gpus_can_deadlock() -> None:
    objects: list[Obj] = [
        *(a_gpu_node(f"gpu-{i:02d}", gpus=5) for i in range(6)),
        a_queue("research", capability={GPU: 30}),
    ]
    for name in ("llm-a", "llm-b"):
        job = training_job(name, nodes=[None] * 4, gpus=5)
        objects += job
    finding = only(checks(objects), "gang-deadlock")
    assert "research/llm-a (20), research/llm-b (20)" in finding.message


def test_gangs_holding_part_of_their_minimum_deadlock() -> None:
    objects: list[Obj] = [
        *(a_gpu_node(f"gpu-{i:02d}", gpus=5) for i in range(6)),
        a_queue("research", capability={GPU: 30}),
    ]
    for g, name in enumerate(("llm-a", "llm-b")):
        job, _, *pods = training_job(
            name, nodes=[f"gpu-{3 * g + k:02d}" for k in range(3)] + [None], gpus=5
        )
        group = a_pod_group(
            f"{name}-group",
            namespace="research",
            min_member=4,
            queue="research",
            phase="Unknown",
            owner=job,
            unschedulable=True,
        )
        objects += [job, group, *pods]
    finding = only(checks(objects), "gang-deadlock")
    assert "llm-a" in finding.object
    assert "llm-b" in finding.object


def test_restart_on_eviction_for_a_preemptable_job() -> None:
    objects = healthy()
    objects[6]["spec"]["policies"] = [{"event": "PodEvicted", "action": "RestartJob"}]
    assert only(checks(objects), "restart-on-eviction").object == "Job/research/sweep"


def test_a_max_retry_no_higher_than_the_yields_it_may_get() -> None:
    objects = healthy()
    objects[6]["spec"]["maxRetry"] = 3
    assert only(checks(objects), "max-retry-too-low").object == "Job/research/sweep"


def test_a_gpu_pod_without_volcano_as_its_scheduler() -> None:
    stray = a_pod("notebook", namespace="research", gpus=1)
    stray["spec"]["terminationGracePeriodSeconds"] = 300
    del stray["spec"]["schedulerName"]
    finding = only(checks([*healthy(), stray]), "scheduler-name-missing")
    assert finding.object == "Pod/research/notebook"
    assert "default-scheduler" in finding.message


def test_free_gpus_too_fragmented_for_any_pending_pod() -> None:
    """Seed 003: free 1/5/4/6 on four 8-GPU nodes, and a gang of 8-GPU pods."""
    objects: list[Obj] = [
        *(a_gpu_node(f"gpu-{i:02d}") for i in range(4)),
        a_queue("research", capability={GPU: 32}),
    ]
    for i, used in enumerate((7, 3, 4, 2)):
        filler = training_job(f"small-{i}", nodes=[f"gpu-{i:02d}"], gpus=used)
        objects += filler
    objects += training_job("big", nodes=[None, None], gpus=8)
    finding = only(checks(objects), "fragmented-free-gpus")
    assert finding.object == "Job/research/big"
    assert "1/5/4/6" in finding.message


def test_volcano_preempting_in_the_dumped_scheduler_configmap() -> None:
    objects = healthy()
    objects[-1]["data"]["volcano-scheduler.conf"] = GOOD_CONF.replace(
        "enqueue, allocate", "enqueue, allocate, preempt, reclaim"
    )
    finding = only(checks(objects), "volcano-preempt-enabled")
    assert finding.object == "ConfigMap/volcano-system/volcano-scheduler-configmap"


def test_volcano_preempting_in_a_scheduler_conf_given_beside_the_dump() -> None:
    conf = GOOD_CONF.replace("enqueue, allocate", "enqueue, allocate, preempt")
    finding = only(checks(healthy()[:-1], scheduler_conf=conf), "volcano-preempt-enabled")
    assert finding.object == "--scheduler-conf"


def test_a_pod_volcano_is_evicting_in_the_dump_shows_preempt_is_on() -> None:
    """The evidence the live volcano-evicting alert reads, caught before the pod is gone."""
    objects = healthy()
    victim = next(o for o in objects if o["kind"] == "Pod")
    victim["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "volcano: preempting to accommodate a higher priority pod",
        }
    )
    finding = only(checks(objects), "volcano-preempt-enabled")
    assert finding.object == "Pod/research/sweep-worker-0"
    assert "volcano is evicting it (preempt)" in finding.message


def test_a_pod_gpuyield_evicts_in_the_dump_is_no_finding() -> None:
    objects = healthy()
    victim = next(o for o in objects if o["kind"] == "Pod")
    victim["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    )
    assert checks(objects) == []


def test_a_pod_grace_shorter_than_the_checkpoint_grace() -> None:
    objects = healthy()
    for obj in objects:
        if obj["kind"] == "Pod":
            obj["spec"]["terminationGracePeriodSeconds"] = 30
    found = [f for f in checks(objects) if f.check == "grace-too-short"]
    assert [f.object for f in found] == [
        "Pod/research/sweep-worker-0",
        "Pod/research/sweep-worker-1",
    ]


def test_an_object_the_controller_cannot_read_is_reported_not_fatal() -> None:
    objects = healthy()
    broken = a_pod("broken", namespace="research", gpus=1)
    broken["spec"]["containers"][0]["resources"]["limits"][GPU] = "half"
    finding = only(checks([*objects, broken]), "unreadable-object")
    assert finding.object == "Pod/research/broken"
    assert "nvidia.com/gpu" in finding.message


def test_every_check_id_is_documented_in_the_readme() -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    for check in CHECKS:
        assert f"`{check}`" in readme, check
