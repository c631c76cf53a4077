"""Reservations on the API server: the enforcer's taints and tolerations, through the real client.

The cluster is the fake API server (real HTTP, real patch and update
semantics); whether Volcano would place a pod on a node is decided by the
same taint rule its ``predicates`` plugin runs (``gpuyield.streams.taints``).
"""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client
import pytest
from fakes.kube_api import FakeKubeApi
from fakes.kube_objects import a_gpu_node, a_volcano_job, pods_for
from fakes.kube_store import resource_of

from gpuyield.schemas.messages import Reservation, ReservationState
from gpuyield.streams.kube_reservations import (
    HOLDERS_ANNOTATION,
    TAINT_KEY,
    EnforcerSettings,
    Hold,
    ReservationEnforcer,
    ReservationError,
    holds_from,
    taint_value,
)
from gpuyield.streams.taints import tolerates

NOW = 1_764_000_000.0
LATER = NOW + 600
DRAIN = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def enforcer(kube_api: FakeKubeApi, clock: Clock) -> Iterator[ReservationEnforcer]:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    yield ReservationEnforcer(
        client, settings=EnforcerSettings(request_timeout_s=5, conflict_retries=3), clock=clock
    )
    client.close()


def cluster(api: FakeKubeApi, nodes: int = 4) -> None:
    for i in range(nodes):
        api.create(a_gpu_node(f"gpu-{i:02d}"))


def pending_job(api: FakeKubeApi, name: str, namespace: str = "prod", replicas: int = 2) -> None:
    job = a_volcano_job(name, namespace=namespace, queue="production", replicas=replicas)
    api.create(job)
    for pod in pods_for(job):
        api.create(pod)


