"""The source finds its cluster: in-cluster first, then the kubeconfig."""

from __future__ import annotations

from pathlib import Path

import kubernetes.client
import kubernetes.config.incluster_config as incluster
import kubernetes.config.kube_config as kube_config
import pytest

from gpuyield.streams.kube_resources import load_kube_configuration

KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: laptop
clusters:
- name: laptop
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
- name: prod
  cluster: {server: "https://prod.example:6443", insecure-skip-tls-verify: true}
users:
- name: me
  user: {token: "secret-token"}
contexts:
- name: laptop
  context: {cluster: laptop, user: me}
- name: prod
  context: {cluster: prod, user: me}
"""


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    return path


@pytest.fixture
def outside_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)


@pytest.mark.usefixtures("outside_a_cluster")
def test_outside_a_cluster_the_default_kubeconfig_and_its_current_context_are_used(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))

    configuration = load_kube_configuration()

    assert configuration.host == "https://127.0.0.1:6443"
    assert _authorization(configuration) == "Bearer secret-token"


def test_a_named_kubeconfig_and_context_win(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _pretend_to_run_in_a_pod(monkeypatch, tmp_path)

    configuration = load_kube_configuration(str(kubeconfig), "prod")

    assert configuration.host == "https://prod.example:6443"


def test_in_a_pod_the_service_account_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _pretend_to_run_in_a_pod(monkeypatch, tmp_path)

    configuration = load_kube_configuration()

    assert configuration.host == "https://10.96.0.1:443"
    assert _authorization(configuration) == "bearer pod-token"


def _authorization(configuration: kubernetes.client.Configuration) -> str:
    """The Authorization header the client will send."""
    return str(configuration.auth_settings()["BearerToken"]["value"])


def _pretend_to_run_in_a_pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("pod-token")
    ca.write_text("not checked until a request is made")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(ca))
