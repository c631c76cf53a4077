"""The fake API server answers the official client as kube-apiserver does.

These pin the behaviour the watcher's tests rely on, through the real client
over a real socket, so a green watcher test means something.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import kubernetes.watch
import pytest
import urllib3
from fakes.kube_api import FakeKubeApi
from fakes.kube_objects import (
    GPU,
    GROUP_NAME,
    JOB_NAME,
    TASK_SPEC,
    a_gpu_node,
    a_pod,
    a_queue,
    a_volcano_job,
    pod_group_for,
    pods_for,
)
from fakes.waiting import eventually_sync
from kubernetes.client.exceptions import ApiException


@pytest.fixture
def client(kube_api: FakeKubeApi) -> Iterator[kubernetes.client.ApiClient]:
    api_client = kubernetes.client.ApiClient(kube_api.configuration())
    yield api_client
    api_client.close()


@pytest.fixture
def core(client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(client)


@pytest.fixture
def custom(client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(client)


def _json(response: Any) -> Any:
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _events(response: Any, count: int | None = None) -> list[dict[str, Any]]:
    """The first ``count`` events of a watch stream (all of them: until it ends)."""
    events: list[dict[str, Any]] = []
    buffer = b""
    try:
        for chunk in response.stream(amt=None):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            events.extend(json.loads(line) for line in lines if line)
            if count is not None and len(events) >= count:
                return events[:count]
        return events
    finally:
        response.close()
        response.release_conn()


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


def test_a_limited_list_pages_through_one_consistent_snapshot(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    for i in range(5):
        kube_api.create(a_gpu_node(f"gpu-{i}"))
    first = _json(core.list_node(limit=2, _preload_content=False))
    kube_api.create(a_gpu_node("gpu-late"))
    kube_api.delete(a_gpu_node("gpu-4"))
    token = first["metadata"]["continue"]
    second = _json(core.list_node(limit=2, _continue=token, _preload_content=False))
    third = _json(
        core.list_node(limit=2, _continue=second["metadata"]["continue"], _preload_content=False)
    )

    assert first["metadata"]["remainingItemCount"] == 3
    assert second["metadata"]["remainingItemCount"] == 1
    assert "continue" not in third["metadata"]
    pages = [first, second, third]
    assert [_names(p["items"]) for p in pages] == [
        ["gpu-0", "gpu-1"],
        ["gpu-2", "gpu-3"],
        ["gpu-4"],
    ]
    assert {p["metadata"]["resourceVersion"] for p in pages} == {"1005"}


def test_built_in_list_items_omit_kind_and_custom_resource_items_keep_it(
    kube_api: FakeKubeApi,
    core: kubernetes.client.CoreV1Api,
    custom: kubernetes.client.CustomObjectsApi,
) -> None:
    kube_api.create(a_gpu_node("gpu-0"))
    kube_api.create(a_queue("research"))

    nodes = _json(core.list_node(_preload_content=False))
    queues = custom.list_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues")

    assert (nodes["kind"], nodes["apiVersion"]) == ("NodeList", "v1")
    assert "kind" not in nodes["items"][0]
    assert queues["kind"] == "QueueList"
    assert queues["items"][0]["kind"] == "Queue"


def test_namespaced_paths_see_only_their_namespace_and_the_cluster_path_sees_all(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_pod("a", namespace="team-a"))
    kube_api.create(a_pod("b", namespace="team-b"))

    in_a = _json(core.list_namespaced_pod("team-a", _preload_content=False))
    everywhere = _json(core.list_pod_for_all_namespaces(_preload_content=False))

    assert _names(in_a["items"]) == ["a"]
    assert _names(everywhere["items"]) == ["a", "b"]


def test_a_continue_token_older_than_the_history_gets_http_410(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    for i in range(3):
        kube_api.create(a_gpu_node(f"gpu-{i}"))
    first = _json(core.list_node(limit=2, _preload_content=False))
    kube_api.create(a_gpu_node("gpu-late"))
    kube_api.compact()

    with pytest.raises(ApiException) as raised:
        core.list_node(limit=2, _continue=first["metadata"]["continue"])

    assert raised.value.status == 410
    assert json.loads(raised.value.body)["reason"] == "Expired"


def test_a_list_at_an_exact_older_version_shows_the_objects_as_they_were_then(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_gpu_node("gpu-0"))
    then = kube_api.resource_version
    kube_api.modify(a_gpu_node("gpu-0"), lambda node: node["spec"].update(unschedulable=True))
    kube_api.create(a_gpu_node("gpu-1"))

    old = _json(
        core.list_node(
            resource_version=str(then), resource_version_match="Exact", _preload_content=False
        )
    )

    assert old["metadata"]["resourceVersion"] == str(then)
    assert _names(old["items"]) == ["gpu-0"]
    assert "unschedulable" not in old["items"][0]["spec"]


def test_the_history_is_bounded_and_a_watch_from_before_it_gets_410() -> None:
    with FakeKubeApi(history_limit=2) as api:
        start = api.resource_version
        for i in range(3):
            api.create(a_gpu_node(f"gpu-{i}"))
        api_client = kubernetes.client.ApiClient(api.configuration())
        try:
            core = kubernetes.client.CoreV1Api(api_client)
            too_old = _events(
                core.list_node(watch=True, resource_version=str(start), _preload_content=False)
            )
            kept = _events(
                core.list_node(watch=True, resource_version=str(start + 1), _preload_content=False),
                count=2,
            )
        finally:
            api_client.close()

    assert [(e["type"], e["object"].get("code")) for e in too_old] == [("ERROR", 410)]
    assert [e["object"]["metadata"]["name"] for e in kept] == ["gpu-1", "gpu-2"]


def test_a_watch_replays_the_changes_after_the_given_version_in_order(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    start = kube_api.resource_version
    kube_api.create(a_pod("p"))
    kube_api.modify(a_pod("p"), lambda pod: pod["status"].update(phase="Failed"))
    kube_api.delete(a_pod("p"))
    kube_api.create(a_gpu_node("not-a-pod"))

    events = _events(
        core.list_pod_for_all_namespaces(
            watch=True, resource_version=str(start), _preload_content=False
        ),
        count=3,
    )

    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", str(start + 1)),
        ("MODIFIED", str(start + 2)),
        ("DELETED", str(start + 3)),
    ]
    assert events[1]["object"]["status"]["phase"] == "Failed"
    assert events[0]["object"]["kind"] == "Pod"


def test_a_watch_without_a_version_starts_with_the_current_objects(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_gpu_node("gpu-0"))
    kube_api.create(a_gpu_node("gpu-1"))

    events = _events(core.list_node(watch=True, _preload_content=False), count=2)

    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "gpu-0"),
        ("ADDED", "gpu-1"),
    ]


def test_a_watch_from_a_compacted_version_gets_an_error_event_410(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    start = kube_api.resource_version
    kube_api.create(a_gpu_node("gpu-0"))
    kube_api.compact()

    response = core.list_node(watch=True, resource_version=str(start), _preload_content=False)

    assert response.status == 200
    [event] = _events(response)
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_the_official_watch_helper_raises_410_on_an_expired_version(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    start = kube_api.resource_version
    kube_api.create(a_gpu_node("gpu-0"))
    kube_api.compact()

    with pytest.raises(ApiException) as raised:
        list(
            kubernetes.watch.Watch().stream(
                core.list_node, resource_version=str(start), timeout_seconds=1
            )
        )

    assert raised.value.status == 410


def test_bookmarks_carry_the_current_version_and_only_the_type(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    start = kube_api.resource_version
    response = core.list_node(
        watch=True,
        resource_version=str(start),
        allow_watch_bookmarks=True,
        _preload_content=False,
    )
    kube_api.create(a_queue("moves-the-version"))
    assert kube_api.send_bookmarks() == 1

    [bookmark] = _events(response, count=1)

    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["kind"] == "Node"
    assert bookmark["object"]["metadata"]["resourceVersion"] == str(start + 1)
    assert "name" not in bookmark["object"]["metadata"]


def test_no_bookmarks_reach_a_watch_that_did_not_allow_them(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    response = core.list_node(watch=True, resource_version="1000", _preload_content=False)

    assert kube_api.send_bookmarks() == 0
    kube_api.create(a_gpu_node("gpu-0"))
    assert [e["type"] for e in _events(response, count=1)] == ["ADDED"]


def test_periodic_bookmarks_arrive_while_a_watch_is_idle() -> None:
    with FakeKubeApi(bookmark_interval_s=0.05) as api:
        api_client = kubernetes.client.ApiClient(api.configuration())
        try:
            response = kubernetes.client.CoreV1Api(api_client).list_node(
                watch=True,
                resource_version="1000",
                allow_watch_bookmarks=True,
                _preload_content=False,
            )
            events = _events(response, count=3)
        finally:
            api_client.close()

    assert {e["type"] for e in events} == {"BOOKMARK"}


def test_a_watch_ends_cleanly_after_its_timeout_seconds(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    response = core.list_node(
        watch=True, resource_version="1000", timeout_seconds=1, _preload_content=False
    )

    assert _events(response) == []  # read to the end: no ProtocolError
    eventually_sync(lambda: kube_api.open_watches() == 0, "the server to forget the watch")


def test_a_dropped_watch_ends_without_its_final_chunk(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    response = core.list_node(watch=True, resource_version="1000", _preload_content=False)
    assert kube_api.drop_watches() == 1

    with pytest.raises(urllib3.exceptions.ProtocolError):
        for _ in response.stream(amt=None):
            pass
    response.release_conn()
    assert kube_api.open_watches() == 0


def test_injected_failures_answer_the_next_matching_requests_with_a_status(
    kube_api: FakeKubeApi, core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.fail_next(1, status=503, verb="list")

    with pytest.raises(ApiException) as raised:
        core.list_node()
    assert raised.value.status == 503
    assert core.list_node().items == []


def test_every_request_is_recorded_with_its_parameters(
    kube_api: FakeKubeApi, custom: kubernetes.client.CustomObjectsApi
) -> None:
    custom.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "team-a", "jobs", limit=7)

    [request] = kube_api.list_requests("jobs")

    assert request.path == "/apis/batch.volcano.sh/v1alpha1/namespaces/team-a/jobs"
    assert (request.namespace, request.query) == ("team-a", {"limit": "7"})


def test_writes_get_server_set_metadata_and_one_global_version(kube_api: FakeKubeApi) -> None:
    node = kube_api.create(a_gpu_node("gpu-0"))
    job = kube_api.create(a_volcano_job("llama"))
    changed = kube_api.modify(job, lambda j: j["spec"].update(minAvailable=1))
    gone = kube_api.delete(node)

    assert [o["metadata"]["resourceVersion"] for o in (node, job, changed, gone)] == [
        "1001",
        "1002",
        "1003",
        "1004",
    ]
    assert changed["metadata"]["uid"] == job["metadata"]["uid"]
    assert (job["metadata"]["generation"], changed["metadata"]["generation"]) == (1, 2)


def test_volcano_builders_name_and_annotate_objects_as_the_job_controller_does(
    kube_api: FakeKubeApi,
) -> None:
    job = kube_api.create(a_volcano_job("llama", namespace="research", replicas=2))
    group = pod_group_for(job)
    pods = pods_for(job, nodes=["gpu-0"])

    assert group["metadata"]["name"] == f"llama-{job['metadata']['uid']}"
    assert (group["spec"]["minMember"], group["spec"]["minResources"]) == (2, {GPU: "16"})
    assert [p["metadata"]["name"] for p in pods] == ["llama-worker-0", "llama-worker-1"]
    assert pods[0]["metadata"]["annotations"][GROUP_NAME] == group["metadata"]["name"]
    assert pods[0]["metadata"]["labels"][JOB_NAME] == "llama"
    assert pods[0]["metadata"]["annotations"][TASK_SPEC] == "worker"
    assert (pods[0]["spec"]["nodeName"], pods[0]["status"]["phase"]) == ("gpu-0", "Running")
    assert "nodeName" not in pods[1]["spec"]
    assert pods[1]["status"]["phase"] == "Pending"
