"""Every setting and command the deployment files use exists, and parses.

A misspelt ``GPUYIELD_`` variable is silently ignored by the settings (they accept
other components' variables), and a wrong flag only shows when the pod starts: both
are checked here against the code, offline, with no kubectl needed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gpuyield.cli import app
from gpuyield.streams.settings import (
    CONFIG_ENV,
    SETTING_NAMES,
    Settings,
    env_value,
    setting_specs,
    setting_value,
)

from .manifests import (
    COMPOSE,
    DEPLOY,
    DOCKERFILE,
    IMAGE,
    REPO,
    TRAIN_SCRIPT,
    compose,
    env_file,
    raw_documents,
    script_flags,
    walk_containers,
)

VALID_NAMES = SETTING_NAMES | {CONFIG_ENV}
NAME = re.compile(r"\bGPUYIELD_[A-Z0-9_]+\b")
COMMENTED = re.compile(r"^#\s*(GPUYIELD_[A-Z0-9_]+)=(.*)$")
SECRET = "GPUYIELD_KAFKA_SASL_PASSWORD"


def deployment_texts() -> list[Path]:
    files = [p for p in DEPLOY.rglob("*") if p.is_file() and p.suffix in (".yaml", ".env", ".md")]
    return sorted([*files, COMPOSE, DOCKERFILE])


@pytest.mark.parametrize("path", deployment_texts(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_gpuyield_variable_is_a_setting(path: Path) -> None:
    """Manifests, env files, compose, Dockerfile and docs name only real settings."""
    used = set(NAME.findall(path.read_text(encoding="utf-8")))
    unknown = sorted(used - VALID_NAMES)
    assert not unknown, f"{path.name}: not settings (streams/settings.py): {unknown}"


def test_the_name_check_would_catch_a_typo() -> None:
    assert NAME.findall("GPUYIELD_KAFKA_BOOTSTRAP=x GPUYIELD_REDIS_ULR=y") == [
        "GPUYIELD_KAFKA_BOOTSTRAP",
        "GPUYIELD_REDIS_ULR",
    ]
    assert "GPUYIELD_REDIS_ULR" not in VALID_NAMES


@pytest.fixture(autouse=True)
def _no_settings_from_the_test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the files' values count: none of the test run's own GPUYIELD_ variables."""
    for name in [n for n in os.environ if n.startswith("GPUYIELD_")]:
        monkeypatch.delenv(name)


def parse_settings(values: dict[str, str]) -> Settings:
    """Settings from GPUYIELD_ variables only, as a container would see them."""
    fields = {name.removeprefix("GPUYIELD_").lower(): v for name, v in values.items()}
    return Settings(_env_file=None, **fields)  # type: ignore[call-arg]


def test_the_base_settings_parse_for_production() -> None:
    settings = parse_settings(env_file(DEPLOY / "base" / "settings.env"))
    assert settings.kafka_profile == "kafka"
    assert not settings.embedded_kafka
    assert not settings.embedded_redis
    assert settings.topic_replication_factor == 3


def commented_settings(path: Path) -> dict[str, str]:
    """The ``# GPUYIELD_NAME=value`` lines: settings listed at the value they take unset."""
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = COMMENTED.match(line.strip())
        if match:
            found[match[1]] = match[2].strip()
    return found


def test_the_configmap_lists_every_setting() -> None:
    """An operator finds every knob in the ConfigMap, set or commented out at its default."""
    base = DEPLOY / "base" / "settings.env"
    listed = set(env_file(base)) | set(commented_settings(base))
    missing = sorted(SETTING_NAMES - {SECRET} - listed)
    assert not missing, f"settings.env lacks {missing}: add each, commented at its default"
    assert SECRET not in listed, "the SASL password comes from the Secret, never the ConfigMap"
    assert SECRET in base.read_text(encoding="utf-8"), "say where the password comes from"


def test_each_commented_setting_shows_the_value_in_effect() -> None:
    """Uncommenting a line as it stands changes nothing: its value is what applies unset."""
    base = DEPLOY / "base" / "settings.env"
    effective = parse_settings(env_file(base))
    by_name = {spec.env: spec for spec in setting_specs()}
    for name, shown in commented_settings(base).items():
        value = env_value(setting_value(effective, by_name[name]))
        assert shown == value, f"{name}: the file shows {shown!r}, the value in effect is {value!r}"


def test_a_stale_default_in_the_configmap_would_be_caught(tmp_path: Path) -> None:
    stale = tmp_path / "settings.env"
    stale.write_text("GPUYIELD_KAFKA_PROFILE=kafka\n# GPUYIELD_COOLDOWN_S=300\n")
    effective = parse_settings(env_file(stale))
    shown = commented_settings(stale)["GPUYIELD_COOLDOWN_S"]
    assert shown != env_value(effective.controller.policy.cooldown_s)


