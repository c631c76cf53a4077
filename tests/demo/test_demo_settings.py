"""The demo's deployment is one ``Settings``: its worker reads it back, the caller's stay out."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyield.agents.demo.run import worker_env
from gpuyield.agents.demo.timing import demo_controller_config, demo_settings
from gpuyield.streams.settings import load_settings


def the_demos(tmp_path: Path) -> dict[str, str]:
    settings = demo_settings(
        bootstrap="127.0.0.1:19092",
        redis_url="redis://127.0.0.1:16379/0",
        state_dir=tmp_path / "worker",
        grace_s=20.0,
        app_id="gpuyield-demo",
        cluster_id="demo",
        partitions=4,
    )
    return worker_env(settings)


def test_the_worker_reads_back_the_demos_compressed_policy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = the_demos(tmp_path)
    for name in [n for n in env if n.startswith("GPUYIELD_")]:
        monkeypatch.setenv(name, env[name])
    settings = load_settings()
    assert settings.controller == demo_controller_config(20.0)
    assert settings.kafka_bootstrap == ["127.0.0.1:19092"]
    assert settings.kafka_session_timeout_s == 6  # the embedded broker's profile
    assert settings.topic_partitions == 4


def test_a_deployments_settings_do_not_reach_the_demos_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUYIELD_CONFIG", str(tmp_path / "production.env"))
    monkeypatch.setenv("GPUYIELD_COOLDOWN_S", "600")
    monkeypatch.setenv("GPUYIELD_TOPIC_PREFIX", "prod.")
    env = the_demos(tmp_path)
    assert "GPUYIELD_CONFIG" not in env
    assert float(env["GPUYIELD_COOLDOWN_S"]) == demo_controller_config(20.0).policy.cooldown_s
    assert env["GPUYIELD_TOPIC_PREFIX"] == ""
