"""The edge of the Volcano check: one GET of one ConfigMap, every failure a value, never a raise."""

from __future__ import annotations

import socket
from pathlib import Path

import kubernetes.client
import kubernetes.config.kube_config as kube_config
import pytest
from fakes.kube_api import FakeKubeApi

from gpuyield.streams.volcano_config import (
    ConfigMapKey,
    ConfigMapText,
    ConfigMapUnreadable,
    Unreadable,
    kube_configuration,
    read_config_map_key,
)

WHERE = ConfigMapKey("volcano-system", "volcano-scheduler-configmap", "volcano-scheduler.conf")
CONF = 'actions: "enqueue, allocate, backfill"\n'


def scheduler_configmap(data: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": WHERE.name, "namespace": WHERE.namespace},
        "data": data,
    }


def test_the_value_comes_with_the_configmaps_version(kube_api: FakeKubeApi) -> None:
    stored = kube_api.create(scheduler_configmap({WHERE.key: CONF}))

    result = read_config_map_key(WHERE, kube_api.configuration())

    assert result == ConfigMapText(WHERE, CONF, stored["metadata"]["resourceVersion"])
    (request,) = kube_api.requests
    assert (request.method, request.path) == (
        "GET",
        "/api/v1/namespaces/volcano-system/configmaps/volcano-scheduler-configmap",
    )


def test_a_missing_configmap_is_not_found(kube_api: FakeKubeApi) -> None:
    result = read_config_map_key(WHERE, kube_api.configuration())

    assert isinstance(result, ConfigMapUnreadable)
    assert result.why is Unreadable.NOT_FOUND
    assert result.expected
    assert result.detail == (
        'HTTP 404 Not Found: configmaps "volcano-scheduler-configmap" not found'
    )


def test_a_denied_read_is_forbidden_with_rbacs_message(kube_api: FakeKubeApi) -> None:
    kube_api.create(scheduler_configmap({WHERE.key: CONF}))
    kube_api.forbid("get", "configmaps", namespace=WHERE.namespace, name=WHERE.name)

    result = read_config_map_key(WHERE, kube_api.configuration())

    assert isinstance(result, ConfigMapUnreadable)
    assert result.why is Unreadable.FORBIDDEN
    assert result.expected
    assert result.detail == (
        'HTTP 403 Forbidden: configmaps "volcano-scheduler-configmap" is forbidden: User '
        '"system:serviceaccount:gpuyield-system:gpuyield-worker" cannot get resource '
        '"configmaps" in API group "" in the namespace "volcano-system"'
    )


def test_a_denial_comes_before_the_lookup_as_in_kube_apiserver(kube_api: FakeKubeApi) -> None:
    kube_api.forbid("get", "configmaps")

    result = read_config_map_key(WHERE, kube_api.configuration())

    assert isinstance(result, ConfigMapUnreadable)
    assert result.why is Unreadable.FORBIDDEN


def test_a_configmap_without_the_key_says_which_keys_it_has(kube_api: FakeKubeApi) -> None:
    kube_api.create(scheduler_configmap({"scheduler.yaml": CONF}))

    result = read_config_map_key(WHERE, kube_api.configuration())

    assert isinstance(result, ConfigMapUnreadable)
    assert result.why is Unreadable.NO_KEY
    assert not result.expected
    assert result.detail == "no key 'volcano-scheduler.conf' (keys: scheduler.yaml)"


def test_a_server_error_is_a_failure_not_an_exception(kube_api: FakeKubeApi) -> None:
    kube_api.fail_next(status=503, verb="get")

    result = read_config_map_key(WHERE, kube_api.configuration())

    assert isinstance(result, ConfigMapUnreadable)
    assert result.why is Unreadable.FAILED
    assert not result.expected
    assert result.detail.startswith("HTTP 503")


def test_an_unreachable_server_is_a_failure_not_an_exception() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configuration = kubernetes.client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0

    result = read_config_map_key(WHERE, configuration, timeout_s=(1.0, 1.0))

    assert isinstance(result, ConfigMapUnreadable)
    assert result.why is Unreadable.FAILED


def test_without_a_cluster_to_ask_the_check_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))

    configuration = kube_configuration()
    result = read_config_map_key(WHERE, configuration)

    assert isinstance(configuration, str)
    assert isinstance(result, ConfigMapUnreadable)
    assert result.why is Unreadable.NO_KUBERNETES
    assert result.expected
