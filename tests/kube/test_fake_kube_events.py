"""Events on the fake API server: created as kube-apiserver creates events.k8s.io/v1 Events.

The worker writes one on each Volcano Job a decision yields, spares or
resumes (``streams/kube_job_events.py``); the fake accepts what the real
server accepts (201, with server-set metadata), refuses what it refuses (422
naming the field, 409 AlreadyExists) and lists them back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from fakes.kube_api import FakeKubeApi
from fakes.kube_store import resource_of
from kubernetes.client.exceptions import ApiException

from gpuyield.streams.kube_job_events import EventWriter

EVENTS = resource_of("events.k8s.io/v1", "Event")


def an_event(name: str = "sweep-a.0123456789abcdef", **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "research"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "gpuyield.io/worker",
        "reportingInstance": "gpuyield-worker-0",
        "action": "Preempt",
        "reason": "GracefulYield",
        "type": "Normal",
        "note": "yields to prod/ft-llama (preemptor); rule: lowest W_eff",
        "regarding": {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "namespace": "research",
            "name": "sweep-a",
        },
    }
    event.update(fields)
    return event


@pytest.fixture
def events_api(kube_api: FakeKubeApi) -> Iterator[kubernetes.client.EventsV1Api]:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    yield kubernetes.client.EventsV1Api(client)
    client.close()


def _status(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def stored_events(api: FakeKubeApi) -> list[dict[str, Any]]:
    return [obj for _, obj in api.call(lambda: api.store.snapshot(EVENTS, "research"))]


def test_an_event_is_created_with_the_servers_metadata(
    kube_api: FakeKubeApi, events_api: kubernetes.client.EventsV1Api
) -> None:
    created = events_api.create_namespaced_event("research", an_event())
    assert created.reason == "GracefulYield"
    assert created.metadata.uid
    assert created.metadata.resource_version
    [stored] = stored_events(kube_api)
    assert stored["regarding"]["name"] == "sweep-a"
    assert kube_api.requests[-1].verb == "create"


def test_the_same_event_twice_is_409_already_exists(
    events_api: kubernetes.client.EventsV1Api,
) -> None:
    events_api.create_namespaced_event("research", an_event())
    with pytest.raises(ApiException) as caught:
        events_api.create_namespaced_event("research", an_event())
    assert caught.value.status == 409
    status = _status(caught.value)
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'events.events.k8s.io "sweep-a.0123456789abcdef" already exists'


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"reportingController": ""}, "reportingController"),
        ({"reportingController": "not a qualified name!"}, "reportingController"),
        ({"action": "x" * 129}, "action"),
        ({"type": "Critical"}, "type"),
        ({"note": "n" * 1025}, "note"),
    ],
)
def test_an_event_the_api_server_refuses_is_422_naming_the_field(
    events_api: kubernetes.client.EventsV1Api, change: dict[str, Any], field: str
) -> None:
    body = an_event(**change)
    with pytest.raises(ApiException) as caught:
        # a dict body: the typed model would refuse some of these before sending
        events_api.create_namespaced_event("research", body, _preload_content=False)
    assert caught.value.status == 422
    [cause] = _status(caught.value)["details"]["causes"]
    assert cause["field"] == field


def test_an_event_about_an_object_in_another_namespace_is_refused(
    events_api: kubernetes.client.EventsV1Api,
) -> None:
    body = an_event()
    body["regarding"]["namespace"] = "prod"
    with pytest.raises(ApiException) as caught:
        events_api.create_namespaced_event("research", body, _preload_content=False)
    assert caught.value.status == 422


def test_only_events_may_be_created(kube_api: FakeKubeApi) -> None:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    try:
        with pytest.raises(ApiException) as caught:
            kubernetes.client.CoreV1Api(client).create_namespaced_pod(
                "research", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
            )
    finally:
        client.close()
    assert caught.value.status == 405


def test_the_writer_creates_each_event_and_takes_a_repeat_as_written(
    kube_api: FakeKubeApi,
) -> None:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    try:
        writer = EventWriter(client)
        second = an_event("sweep-b.fedcba9876543210", reason="Spared", action="Spare")
        assert writer.create([an_event(), second]) == []
        assert writer.create([an_event()]) == []  # a redelivered decision: 409, no failure
    finally:
        client.close()
    assert sorted(e["reason"] for e in stored_events(kube_api)) == ["GracefulYield", "Spared"]


def test_the_writer_reports_an_event_it_could_not_write(kube_api: FakeKubeApi) -> None:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    try:
        failures = EventWriter(client).create([an_event(type="Critical")])
    finally:
        client.close()
    assert len(failures) == 1
    assert failures[0].startswith("research/sweep-a.0123456789abcdef: 422")
