"""Reading one key of one ConfigMap: the edge of the worker's start-up check of Volcano.

The worker reads Volcano's scheduler configuration once, when it starts
(``agents/worker/volcano_check.py`` decides what to make of it). Reading is
best effort: the worker must start whether or not it may read the ConfigMap,
so every way the read can go wrong comes back as a ``ConfigMapUnreadable``
saying why, never as an exception. The cluster is found the way ``gpuyield
watch`` finds it (``load_kube_configuration``: in-cluster, then the kubeconfig);
with neither, the check is off.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from enum import StrEnum

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpuyield.streams.kube_resources import load_kube_configuration

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ConfigMapKey:
    """Which value to read: ``data[key]`` of ConfigMap ``namespace/name``."""

    namespace: str
    name: str
    key: str

    @property
    def configmap(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"ConfigMap {self.configmap} (key {self.key})"


@dataclass(frozen=True, slots=True)
class ConfigMapText:
    where: ConfigMapKey
    text: str
    resource_version: str


class Unreadable(StrEnum):
    """Why the value could not be read; the first three are expected in some deployments."""

    NO_KUBERNETES = "no-kubernetes"  # no in-cluster account, no kubeconfig
    FORBIDDEN = "forbidden"  # HTTP 403: RBAC does not grant get on it
    NOT_FOUND = "not-found"  # HTTP 404: no such ConfigMap (or namespace)
    NO_KEY = "no-key"  # the ConfigMap exists but holds no such key
    FAILED = "failed"  # anything else: unreachable server, 5xx, a bad answer


EXPECTED = frozenset({Unreadable.NO_KUBERNETES, Unreadable.FORBIDDEN, Unreadable.NOT_FOUND})
"""Reasons that only mean the check does not apply here (logged at info level)."""


@dataclass(frozen=True, slots=True)
class ConfigMapUnreadable:
    where: ConfigMapKey
    why: Unreadable
    detail: str
    """One line: the server's message, or what failed."""

    @property
    def expected(self) -> bool:
        return self.why in EXPECTED


ConfigMapRead = ConfigMapText | ConfigMapUnreadable


def kube_configuration(
    kubeconfig: str | None = None, context: str | None = None
) -> kubernetes.client.Configuration | str:
    """The cluster's client configuration, or why there is none (one line).

    One retry instead of urllib3's three: an API server that does not answer
    must not hold the worker's start (or ``gpuyield doctor``) for long.
    """
    try:
        configuration = load_kube_configuration(kubeconfig, context)
    except (ConfigException, OSError, ValueError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    configuration.retries = 1
    return configuration


def read_config_map_key(
    where: ConfigMapKey,
    configuration: kubernetes.client.Configuration | str,
    *,
    timeout_s: tuple[float, float] = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
) -> ConfigMapRead:
    """``GET /api/v1/namespaces/{ns}/configmaps/{name}``, then ``data[key]``.

    ``configuration`` is what ``kube_configuration`` returned: a string says
    why there is no cluster to ask.
    """
    if isinstance(configuration, str):
        return ConfigMapUnreadable(where, Unreadable.NO_KUBERNETES, configuration)
    try:
        with kubernetes.client.ApiClient(configuration) as client:
            configmap = kubernetes.client.CoreV1Api(client).read_namespaced_config_map(
                where.name, where.namespace, _request_timeout=timeout_s
            )
    except ApiException as exc:
        why = {403: Unreadable.FORBIDDEN, 404: Unreadable.NOT_FOUND}.get(
            exc.status or 0, Unreadable.FAILED
        )
        return ConfigMapUnreadable(where, why, api_message(exc))
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        return ConfigMapUnreadable(where, Unreadable.FAILED, f"{type(exc).__name__}: {exc}")
    data = configmap.data or {}
    version = configmap.metadata.resource_version if configmap.metadata else None
    if where.key not in data:
        keys = ", ".join(sorted(data)) or "none"
        return ConfigMapUnreadable(where, Unreadable.NO_KEY, f"no key {where.key!r} (keys: {keys})")
    return ConfigMapText(where, data[where.key], str(version or ""))


def api_message(exc: ApiException) -> str:
    """``HTTP 403 Forbidden: <the Status message>``, the message being what RBAC says."""
    message = ""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except ValueError:
        message = ""
    head = f"HTTP {exc.status} {exc.reason}"
    return f"{head}: {message}" if message else head