def node(api: FakeKubeApi, name: str) -> dict:
    found = api.get({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    assert found is not None
    return found


def pods(api: FakeKubeApi, namespace: str, job: str) -> list[dict]:
    return [
        p
        for _, p in api.call(lambda: api.store.snapshot(resource_of("v1", "Pod"), namespace))
        if p["metadata"]["labels"].get("volcano.sh/job-name") == job
    ]


def ours(api: FakeKubeApi, name: str) -> list[dict]:
    return [t for t in node(api, name)["spec"].get("taints", []) if t["key"] == TAINT_KEY]


def test_a_hold_taints_its_nodes_and_its_pods_tolerate_them(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    pending_job(kube_api, "ft-llama")

    enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00", "gpu-01"}), LATER))

    value = taint_value(["prod/ft-llama"])
    for name in ("gpu-00", "gpu-01"):
        assert ours(kube_api, name) == [{"key": TAINT_KEY, "value": value, "effect": "NoSchedule"}]
        assert node(kube_api, name)["metadata"]["annotations"][HOLDERS_ANNOTATION] == (
            "prod/ft-llama"
        )
    assert ours(kube_api, "gpu-02") == []
    for pod in pods(kube_api, "prod", "ft-llama"):
        assert tolerates(pod, node(kube_api, "gpu-00")), pod["metadata"]["name"]


def test_a_held_node_repels_every_other_pending_pod(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    pending_job(kube_api, "ft-llama")
    pending_job(kube_api, "sweep", namespace="research")

    enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER))

    held, free = node(kube_api, "gpu-00"), node(kube_api, "gpu-01")
    for pod in pods(kube_api, "research", "sweep"):
        assert not tolerates(pod, held)
        assert tolerates(pod, free)


def test_a_node_two_holds_share_admits_both_preemptors_and_nobody_else(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    pending_job(kube_api, "ft-llama")
    pending_job(kube_api, "ft-mistral")
    pending_job(kube_api, "sweep", namespace="research")

    enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00", "gpu-01"}), LATER))
    enforcer.apply(Hold("prod/ft-mistral", frozenset({"gpu-01"}), LATER))

    shared = node(kube_api, "gpu-01")
    assert ours(kube_api, "gpu-01")[0]["value"] == taint_value(["prod/ft-llama", "prod/ft-mistral"])
    assert shared["metadata"]["annotations"][HOLDERS_ANNOTATION] == "prod/ft-llama,prod/ft-mistral"
    for job in ("ft-llama", "ft-mistral"):
        assert all(tolerates(p, shared) for p in pods(kube_api, "prod", job)), job
    assert all(tolerates(p, node(kube_api, "gpu-00")) for p in pods(kube_api, "prod", "ft-llama"))
    assert not any(tolerates(p, shared) for p in pods(kube_api, "research", "sweep"))


def test_the_placed_preemptor_releases_its_nodes_but_not_a_node_another_hold_needs(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    pending_job(kube_api, "ft-llama")
    pending_job(kube_api, "ft-mistral")
    enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00", "gpu-01"}), LATER))
    enforcer.apply(Hold("prod/ft-mistral", frozenset({"gpu-01"}), LATER))

    enforcer.enforce(
        Reservation(
            job="prod/ft-llama",
            state=ReservationState.RELEASED,
            nodes={"gpu-00": 8, "gpu-01": 4},
            until=LATER,
            reason="placed by Volcano",
            at=NOW + 60,
        )
    )

    assert ours(kube_api, "gpu-00") == []
    assert HOLDERS_ANNOTATION not in node(kube_api, "gpu-00")["metadata"].get("annotations", {})
    assert ours(kube_api, "gpu-01")[0]["value"] == taint_value(["prod/ft-mistral"])
    shared = node(kube_api, "gpu-01")
    assert all(tolerates(p, shared) for p in pods(kube_api, "prod", "ft-mistral"))


def test_an_expired_hold_is_released_by_the_next_reconcile(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer, clock: Clock
) -> None:
    cluster(kube_api)
    pending_job(kube_api, "ft-llama")
    hold = Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER)
    enforcer.apply(hold)

    clock.now = LATER + 1
    enforcer.reconcile([hold])  # the record is still there, but its time is up

    assert ours(kube_api, "gpu-00") == []
    assert enforcer.holds == {}


def test_a_restarted_owner_removes_the_taints_nobody_holds_any_more(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    pending_job(kube_api, "ft-llama")
    pending_job(kube_api, "ft-mistral")
    enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER))
    enforcer.apply(Hold("prod/ft-mistral", frozenset({"gpu-02"}), LATER))
    # The owner dies here; ft-llama is placed meanwhile, so only ft-mistral is still held.
    restarted = ReservationEnforcer(
        kubernetes.client.ApiClient(kube_api.configuration()), clock=lambda: NOW
    )

    restarted.reconcile(holds_from({"prod/ft-mistral": (["gpu-02"], LATER)}))

    assert ours(kube_api, "gpu-00") == []
    assert ours(kube_api, "gpu-02")[0]["value"] == taint_value(["prod/ft-mistral"])


def test_reconcile_lets_pods_created_after_the_hold_tolerate_it(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    hold = Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER)
    enforcer.apply(hold)  # Volcano has not created the job's pods yet
    pending_job(kube_api, "ft-llama")
    assert not any(
        tolerates(p, node(kube_api, "gpu-00")) for p in pods(kube_api, "prod", "ft-llama")
    )

    enforcer.reconcile([hold])

    assert all(tolerates(p, node(kube_api, "gpu-00")) for p in pods(kube_api, "prod", "ft-llama"))


def test_other_controllers_taints_and_tolerations_survive(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    kube_api.modify(a_gpu_node("gpu-00"), lambda n: n["spec"].update(taints=[DRAIN, GPU_TAINT]))
    pending_job(kube_api, "ft-llama")
    before = [p["spec"]["tolerations"] for p in pods(kube_api, "prod", "ft-llama")]

    enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER))
    assert node(kube_api, "gpu-00")["spec"]["taints"][:2] == [DRAIN, GPU_TAINT]
    after = [p["spec"]["tolerations"] for p in pods(kube_api, "prod", "ft-llama")]
    assert all(a[: len(b)] == b for a, b in zip(after, before, strict=True))

    enforcer.release("prod/ft-llama")
    assert node(kube_api, "gpu-00")["spec"]["taints"] == [DRAIN, GPU_TAINT]


def test_a_taint_added_by_someone_else_meanwhile_is_kept_after_the_conflict(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    cordon = {"hooks": 0}

    def someone_else_taints_between_our_read_and_our_write(request) -> None:  # type: ignore[no-untyped-def]
        if request.verb == "patch" and request.plural == "nodes" and not cordon["hooks"]:
            cordon["hooks"] += 1
            kube_api.modify(a_gpu_node("gpu-00"), lambda n: n["spec"].update(taints=[DRAIN]))

    kube_api.before_write(someone_else_taints_between_our_read_and_our_write)

    enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER))

    taints = node(kube_api, "gpu-00")["spec"]["taints"]
    assert DRAIN in taints
    assert [t["key"] for t in taints].count(TAINT_KEY) == 1
    patches = [r for r in kube_api.requests if r.verb == "patch" and r.plural == "nodes"]
    assert len(patches) == 2  # refused once (409), then recomputed from a fresh read


def test_a_node_that_keeps_changing_fails_the_hold_after_bounded_retries(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    kube_api.before_write(
        lambda request: kube_api.modify(
            a_gpu_node("gpu-00"),
            lambda n: (
                n["metadata"]
                .setdefault("labels", {})
                .update(churn=n["metadata"]["resourceVersion"])
            ),
        )
    )

    with pytest.raises(ReservationError, match="node gpu-00: still conflicting after 3"):
        enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER))


def test_a_node_or_pod_that_is_gone_is_not_an_error(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api, nodes=1)
    pending_job(kube_api, "ft-llama")

    report = enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00", "gpu-gone"}), LATER))

    assert report.tainted == ["gpu-00"]
    assert report.gone == ["node gpu-gone"]


def test_bound_pods_are_left_alone(kube_api: FakeKubeApi, enforcer: ReservationEnforcer) -> None:
    cluster(kube_api)
    job = a_volcano_job("ft-llama", namespace="prod", queue="production", replicas=2)
    kube_api.create(job)
    bound, pending = pods_for(job, nodes=["gpu-03", None])
    kube_api.create(bound)
    kube_api.create(pending)

    report = enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER))

    assert report.tolerating == [f"prod/{pending['metadata']['name']}"]


def test_an_api_server_error_is_a_reservation_error_naming_the_object(
    kube_api: FakeKubeApi, enforcer: ReservationEnforcer
) -> None:
    cluster(kube_api)
    kube_api.fail_next(status=403, verb="patch")

    with pytest.raises(ReservationError, match=r"node gpu-00: HTTP 403"):
        enforcer.apply(Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER))
