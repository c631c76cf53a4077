"""The fake API server's writes answer the official client as kube-apiserver does.

PUT and PATCH of nodes, pods and Volcano objects: conflicts on a stale
resourceVersion (a real Status body), the media types each kind accepts,
versions and watch events for every write, and the validation that keeps
tolerations add-only and taints unique.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
import urllib3
from fakes.kube_api import FakeKubeApi
from fakes.kube_objects import a_gpu_node, a_pod, a_queue
from fakes.kube_patch import json_patch, merge_patch
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException


@pytest.fixture
def core(kube_api: FakeKubeApi) -> Iterator[kubernetes.client.CoreV1Api]:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def _body(response: Any) -> Any:
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _status(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status"
    return body


def test_a_put_with_a_stale_resource_version_is_a_409_conflict(kube_api: FakeKubeApi) -> None:
    stored = kube_api.create(a_gpu_node("gpu-00"))
    kube_api.modify(stored, lambda n: n["metadata"]["labels"].update(pool="b"))
    stale = {**stored, "metadata": {**stored["metadata"], "labels": {"pool": "c"}}}

    # Raw HTTP: the generated client validates a body against its own models first.
    response = urllib3.request(
        "PUT",
        f"{kube_api.url}/api/v1/nodes/gpu-00",
        body=json.dumps(stale),
        headers={"Content-Type": "application/json"},
    )

    status = json.loads(response.data)
    assert response.status == 409
    assert (status["kind"], status["reason"]) == ("Status", "Conflict")
    assert "the object has been modified" in status["message"]
    assert status["details"] == {"name": "gpu-00", "group": "", "kind": "nodes"}
    assert kube_api.get(stored)["metadata"]["labels"]["pool"] == "b"


def test_a_patch_bumps_the_version_and_is_a_modified_watch_event(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    stored = kube_api.create(a_gpu_node("gpu-00"))
    changes: list[str] = []
    kube_api.call(lambda: kube_api.store.subscribe(lambda c: changes.append(c.type)))

    patched = _body(
        core.patch_node(
            "gpu-00",
            {"spec": {"unschedulable": True}},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
    )

    assert int(patched["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    assert patched["spec"]["unschedulable"] is True
    assert changes == ["MODIFIED"]


def test_a_patch_cannot_change_the_status_through_the_main_resource(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_pod("p", namespace="prod"))

    patched = _body(
        core.patch_namespaced_pod(
            "p",
            "prod",
            {"status": {"phase": "Running"}},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
    )

    assert patched["status"]["phase"] == "Pending"


def test_custom_resources_refuse_a_strategic_merge_patch_with_415(
    kube_api: FakeKubeApi,
) -> None:
    kube_api.create(a_queue("research"))
    client = kubernetes.client.ApiClient(kube_api.configuration())
    custom = kubernetes.client.CustomObjectsApi(client)

    with pytest.raises(ApiException) as raised:
        custom.patch_cluster_custom_object(
            "scheduling.volcano.sh",
            "v1beta1",
            "queues",
            "research",
            {"spec": {"weight": 3}},
            _content_type="application/strategic-merge-patch+json",
        )
    client.close()

    assert raised.value.status == 415
    assert _status(raised.value)["reason"] == "UnsupportedMediaType"


def test_a_node_patch_with_two_taints_of_one_key_and_effect_is_invalid(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_gpu_node("gpu-00"))
    taint = {"key": "gpuyield.io/reserved", "effect": "NoSchedule"}

    with pytest.raises(ApiException) as raised:
        core.patch_node(
            "gpu-00",
            {"spec": {"taints": [{**taint, "value": "a"}, {**taint, "value": "b"}]}},
            _content_type="application/strategic-merge-patch+json",
        )

    status = _status(raised.value)
    assert raised.value.status == 422
    assert status["details"]["causes"][0]["field"] == "spec.taints[1]"
    assert "unique by key and effect" in status["message"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=8,
)


@given(
    target=st.dictionaries(st.text(max_size=2), _json),
    patch=st.dictionaries(st.text(max_size=2), _json),
)
def test_a_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


@settings(max_examples=30)
@given(doc=st.dictionaries(st.text(min_size=1, max_size=3), _json, min_size=1))
def test_a_json_patch_test_passes_on_every_present_value_and_fails_on_a_changed_one(
    doc: dict[str, Any],
) -> None:
    key = sorted(doc)[0]
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    assert json_patch(doc, [{"op": "test", "path": pointer, "value": doc[key]}]) == doc
    with pytest.raises(Exception, match="test failed"):
        json_patch(doc, [{"op": "test", "path": pointer, "value": [doc[key], "changed"]}])


def test_a_watch_with_a_label_selector_sees_an_object_leave_it_as_deleted(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_pod("a", namespace="prod", labels={"team": "x"}))
    kube_api.create(a_pod("b", namespace="prod", labels={"team": "y"}))
    version = str(kube_api.resource_version)
    kube_api.modify(
        a_pod("a", namespace="prod"), lambda p: p["metadata"]["labels"].update(team="z")
    )
    kube_api.modify(
        a_pod("b", namespace="prod"), lambda p: p["metadata"]["labels"].update(team="x")
    )

    response = core.list_namespaced_pod(
        "prod",
        watch=True,
        label_selector="team=x",
        resource_version=version,
        timeout_seconds=1,
        _preload_content=False,
    )
    events = [json.loads(line) for line in response.data.splitlines() if line]
    response.release_conn()

    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("DELETED", "a"),
        ("ADDED", "b"),
    ]
