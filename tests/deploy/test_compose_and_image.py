"""docker-compose.yml and the Dockerfile, checked without Docker (none runs here).

The compose file is parsed with PyYAML (anchors and merge keys resolved as compose
does) and checked for what `docker compose up` would trip on: unknown services in
depends_on, a default service depending on a profiled one, undeclared volumes,
unpinned images, a build target the Dockerfile lacks. The Dockerfile is read as text.
"""

from __future__ import annotations

import base64
import fnmatch
import re
from typing import Any

import pytest

from .manifests import (
    DOCKERIGNORE,
    REPO,
    compose,
    dockerfile_stages,
)

SERVICES: dict[str, Any] = compose()["services"]


def test_the_stack_has_its_services() -> None:
    assert {"kafka", "redis", "worker", "watch", "node-agent"} <= set(SERVICES)


def test_plain_up_needs_no_cluster() -> None:
    """`docker compose up` starts Kafka, Redis and the workers; the rest wait for a profile."""
    default = {name for name, s in SERVICES.items() if not s.get("profiles")}
    assert default == {"kafka", "redis", "worker"}
    assert SERVICES["watch"]["profiles"] == ["kube"]
    assert "node-agent" in SERVICES["node-agent"]["profiles"]


def test_depends_on_names_services_a_plain_up_can_start() -> None:
    for name, service in SERVICES.items():
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            if not service.get("profiles"):
                assert not SERVICES[dependency].get("profiles"), (name, dependency)
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], (name, dependency)


def test_images_are_pinned_or_built_here() -> None:
    targets = {name for _, name, _ in dockerfile_stages()}
    for name, service in SERVICES.items():
        if "build" in service:
            assert service["build"]["context"] == "."
            assert service["build"]["target"] in targets, name
            continue
        image = service["image"]
        assert re.fullmatch(r"[a-z0-9./-]+:[A-Za-z0-9._-]+", image), image
        assert not image.endswith(":latest"), image


def test_named_volumes_are_declared() -> None:
    declared = set(compose().get("volumes") or {})
    for name, service in SERVICES.items():
        for volume in service.get("volumes") or ():
            source = volume.split(":")[0]
            if not source.startswith((".", "/", "~", "$")):
                assert source in declared, f"{name}: volume {source}"


def test_healthchecks_guard_the_start_order() -> None:
    for name in ("kafka", "redis", "worker"):
        assert SERVICES[name]["healthcheck"]["test"], name


def test_two_workers_share_the_production_settings() -> None:
    worker = SERVICES["worker"]
    assert worker["deploy"]["replicas"] == 2
    env = worker["environment"]
    assert env["GPUYIELD_KAFKA_PROFILE"] == "kafka"
    assert env["GPUYIELD_TOPIC_REPLICATION_FACTOR"] == "1"


def test_the_watcher_gets_a_read_only_kubeconfig() -> None:
    watch = SERVICES["watch"]
    assert any(v.endswith(":/kube/config:ro") for v in watch["volumes"])
    assert watch["command"][watch["command"].index("--kubeconfig") + 1] == "/kube/config"


def test_kafka_is_a_single_kraft_node_reachable_by_the_services() -> None:
    env = SERVICES["kafka"]["environment"]
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:")
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    # KRaft's cluster id: 16 bytes in base64url without padding.
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    bootstrap = SERVICES["worker"]["environment"]["GPUYIELD_KAFKA_BOOTSTRAP"]
    assert any(listener.endswith("://" + bootstrap) for listener in advertised)
    for listener in advertised:
        protocol_name = listener.split("://")[0]
        assert protocol_name + ":" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1


# --- the Dockerfile --------------------------------------------------------------------

STAGES = dockerfile_stages()
STAGE_NAMES = [name for _, name, _ in STAGES]
STAGE_LINES = {name: lines for _, name, lines in STAGES}


def _chain(stage: str) -> list[str]:
    """The stage and the stages it is built FROM or copies --from, transitively."""
    by_name = {name: (base, lines) for base, name, lines in STAGES}
    seen: list[str] = []
    todo = [stage]
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.append(name)
        base, lines = by_name[name]
        todo.append(base)
        todo.extend(m for line in lines for m in re.findall(r"--from=(\S+)", line))
    return seen


def test_the_default_image_is_the_controller_without_torch() -> None:
    assert STAGE_NAMES[-1] == "controller", "the last stage is what `docker build .` makes"
    for name in _chain("controller"):
        for line in STAGE_LINES[name]:
            assert "trainer" not in line, (name, line)
            assert "torch" not in line, (name, line)


def test_the_trainer_stage_adds_the_extra() -> None:
    lines = [line for name in _chain("trainer") for line in STAGE_LINES[name]]
    assert any('".[trainer]"' in line for line in lines)


@pytest.mark.parametrize("stage", ["controller", "trainer"])
def test_runtime_stages_run_as_a_numeric_non_root_user(stage: str) -> None:
    lines = STAGE_LINES[stage]
    users = [line.split()[1] for line in lines if line.upper().startswith("USER ")]
    assert users, stage
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), users[-1]
    assert int(uid) != 0, users[-1]


def test_copy_from_names_earlier_stages() -> None:
    for index, (_, name, lines) in enumerate(STAGES):
        for line in lines:
            for source in re.findall(r"--from=(\S+)", line):
                assert source in STAGE_NAMES[:index], f"{name}: COPY --from={source}"


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        if fnmatch.fnmatch(path, pattern.lstrip("!")):
            ignored = not negate
    return ignored


def test_what_the_dockerfile_copies_is_in_the_build_context() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [
        source
        for _, _, lines in STAGES
        for line in lines
        if line.upper().startswith("COPY ") and "--from=" not in line
        for source in line.split()[1:-1]
    ]
    assert {"pyproject.toml", "README.md", "cli", "examples"} <= set(copied)
    for source in copied:
        assert (REPO / source).exists(), source
        assert not _ignored(source, patterns), f".dockerignore drops {source}"
    # The paths the manifests and compose use inside the image.
    assert (REPO / "examples" / "train_tiny.py").is_file()
    assert (REPO / "examples" / "protected-research.json").is_file()
