"""What the controller reads from Kubernetes and Volcano objects."""

from __future__ import annotations

import pytest
from cluster_objects import T0, node, pod, pod_group, queue

from gpuyield.agents.controller.kube_facts import (
    FactError,
    node_record,
    pod_group_record,
    pod_record,
    queue_record,
)

LABELS = {"rack_label": "topology.kubernetes.io/rack", "nvlink_label": "nvidia.com/gpu.clique"}


def test_a_ready_node_offers_its_allocatable_gpus() -> None:
    assert node_record(node("gpu-07", 8, rack="r2"), **LABELS) == {
        "gpus": 8,
        "schedulable": True,
        "rack": "r2",
        "nvlink": None,
    }


def test_a_cordoned_or_not_ready_node_is_not_schedulable() -> None:
    cordoned = node("gpu-07")
    cordoned["spec"]["unschedulable"] = True
    assert not node_record(cordoned, **LABELS)["schedulable"]
    assert not node_record(node("gpu-08", ready=False), **LABELS)["schedulable"]


def test_a_pod_belongs_to_its_volcano_job_and_counts_its_gpu_limits() -> None:
    record = pod_record(pod("ft-llama", 3, namespace="prod", gpus=8, node="gpu-01"))
    assert (record["namespace"], record["job"], record["gpus"], record["node"]) == (
        "prod",
        "ft-llama",
        8,
        "gpu-01",
    )
    assert record["started_at"] == T0
    assert record["priority"] == 100


def test_init_containers_count_as_their_maximum_not_their_sum() -> None:
    obj = pod("ft", 0)
    obj["spec"]["initContainers"] = [
        {"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": "8"}}},
        {"name": "probe", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
    ]
    assert pod_record(obj)["gpus"] == 8


def test_a_fractional_gpu_quantity_is_rejected_with_the_field_named() -> None:
    obj = pod("ft", 0)
    obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "0.5"
    with pytest.raises(FactError, match=r"container trainer: nvidia.com/gpu must be a whole"):
        pod_record(obj)


def test_a_pod_marked_not_preemptable_says_so() -> None:
    obj = pod("serving", 0)
    obj["metadata"]["annotations"]["volcano.sh/preemptable"] = "false"
    assert pod_record(obj)["preemptable"] is False


def test_a_pod_group_names_its_owning_job_and_whether_volcano_could_place_it() -> None:
    record = pod_group_record(
        pod_group(
            "ft-llama",
            namespace="prod",
            queue="production",
            min_member=4,
            phase="Inqueue",
            unschedulable=True,
        )
    )
    assert record["job"] == "ft-llama"
    assert (record["queue"], record["min_member"], record["unschedulable"]) == (
        "production",
        4,
        True,
    )


def test_a_queue_reads_capability_guarantee_and_reclaimable() -> None:
    record = queue_record(
        queue("production", weight=4, capability=256, guarantee=128, reclaimable=False)
    )
    assert record == {
        "weight": 4.0,
        "capability": 256,
        "capability_lists": ["nvidia.com/gpu"],
        "guarantee": 128,
        "reclaimable": False,
        "parent": None,
    }


def test_a_queue_without_limits_is_unlimited_and_reclaimable() -> None:
    assert queue_record(queue("default")) == {
        "weight": 1.0,
        "capability": None,
        "capability_lists": [],
        "guarantee": 0,
        "reclaimable": True,
        "parent": None,
    }


@pytest.mark.parametrize("quantity", ["1_000", "10^21", " 8", "+8", "1e3", "8.0", True, 8.0])
def test_a_gpu_quantity_not_in_canonical_form_is_rejected(quantity: object) -> None:
    obj = pod("ft", 0)
    obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = quantity
    with pytest.raises(FactError, match=r"nvidia.com/gpu must be a whole number"):
        pod_record(obj)


def test_a_pod_whose_containers_add_up_to_more_gpus_than_any_node_is_rejected() -> None:
    obj = pod("ft", 0)
    one_gpu = obj["spec"]["containers"][0]
    one_gpu["resources"]["limits"]["nvidia.com/gpu"] = "1"
    obj["spec"]["containers"] = [{**one_gpu, "name": f"c{i}"} for i in range(10_000)]
    with pytest.raises(
        FactError, match=r"pod ft-worker-0: 10000 nvidia.com/gpu over 10000 containers"
    ):
        pod_record(obj)


def test_a_node_claiming_more_gpus_than_any_node_has_is_rejected() -> None:
    with pytest.raises(FactError, match=r"node gpu-07: nvidia.com/gpu 100000 is more than"):
        node_record(node("gpu-07", 100_000), **LABELS)


def test_a_queue_may_hold_more_gpus_than_any_node() -> None:
    record = queue_record(queue("shared", weight=1, capability=4096, guarantee=1024))
    assert (record["capability"], record["guarantee"]) == (4096, 1024)
