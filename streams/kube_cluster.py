"""The cluster as ``kubectl get nodes,pods,queues,podgroups,vcjob -A -o json`` shows it, read live.

``gpuyield doctor`` without a dump reads the cluster itself: one consistent,
paginated LIST of each resource ``gpuyield watch`` watches (the same
``ResourceClient`` and ``list_all``, so what doctor reads is what the
controller reads), cluster-wide, each item with its kind and apiVersion as in
a dump. Volcano's scheduler ConfigMap is read apart (``volcano_config``): it
may be missing or forbidden without the rest being unreadable.

Any failure is a ``ClusterUnreadable`` with one line saying what could not be
read and why (unreachable server, 403 with RBAC's message, a Volcano CRD the
server does not serve), so the command can exit 2 without a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from gpuyield.streams.kube_resources import ALL_RESOURCES, Object, ResourceClient, list_all
from gpuyield.streams.volcano_config import api_message

CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ListSettings:
    """How doctor lists: pages as the watch's, and no waiting long on a dead server."""

    page_size: int = 500
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    """An API server that does not answer is reported after this (twice: one retry)."""
    timeout_s: float = 60.0
    """To read each LIST page."""
    restarts: int = 3
    """Expired continue tokens in a row that start a list over."""


class ClusterUnreadable(Exception):
    """The cluster could not be read; the message is one line naming what and why."""


def read_cluster(
    configuration: kubernetes.client.Configuration, settings: ListSettings | None = None
) -> list[Object]:
    """Every node, pod, Volcano Job, PodGroup and Queue, each with its kind and apiVersion."""
    settings = settings or ListSettings()
    where = configuration.host
    objects: list[Object] = []
    with kubernetes.client.ApiClient(configuration) as api_client:
        for resource in ALL_RESOURCES:
            client = ResourceClient(api_client, resource)
            what = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            try:
                items, _ = list_all(
                    client,
                    page_size=settings.page_size,
                    timeout_s=(settings.connect_timeout_s, settings.timeout_s),
                    restarts=settings.restarts,
                )
            except ApiException as exc:
                hint = ""
                if exc.status == 404 and resource.group:
                    hint = f" (is Volcano installed? the API serves no {resource.api_version})"
                raise ClusterUnreadable(
                    f"cannot list {what} at {where}: {api_message(exc)}{hint}"
                ) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise ClusterUnreadable(
                    f"cannot reach the Kubernetes API at {where}: {_reason(exc)}"
                ) from None
            except ValueError as exc:  # not JSON, or a list without its version
                raise ClusterUnreadable(f"cannot list {what} at {where}: {exc}") from None
            objects.extend(resource.with_kind(item) for item in items if isinstance(item, dict))
    return objects


def _reason(exc: BaseException) -> str:
    """The innermost reason urllib3 gives (``MaxRetryError`` wraps the connection's)."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        return _reason(reason)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
