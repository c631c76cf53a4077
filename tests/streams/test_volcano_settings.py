"""Where the worker's start-up check looks for Volcano's scheduler configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuyield.streams.settings import SettingsError, load_settings
from gpuyield.worker_command import volcano_conf_key


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("GPUYIELD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_by_default_it_reads_what_volcanos_helm_chart_installs() -> None:
    where = volcano_conf_key(load_settings())

    assert str(where) == (
        "ConfigMap volcano-system/volcano-scheduler-configmap (key volcano-scheduler.conf)"
    )


def test_another_release_is_found_through_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_VOLCANO_CONF_NAMESPACE", "batch-system")
    monkeypatch.setenv("GPUYIELD_VOLCANO_CONF_CONFIGMAP", "vc-scheduler-configmap")
    monkeypatch.setenv("GPUYIELD_VOLCANO_CONF_KEY", "scheduler.conf")

    where = volcano_conf_key(load_settings())

    assert (where.namespace, where.name, where.key) == (
        "batch-system",
        "vc-scheduler-configmap",
        "scheduler.conf",
    )


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GPUYIELD_VOLCANO_CONF_NAMESPACE", "Volcano_System", "is not a namespace name"),
        ("GPUYIELD_VOLCANO_CONF_CONFIGMAP", "volcano/scheduler", "is not a ConfigMap name"),
        ("GPUYIELD_VOLCANO_CONF_KEY", "volcano scheduler.conf", "is not a ConfigMap key"),
    ],
)
def test_a_name_kubernetes_would_refuse_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(SettingsError) as caught:
        load_settings()

    assert str(caught.value).startswith(f"{variable}: {value!r} {expected}"), caught.value
    assert "\n" not in str(caught.value)
