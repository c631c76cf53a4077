"""What the official client sends for the node agent: Volcano bus commands, evictions, kills."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import kubernetes.client
import pytest
from fakes.kube_objects import a_pod, a_volcano_job

from gpuyield.agents.node.kube_signaller import (
    KubernetesEvictionSignaller,
    KubernetesGpuCounter,
    KubernetesPods,
    KubernetesPodUidResolver,
)
from gpuyield.agents.node.pods import PodRef
from gpuyield.agents.node.suspenders import JobGone
from gpuyield.agents.node.volcano import VolcanoJobSuspender, command_name
from node.kube_capture import CaptureApi, capture_api

POD = PodRef("team", "train-0")


@pytest.fixture
async def api() -> AsyncIterator[CaptureApi]:
    async with capture_api() as server:
        yield server


@pytest.fixture
def client(api: CaptureApi) -> Iterator[kubernetes.client.ApiClient]:
    client = kubernetes.client.ApiClient(api.configuration())
    yield client
    client.close()  # type: ignore[no-untyped-call]


async def test_a_yield_suspends_the_volcano_job_with_an_abortjob_command(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    job = api.add_job(a_volcano_job("train", namespace="team"))
    uid = job["metadata"]["uid"]
    suspender = VolcanoJobSuspender(client)

    await suspender.suspend("team/train", command_id="cmd-1", reason="make room for team/urgent")

    (post,) = api.of("POST", "/apis/bus.volcano.sh/v1alpha1/namespaces/team/commands")
    owner = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "train",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert post.body == {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {
            "name": command_name("train", "AbortJob", "cmd-1"),
            "namespace": "team",
            "ownerReferences": [owner],
            "labels": {"app.kubernetes.io/managed-by": "gpuyield"},
            "annotations": {"gpuyield.io/command-id": "cmd-1"},
        },
        "action": "AbortJob",
        "target": owner,
        "reason": "GpuyieldYield",
        "message": "make room for team/urgent",
    }
    assert post.body["metadata"]["name"].startswith("train-abortjob-")


async def test_suspending_again_after_a_crash_meets_409_and_creates_nothing_new(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    api.add_job(a_volcano_job("train", namespace="team"))
    suspender = VolcanoJobSuspender(client)
    await suspender.suspend("team/train", command_id="cmd-1", reason="")
    await suspender.suspend("team/train", command_id="cmd-1", reason="")
    assert len(api.of("POST", "/commands")) == 2
    assert len(api.commands) == 1


async def test_resume_sends_resumejob_under_its_own_name(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    api.add_job(a_volcano_job("train", namespace="team"))
    suspender = VolcanoJobSuspender(client)
    await suspender.suspend("team/train", command_id="cmd-1", reason="")
    await suspender.resume("team/train", command_id="cmd-2")
    actions = sorted(c["action"] for c in api.commands.values())
    assert actions == ["AbortJob", "ResumeJob"]
    resume = next(c for c in api.commands.values() if c["action"] == "ResumeJob")
    assert resume["target"]["name"] == "train"
    assert resume["metadata"]["name"] == command_name("train", "ResumeJob", "cmd-2")


async def test_a_missing_job_needs_no_suspension_but_cannot_be_resumed(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    suspender = VolcanoJobSuspender(client)
    await suspender.suspend("team/gone", command_id="cmd-1", reason="")
    with pytest.raises(JobGone):
        await suspender.resume("team/gone", command_id="cmd-2")
    assert api.of("POST", "/commands") == []


async def test_eviction_carries_the_grace_period_and_kill_deletes_with_none(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    api.add_pod(a_pod("train-0", namespace="team", node="node-a"))
    signaller = KubernetesEvictionSignaller(KubernetesPods(client))

    await signaller.signal([POD], grace_s=29.2)

    (evict,) = api.of("POST", "/api/v1/namespaces/team/pods/train-0/eviction")
    assert evict.body["apiVersion"] == "policy/v1"
    assert evict.body["kind"] == "Eviction"
    assert evict.body["metadata"] == {"name": "train-0", "namespace": "team"}
    assert evict.body["deleteOptions"]["gracePeriodSeconds"] == 30
    assert await signaller.alive([POD])  # terminating is still running

    await signaller.kill([POD])
    (delete,) = api.of("DELETE", "/api/v1/namespaces/team/pods/train-0")
    assert delete.query.get("gracePeriodSeconds") == "0"
    assert delete.body["gracePeriodSeconds"] == 0
    assert not await signaller.alive([POD])
    await signaller.kill([POD])  # a gone pod: nothing to do, no error
    await signaller.signal([POD], grace_s=5)


async def test_an_eviction_refused_by_a_budget_falls_back_to_a_graceful_delete(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    api.add_pod(a_pod("train-0", namespace="team", node="node-a"))
    api.budget_blocks.add(POD.key)
    signaller = KubernetesEvictionSignaller(KubernetesPods(client))
    await signaller.signal([POD], grace_s=60)
    (delete,) = api.of("DELETE", "/pods/train-0")
    assert delete.body["gracePeriodSeconds"] == 60


async def test_finished_pods_are_not_alive(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    api.add_pod(a_pod("train-0", namespace="team", node="node-a", phase="Succeeded"))
    assert not await KubernetesEvictionSignaller(KubernetesPods(client)).alive([POD])


async def test_gpus_and_uids_are_read_from_the_pods(
    api: CaptureApi, client: kubernetes.client.ApiClient
) -> None:
    stored = api.add_pod(a_pod("train-0", namespace="team", node="node-a", gpus=8))
    api.add_pod(a_pod("train-1", namespace="team", node="node-a", gpus=4))
    pods = KubernetesPods(client)
    both = [POD, PodRef("team", "train-1"), PodRef("team", "gone")]
    assert await KubernetesGpuCounter(pods).gpus(both) == 12
    assert await KubernetesPodUidResolver(pods).uid(POD) == stored["metadata"]["uid"]
    assert await KubernetesPodUidResolver(pods).uid(PodRef("team", "gone")) is None
