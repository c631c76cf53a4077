"""The Kubernetes source turns list-then-watch into an exact stream of changes.

Every test runs the real client against the fake API server. A test that
must prove something did *not* happen writes a sentinel object afterwards and
waits for it: one resource's events are published in order, so anything
unwanted would have come out before the sentinel.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from fakes.kube_api import FakeKubeApi, RecordedRequest
from fakes.kube_objects import (
    GPU,
    a_gpu_node,
    a_pod,
    a_pod_group,
    a_queue,
    a_volcano_job,
    pod_group_for,
    pods_for,
)
from fakes.waiting import eventually

from gpuyield.schemas.messages import KubeEventType
from gpuyield.streams.kube_resources import NODES, PODS, QUEUES
from gpuyield.streams.kube_watch import Backoff, KubeWatcher, run

from .harness import FAST, OBSERVED_AT, NoJitter, Published, Sleeps, StartWatcher

ADDED, MODIFIED, DELETED = KubeEventType.ADDED, KubeEventType.MODIFIED, KubeEventType.DELETED


def _relabel(value: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["metadata"]["labels"] = {"touched": value}

    return change


async def _sentinel_pod(kube_api: FakeKubeApi, published: Published) -> None:
    kube_api.create(a_pod("zz-sentinel"))
    await eventually(lambda: published.has(ADDED, "zz-sentinel"), "the sentinel pod")


async def _take_the_watch_down(kube_api: FakeKubeApi, sleeps: Sleeps) -> None:
    """Cut the watches and keep the workers in their backoff sleep until ``release()``."""
    sleeps.hold()
    before = len(sleeps.delays)
    kube_api.drop_watches()
    await eventually(lambda: len(sleeps.delays) > before, "the watcher to notice the drop")


# -- listing ----------------------------------------------------------------


async def test_the_first_list_pages_through_all_five_kinds_and_adds_every_object(
    kube_api: FakeKubeApi, published: Published, start_watcher: StartWatcher
) -> None:
    for i in range(3):
        kube_api.create(a_gpu_node(f"gpu-{i}", rack=f"rack-{i // 2}"))
    kube_api.create(a_queue("research", capability={GPU: 256}, guarantee={GPU: 64}))
    kube_api.create(a_queue("prod", deserved={GPU: 128}, reclaimable=False))
    kube_api.create(a_queue("interns", parent="research", weight=2))
    jobs = [
        kube_api.create(a_volcano_job("llama", queue="research", replicas=2)),
        kube_api.create(a_volcano_job("bert", namespace="team-b", queue="prod", replicas=1)),
        kube_api.create(a_volcano_job("queued", queue="prod", phase="Pending")),
    ]
    for job in jobs:
        kube_api.create(pod_group_for(job, phase="Running" if job is not jobs[2] else "Inqueue"))
        for pod in pods_for(job, nodes=["gpu-0", "gpu-1"] if job is jobs[0] else []):
            kube_api.create(pod)
    kube_api.create(a_pod_group("hand-made", min_member=4, queue="research"))

    await start_watcher(settings=replace(FAST, page_size=2))

    seen = sorted((e.kind.value, e.namespace or "", e.name) for e in published.events)
    assert {e.type for e in published.events} == {ADDED}
    assert len(seen) == len(set(seen)) == 3 + 3 + 3 + 4 + 5
    assert {kind for kind, _, _ in seen} == {"Node", "Queue", "Job", "PodGroup", "Pod"}
    for plural in ("nodes", "queues", "jobs", "podgroups", "pods"):
        requests = kube_api.list_requests(plural)
        assert requests[0].query["limit"] == "2"
        assert len(requests) >= 2
        assert requests[1].continue_token


async def test_an_event_names_its_object_and_carries_it_with_kind_version_and_clock(
    kube_api: FakeKubeApi, published: Published, start_watcher: StartWatcher
) -> None:
    pod = kube_api.create(a_pod("trainer-0", namespace="team-a", node="gpu-0"))
    kube_api.create(a_gpu_node("gpu-0"))

    await start_watcher(resources=[PODS, NODES])

    by_name = {e.name: e for e in published.events}
    event = by_name["trainer-0"]
    assert (event.kind.value, event.namespace, event.key) == (
        "Pod",
        "team-a",
        "Pod/team-a/trainer-0",
    )
    assert event.resource_version == pod["metadata"]["resourceVersion"]
    assert event.observed_at == OBSERVED_AT
    # A built-in list leaves kind and apiVersion out of its items; the event has them.
    assert (event.object["kind"], event.object["apiVersion"]) == ("Pod", "v1")
    assert event.object["spec"]["nodeName"] == "gpu-0"
    assert (by_name["gpu-0"].namespace, by_name["gpu-0"].key) == (None, "Node/gpu-0")


async def test_an_expired_continue_token_restarts_the_list_without_a_duplicate(
    kube_api: FakeKubeApi,
    published: Published,
    sleeps: Sleeps,
    start_watcher: StartWatcher,
) -> None:
    for i in range(5):
        kube_api.create(a_gpu_node(f"gpu-{i}"))
    expired: list[bool] = []

    def compact_after_the_first_page(request: RecordedRequest) -> None:
        if request.plural == "nodes" and not request.continue_token and not expired:
            expired.append(True)
            kube_api.create(a_gpu_node("gpu-late"))
            kube_api.compact()

    kube_api.after_list_page(compact_after_the_first_page)

    await start_watcher(resources=[NODES], settings=replace(FAST, page_size=2))

    names = [f"gpu-{i}" for i in range(5)] + ["gpu-late"]
    assert sorted(published.of("Node")) == sorted(("ADDED", n) for n in names)
    pages = [bool(r.continue_token) for r in kube_api.list_requests("nodes")]
    assert pages == [False, True, False, True, True]
    assert sleeps.delays == []


# -- watching ---------------------------------------------------------------


async def test_watched_changes_come_out_in_order_with_their_versions(
    kube_api: FakeKubeApi, published: Published, start_watcher: StartWatcher
) -> None:
    await start_watcher(resources=[PODS])

    created = kube_api.create(a_pod("p"))
    evicted = kube_api.modify(a_pod("p"), lambda pod: pod["status"].update(phase="Failed"))
    deleted = kube_api.delete(a_pod("p"))
    await eventually(lambda: published.has(DELETED, "p"), "the deletion")

    assert [(e.type, e.resource_version) for e in published.events] == [
        (ADDED, created["metadata"]["resourceVersion"]),
        (MODIFIED, evicted["metadata"]["resourceVersion"]),
        (DELETED, deleted["metadata"]["resourceVersion"]),
    ]
    assert published.events[1].object["status"]["phase"] == "Failed"
    assert published.events[2].object["status"]["phase"] == "Failed"


async def test_a_bookmark_moves_the_resume_version_and_publishes_nothing(
    kube_api: FakeKubeApi, published: Published, start_watcher: StartWatcher
) -> None:
    kube_api.create(a_gpu_node("gpu-0"))
    watcher = await start_watcher(resources=[NODES])
    await eventually(lambda: kube_api.open_watches("nodes") == 1, "the node watch")
    kube_api.create(a_queue("elsewhere"))  # the global version moves; no node changes
    version = str(kube_api.resource_version)

    kube_api.send_bookmarks()
    [stream] = watcher.streams
    await eventually(lambda: stream.resume_version == version, "the bookmark to be read")
    kube_api.drop_watches()
    await eventually(lambda: len(kube_api.watch_requests("nodes")) == 2, "a new node watch")

    assert kube_api.watch_requests("nodes")[-1].resource_version == version
    assert kube_api.watch_requests("nodes")[-1].query["allowWatchBookmarks"] == "true"
    assert published.of("Node") == [("ADDED", "gpu-0")]
    assert len(kube_api.list_requests("nodes")) == 1


async def test_a_dropped_watch_resumes_from_the_last_version_with_no_gap_or_duplicate(
    kube_api: FakeKubeApi,
    published: Published,
    sleeps: Sleeps,
    start_watcher: StartWatcher,
) -> None:
    kube_api.create(a_pod("a"))
    await start_watcher(resources=[PODS])
    last_seen = kube_api.modify(a_pod("a"), _relabel("1"))["metadata"]["resourceVersion"]
    await eventually(lambda: published.has(MODIFIED, "a"), "the first change")

    await _take_the_watch_down(kube_api, sleeps)
    kube_api.create(a_pod("b"))
    kube_api.modify(a_pod("a"), _relabel("2"))
    kube_api.delete(a_pod("b"))
    sleeps.release()
    await _sentinel_pod(kube_api, published)

    assert published.of("Pod") == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
        ("ADDED", "zz-sentinel"),
    ]
    versions = [int(e.resource_version) for e in published.events[1:]]
    assert versions == sorted(set(versions))
    assert kube_api.watch_requests("pods")[1].resource_version == last_seen
    assert len(kube_api.list_requests("pods")) == 1


async def test_a_watch_the_server_ends_is_resumed_at_once_without_a_relist(
    kube_api: FakeKubeApi,
    published: Published,
    sleeps: Sleeps,
    start_watcher: StartWatcher,
) -> None:
    await start_watcher(resources=[PODS])
    last_seen = kube_api.create(a_pod("a"))["metadata"]["resourceVersion"]
    await eventually(lambda: published.has(ADDED, "a"), "the new pod")

    kube_api.end_watches()
    await eventually(lambda: len(kube_api.watch_requests("pods")) == 2, "a new pod watch")

    assert kube_api.watch_requests("pods")[1].resource_version == last_seen
    assert sleeps.delays == []
    assert len(kube_api.list_requests("pods")) == 1


async def test_a_watch_ended_at_once_with_nothing_in_it_waits_before_the_next(
    kube_api: FakeKubeApi, sleeps: Sleeps, start_watcher: StartWatcher
) -> None:
    await start_watcher(resources=[PODS], settings=replace(FAST, short_watch_s=60.0))
    await eventually(lambda: kube_api.open_watches("pods") == 1, "the pod watch")

    kube_api.end_watches()
    await eventually(lambda: len(sleeps.delays) == 1, "a backoff")

    assert sleeps.delays == [0.5]


async def test_a_compacted_history_relists_and_publishes_only_the_differences(
    kube_api: FakeKubeApi,
    published: Published,
    sleeps: Sleeps,
    start_watcher: StartWatcher,
) -> None:
    for name in ("a", "b", "c", "d"):
        kube_api.create(a_pod(name))
    await start_watcher(resources=[PODS])
    kube_api.modify(a_pod("d"), _relabel("1"))
    await eventually(lambda: published.has(MODIFIED, "d"), "a watched change")
    last_of_a = next(e.object for e in published.events if e.name == "a")

    await _take_the_watch_down(kube_api, sleeps)
    kube_api.delete(a_pod("a"))
    changed = kube_api.modify(a_pod("b"), _relabel("2"))
    kube_api.create(a_pod("e"))
    kube_api.compact()
    listed_at = str(kube_api.resource_version)
    seen_before = len(published.events)
    sleeps.release()
    await eventually(lambda: len(kube_api.list_requests("pods")) == 2, "the relist")
    await _sentinel_pod(kube_api, published)

    after = published.events[seen_before:]
    assert [(e.type.value, e.name) for e in after] == [
        ("DELETED", "a"),
        ("MODIFIED", "b"),
        ("ADDED", "e"),
        ("ADDED", "zz-sentinel"),
    ]
    # A deletion found by a relist: the last object seen, at the list's version.
    assert after[0].object == last_of_a
    assert after[0].resource_version == listed_at
    assert after[1].resource_version == changed["metadata"]["resourceVersion"]
    assert len(kube_api.list_requests("pods")) == 2


async def test_an_http_410_on_the_watch_request_also_relists(
    kube_api: FakeKubeApi,
    published: Published,
    start_watcher: StartWatcher,
) -> None:
    kube_api.create(a_pod("a"))
    await start_watcher(resources=[PODS])
    await eventually(lambda: kube_api.open_watches("pods") == 1, "the pod watch")

    kube_api.fail_next(1, status=410, verb="watch")
    kube_api.drop_watches()
    await eventually(lambda: len(kube_api.list_requests("pods")) == 2, "a relist")
    await _sentinel_pod(kube_api, published)

    assert published.of("Pod") == [("ADDED", "a"), ("ADDED", "zz-sentinel")]


async def test_an_object_recreated_while_away_comes_out_as_deleted_then_added(
    kube_api: FakeKubeApi,
    published: Published,
    sleeps: Sleeps,
    start_watcher: StartWatcher,
) -> None:
    first = kube_api.create(a_pod("a"))
    await start_watcher(resources=[PODS])
    await eventually(lambda: kube_api.open_watches("pods") == 1, "the pod watch")

    await _take_the_watch_down(kube_api, sleeps)
    kube_api.delete(a_pod("a"))
    second = kube_api.create(a_pod("a"))
    kube_api.compact()
    sleeps.release()
    await _sentinel_pod(kube_api, published)

    assert published.of("Pod") == [
        ("ADDED", "a"),
        ("DELETED", "a"),
        ("ADDED", "a"),
        ("ADDED", "zz-sentinel"),
    ]
    uids = [e.object["metadata"]["uid"] for e in published.events[:3]]
    assert uids == [first["metadata"]["uid"], first["metadata"]["uid"], second["metadata"]["uid"]]


async def test_namespaces_restrict_the_namespaced_resources_only(
    kube_api: FakeKubeApi, published: Published, start_watcher: StartWatcher
) -> None:
    kube_api.create(a_pod("mine", namespace="team-a"))
    kube_api.create(a_pod("theirs", namespace="team-b"))
    kube_api.create(a_gpu_node("gpu-0"))

    await start_watcher(resources=[PODS, NODES], namespaces=["team-a"])
    kube_api.create(a_pod("theirs-2", namespace="team-b"))
    kube_api.create(a_pod("mine-2", namespace="team-a"))
    await eventually(lambda: published.has(ADDED, "mine-2"), "the new pod in team-a")

    assert published.of("Pod") == [("ADDED", "mine"), ("ADDED", "mine-2")]
    assert published.of("Node") == [("ADDED", "gpu-0")]
    paths = {r.path for r in kube_api.requests if r.plural == "pods"}
    assert paths == {"/api/v1/namespaces/team-a/pods"}


# -- failures and backoff ---------------------------------------------------


async def test_the_backoff_doubles_with_each_failure_and_restarts_once_a_watch_delivers(
    kube_api: FakeKubeApi,
    published: Published,
    sleeps: Sleeps,
    start_watcher: StartWatcher,
) -> None:
    kube_api.fail_next(3, status=500, verb="list")
    await start_watcher(resources=[QUEUES])
    assert sleeps.delays == [0.5, 1.0, 2.0]

    kube_api.create(a_queue("research"))
    await eventually(lambda: published.has(ADDED, "research"), "the new queue")
    kube_api.drop_watches()
    await eventually(lambda: len(sleeps.delays) == 4, "the retry after the drop")

    assert sleeps.delays[-1] == 0.5


async def test_a_failed_publish_is_retried_and_nothing_before_it_is_repeated(
    kube_api: FakeKubeApi,
    published: Published,
    sleeps: Sleeps,
    start_watcher: StartWatcher,
) -> None:
    kube_api.create(a_pod("a"))
    kube_api.create(a_pod("b"))
    published.fail_on.add("b")

    await start_watcher(resources=[PODS])

    assert published.of("Pod") == [("ADDED", "a"), ("ADDED", "b")]
    assert sleeps.delays == [0.5]


def test_the_backoff_is_capped_and_jitter_only_shortens_it() -> None:
    backoff = Backoff(initial_s=0.5, max_s=8.0, multiplier=2.0, jitter=0.5)
    rng = random.Random(7)

    nominal = [backoff.delay(n, NoJitter()) for n in range(7)]
    jittered = [backoff.delay(n, rng) for n in range(200)]

    assert nominal == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert all(4.0 <= d <= 8.0 for d in jittered[4:])
    assert len({round(d, 6) for d in jittered[4:]}) > 100
    assert backoff.delay(10_000, NoJitter()) == 8.0


# -- stopping ---------------------------------------------------------------


async def test_stop_interrupts_open_watches_and_ends_every_thread(
    kube_api: FakeKubeApi, start_watcher: StartWatcher
) -> None:
    watcher = await start_watcher(settings=replace(FAST, watch_timeout_s=300))
    await eventually(lambda: kube_api.open_watches() == 5, "all five watches")

    await watcher.stop()

    assert [t.name for t in threading.enumerate() if t.name.startswith("kube-watch-")] == []
    await eventually(lambda: kube_api.open_watches() == 0, "the server to see them close")


async def test_run_watches_until_cancelled_then_stops_cleanly(
    kube_api: FakeKubeApi, published: Published
) -> None:
    kube_api.create(a_gpu_node("gpu-0"))
    watcher = KubeWatcher(
        configuration=kube_api.configuration(),
        publish=published.publish,
        resources=[NODES],
        settings=FAST,
    )
    task = asyncio.create_task(run(watcher))
    await eventually(lambda: published.has(ADDED, "gpu-0"), "the node")

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert [t.name for t in threading.enumerate() if t.name.startswith("kube-watch-")] == []