def test_the_sasl_overlay_settings_parse_with_the_secret() -> None:
    kustomization = next(
        doc
        for path, doc in raw_documents()
        if path == DEPLOY / "overlays/sasl-ssl/kustomization.yaml"
    )
    literals = kustomization["configMapGenerator"][0]["literals"]
    values = env_file(DEPLOY / "base" / "settings.env")
    values.update(line.split("=", 1) for line in literals)
    values["GPUYIELD_KAFKA_SASL_PASSWORD"] = "from-the-secret"
    settings = parse_settings(values)
    assert settings.uses_ssl
    assert settings.kafka_sasl_username


def test_the_compose_settings_parse_for_one_broker() -> None:
    services = compose()["services"]
    for name in ("worker", "watch", "node-agent"):
        settings = parse_settings(services[name]["environment"])
        assert settings.kafka_profile == "kafka", name
        assert settings.topic_replication_factor == 1, name  # one broker
        host = settings.kafka_bootstrap[0].split(":")[0]  # type: ignore[index]
        assert host in services, f"{name}: {host} is not a compose service"


# --- the CLI -----------------------------------------------------------------------------

COMMAND = typer.main.get_command(app)
RUNNER = CliRunner()


def check_gpuyield_args(args: list[str], where: str) -> None:
    """The subcommand exists and click accepts these arguments (choices, required options)."""
    assert args, f"{where}: no arguments (the image's entrypoint is gpuyield)"
    name, rest = args[0], args[1:]
    subcommands: dict[str, Any] = COMMAND.commands  # type: ignore[attr-defined]
    assert name in subcommands, f"{where}: no command `gpuyield {name}`"
    try:
        subcommands[name].make_context(name, list(rest))
    except Exception as exc:  # click's UsageError: a bad flag, choice or missing option
        pytest.fail(f"{where}: `gpuyield {' '.join(args)}`: {exc}")
    # The same flags, as a user reading `--help` sees them.
    result = RUNNER.invoke(app, [name, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for flag in (a.split("=")[0] for a in rest if a.startswith("--")):
        assert flag in result.output, f"{where}: `gpuyield {name} --help` has no {flag}"


def gpuyield_invocations() -> list[tuple[str, list[str]]]:
    """(where, args) for every gpuyield command in deploy/ (patches included) and compose."""
    found: list[tuple[str, list[str]]] = []
    for path, doc in raw_documents():
        for container in walk_containers(doc):
            image = str(container.get("image", ""))
            ours = image.split(":")[0] == IMAGE or (
                not image and container.get("name") == "gpuyield"
            )
            if ours and "args" in container and "command" not in container:
                found.append((str(path.relative_to(REPO)), [str(a) for a in container["args"]]))
    for name, service in compose()["services"].items():
        if "build" in service or str(service.get("image", "")).startswith("gpuyield"):
            found.append((f"docker-compose.yml {name}", [str(a) for a in service["command"]]))
    return found


INVOCATIONS = gpuyield_invocations()


def test_all_components_are_invoked_somewhere() -> None:
    commands = {args[0] for _, args in INVOCATIONS}
    assert {"worker", "watch", "node-agent", "plan", "status"} <= commands


@pytest.mark.parametrize(("where", "args"), INVOCATIONS, ids=[w for w, _ in INVOCATIONS])
def test_gpuyield_commands_and_flags_exist(where: str, args: list[str]) -> None:
    check_gpuyield_args(args, where)


def test_the_cli_check_rejects_a_wrong_flag_and_a_wrong_choice() -> None:
    with pytest.raises(pytest.fail.Exception, match="--signalller"):
        check_gpuyield_args(["node-agent", "--node", "n", "--signalller", "kubernetes"], "t")
    with pytest.raises(pytest.fail.Exception, match="hostpdi"):
        check_gpuyield_args(["node-agent", "--node", "n", "--signaller", "hostpdi"], "t")
    with pytest.raises(pytest.fail.Exception, match="node"):
        check_gpuyield_args(["node-agent", "--signaller", "kubernetes"], "t")


def test_the_trainer_containers_use_the_example_scripts_flags() -> None:
    flags = script_flags(TRAIN_SCRIPT)
    assert "--checkpoint-dir" in flags  # the parser was read
    seen = 0
    for path, doc in raw_documents():
        for container in walk_containers(doc):
            command = [str(c) for c in container.get("command") or ()]
            if not any(c.endswith("train_tiny.py") for c in command):
                continue
            seen += 1
            assert command[-1] == f"/app/examples/{TRAIN_SCRIPT.name}", "where the image has it"
            used = {
                a.split("=")[0] for a in map(str, container.get("args", ())) if a.startswith("--")
            }
            assert used <= flags, f"{path.name}: {sorted(used - flags)} not in {TRAIN_SCRIPT.name}"
            assert "--checkpoint-dir" in used
            assert "--job" in used
    assert seen, "no trainer container found"
