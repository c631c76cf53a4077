"""``gpuyield config``: the effective settings and where each value came from.

Through the CLI, as an operator runs it: defaults, the environment over the
settings file, one line and exit 2 for a bad value (in every command that
reads the settings), the JSON document's shape, secrets masked, and the
README's table generated from the same model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from gpuyield.cli import app
from gpuyield.config_command import settings_markdown
from gpuyield.schemas.config import ControllerConfig
from gpuyield.streams.settings import SETTING_NAMES

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("GPUYIELD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def document(*args: str) -> dict[str, Any]:
    result = run("config", "--json", *args)
    assert result.exit_code == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_with_nothing_set_every_setting_is_its_default() -> None:
    doc = document()
    assert doc["config_file"] is None
    settings = doc["settings"]
    assert set(settings) == SETTING_NAMES
    assert {entry["source"] for entry in settings.values()} == {"default"}
    stock = ControllerConfig()
    assert settings["GPUYIELD_COOLDOWN_S"]["value"] == stock.policy.cooldown_s
    assert settings["GPUYIELD_RESERVATION_S"]["value"] == stock.reservation_s
    assert settings["GPUYIELD_KAFKA_PROFILE"]["value"] == "tansu"  # no bootstrap: embedded


def test_the_json_names_each_settings_field() -> None:
    settings = document()["settings"]
    assert settings["GPUYIELD_MAX_EVICTIONS"] == {
        "value": 3,
        "source": "default",
        "field": "controller.policy.max_evictions",
    }
    assert settings["GPUYIELD_PRIORITY_CLASSES"]["field"] == "controller.priority_classes"
    assert settings["GPUYIELD_TOPIC_PARTITIONS"]["field"] == "topic_partitions"


def test_an_environment_variable_overrides_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_COOLDOWN_S", "900")
    monkeypatch.setenv("GPUYIELD_PRIORITY_CLASSES", "production=1000,research=100")
    settings = document()["settings"]
    assert settings["GPUYIELD_COOLDOWN_S"] == {
        "value": 900.0,
        "source": "env",
        "field": "controller.policy.cooldown_s",
    }
    assert settings["GPUYIELD_PRIORITY_CLASSES"]["value"] == {
        "production": 1000.0,
        "research": 100.0,
    }
    assert settings["GPUYIELD_ALPHA"]["source"] == "default"


def test_the_environment_wins_over_the_settings_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text("GPUYIELD_COOLDOWN_S=1200\nGPUYIELD_MAX_EVICTIONS=5\n")
    monkeypatch.setenv("GPUYIELD_COOLDOWN_S", "900")
    doc = document("--config", str(config))
    assert doc["config_file"] == str(config)
    settings = doc["settings"]
    assert settings["GPUYIELD_COOLDOWN_S"]["value"] == 900.0
    assert settings["GPUYIELD_COOLDOWN_S"]["source"] == "env"
    assert settings["GPUYIELD_MAX_EVICTIONS"]["value"] == 5
    assert settings["GPUYIELD_MAX_EVICTIONS"]["source"] == f"file:{config}"


def test_the_settings_file_may_come_from_gpuyield_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text("GPUYIELD_RACK_LABEL=example.com/rack\n")
    monkeypatch.setenv("GPUYIELD_CONFIG", str(config))
    settings = document()["settings"]
    assert settings["GPUYIELD_RACK_LABEL"] == {
        "value": "example.com/rack",
        "source": f"file:{config}",
        "field": "controller.rack_label",
    }


def test_the_table_shows_each_value_and_its_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text("GPUYIELD_RESERVATION_S=300\n")
    monkeypatch.setenv("GPUYIELD_ALPHA", "75")
    result = run("config", "--config", str(config))
    assert result.exit_code == 0, result.stderr
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if "GPUYIELD_" in line}
    assert rows["GPUYIELD_ALPHA"].split()[3:6:2] == ["75", "env"]
    assert rows["GPUYIELD_RESERVATION_S"].split()[3:6:2] == ["300", f"file:{config}"]
    assert rows["GPUYIELD_BETA"].split()[3:6:2] == ["800", "default"]


def test_the_sasl_password_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", "k1:9092")
    monkeypatch.setenv("GPUYIELD_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_USERNAME", "ops")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_PASSWORD", "hunter2-secret")
    table = run("config")
    doc = document()
    assert "hunter2-secret" not in table.stdout
    assert "hunter2-secret" not in json.dumps(doc)
    assert doc["settings"]["GPUYIELD_KAFKA_SASL_PASSWORD"] == {
        "value": "**********",
        "source": "env",
        "field": "kafka_sasl_password",
    }


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GPUYIELD_MAX_EVICTIONS", "many", "GPUYIELD_MAX_EVICTIONS: input should be a valid int"),
        ("GPUYIELD_ALPHA", "inf", "GPUYIELD_ALPHA: input should be a finite number"),
        ("GPUYIELD_BETA", "-1", "GPUYIELD_BETA: must be >= 0"),
        ("GPUYIELD_COOLDOWN_S", "-5", "GPUYIELD_COOLDOWN_S: input should be greater than or"),
        ("GPUYIELD_EVICTION_WINDOW_S", "0", "GPUYIELD_EVICTION_WINDOW_S: must be > 0"),
        ("GPUYIELD_NVLINK_LABEL", "nvidia.com/", "GPUYIELD_NVLINK_LABEL: 'nvidia.com/' is not a"),
        ("GPUYIELD_PRIORITY_CLASSES", "prod:1000", "GPUYIELD_PRIORITY_CLASSES: 'prod:1000' is not"),
        (
            "GPUYIELD_KUBE_EVENTS_SPARED",
            "-1",
            "GPUYIELD_KUBE_EVENTS_SPARED: input should be greater",
        ),
        ("GPUYIELD_HEARTBEAT_BATCH", "0", "GPUYIELD_HEARTBEAT_BATCH: input should be greater"),
    ],
)
def test_a_bad_value_is_exit_2_and_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = run("config")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"gpuyield: {expected}"), result.stderr


def test_a_bad_value_in_the_file_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text("GPUYIELD_RESERVATION_S=soon\n")
    result = run("config", "--config", str(config))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"gpuyield: {config}: GPUYIELD_RESERVATION_S: input should")


@pytest.mark.parametrize(
    "command",
    [
        ["worker"],
        ["node-agent", "--node", "n1"],
        ["watch"],
        ["status"],
        ["topics"],
        ["demo"],
        ["simulate", "--days", "0.01", "--policies", "gpuyield"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_that_reads_the_settings_rejects_a_bad_knob_at_start(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setenv("GPUYIELD_DEMAND_RETRY_S", "2000")  # above the backoff's 1800 s cap
    result = run(*command)
    assert result.exit_code == 2, result.stdout
    assert result.stderr == (
        "gpuyield: GPUYIELD_DEMAND_BACKOFF_MAX_S: 1800 is below demand_retry_s (2000), "
        "where the backoff starts\n"
    )


def test_the_console_script_fails_in_one_line_too(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYIELD_")}
    env["GPUYIELD_MAX_EVICTIONS"] = "-1"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("gpuyield")), "config", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "gpuyield: GPUYIELD_MAX_EVICTIONS: input should be greater than or equal to 0 (got -1)\n"
    )


def test_the_readme_lists_every_setting_as_the_model_has_it() -> None:
    table = settings_markdown()
    assert table.count("\n") == len(SETTING_NAMES) + 2
    assert table in README.read_text(encoding="utf-8"), (
        "README.md's settings table is stale; regenerate it with\n"
        '.venv/bin/python -c "from gpuyield.config_command import settings_markdown; '
        'print(settings_markdown())"'
    )
