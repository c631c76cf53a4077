"""What gpuyield watches, and the raw LIST and WATCH calls that fetch it.

The official client's typed models are skipped on purpose: a pod deserialised
into ``V1Pod`` and dumped back costs more than the watch itself, drops fields
the client's version does not know, and the wire model keeps objects "as the
API serves them" anyway. So every call asks for the undecoded response
(``_preload_content=False``) and the JSON is parsed here, the same way for
built-in kinds and for Volcano's custom resources.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException

from gpuyield.schemas.messages import KubeKind

logger = logging.getLogger(__name__)

Object = dict[str, Any]
Timeout = float | tuple[float, float]
"""A request's timeout: in all, or (to connect, to read), as the client takes it."""


@dataclass(frozen=True, slots=True)
class WatchedResource:
    """One API resource: its kind on the wire and where the API serves it."""

    kind: KubeKind
    group: str  # "" for the core API
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def with_kind(self, obj: Object) -> Object:
        """``obj`` with its kind and apiVersion (built-in lists leave them out of items)."""
        return {"apiVersion": self.api_version, "kind": self.kind.value, **obj}


NODES = WatchedResource(KubeKind.NODE, "", "v1", "nodes", namespaced=False)
PODS = WatchedResource(KubeKind.POD, "", "v1", "pods", namespaced=True)
VOLCANO_JOBS = WatchedResource(KubeKind.JOB, "batch.volcano.sh", "v1alpha1", "jobs", True)
POD_GROUPS = WatchedResource(
    KubeKind.POD_GROUP, "scheduling.volcano.sh", "v1beta1", "podgroups", namespaced=True
)
QUEUES = WatchedResource(
    KubeKind.QUEUE, "scheduling.volcano.sh", "v1beta1", "queues", namespaced=False
)
ALL_RESOURCES: tuple[WatchedResource, ...] = (NODES, PODS, VOLCANO_JOBS, POD_GROUPS, QUEUES)


class ResourceClient:
    """LIST and WATCH of one resource in one scope (a namespace, or all of them)."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        resource: WatchedResource,
        namespace: str | None = None,
    ) -> None:
        self.resource = resource
        self.namespace = namespace if resource.namespaced else None
        self._call = _list_function(api_client, resource, self.namespace)

    @property
    def name(self) -> str:
        scope = f" in {self.namespace}" if self.namespace else ""
        return f"{self.resource.plural}{scope}"

    def list_page(
        self, *, limit: int, continue_token: str | None, timeout_s: Timeout
    ) -> dict[str, Any]:
        """One page of a consistent list; ``metadata.continue`` says whether more follow."""
        kwargs: dict[str, Any] = {"limit": limit, "_request_timeout": timeout_s}
        if continue_token:
            kwargs["_continue"] = continue_token
        response = self._call(_preload_content=False, **kwargs)
        try:
            page = json.loads(response.data)
        finally:
            response.release_conn()
        if not isinstance(page, dict):
            raise ValueError(f"a {self.resource.plural} list that is not an object")
        return page

    def open_watch(
        self,
        *,
        resource_version: str,
        timeout_seconds: int,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> urllib3.HTTPResponse:
        """Start a watch after ``resource_version``; the caller reads and closes the stream.

        ``timeout_seconds`` asks the server to end the stream cleanly; the read
        timeout catches a connection that died without the server noticing.
        """
        response = self._call(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=(connect_timeout_s, read_timeout_s),
        )
        assert isinstance(response, urllib3.HTTPResponse)
        return response


def list_all(
    client: ResourceClient,
    *,
    page_size: int,
    timeout_s: Timeout,
    restarts: int,
    between_pages: Callable[[], None] = lambda: None,
) -> tuple[list[Object], str]:
    """All pages of one consistent list, and the version it was taken at.

    An expired continue token (HTTP 410 after the first page) starts the list
    over, up to ``restarts`` times in a row; then, like any other failure, the
    ``ApiException`` is the caller's. ``between_pages`` may raise to stop.
    """
    attempts = 0
    while True:
        items: list[Object] = []
        token: str | None = None
        try:
            while True:
                page = client.list_page(limit=page_size, continue_token=token, timeout_s=timeout_s)
                items.extend(page.get("items") or ())
                metadata = page.get("metadata") or {}
                token = metadata.get("continue") or None
                if token is None:
                    version = str(metadata.get("resourceVersion") or "")
                    if not version:
                        raise ValueError(f"a {client.name} list without a resourceVersion")
                    return items, version
                between_pages()
        except ApiException as exc:
            if exc.status != 410 or token is None or attempts >= restarts:
                raise
            attempts += 1
            logger.info(
                "%s: the list's continue token expired after %d objects; listing again",
                client.name,
                len(items),
            )


def _list_function(
    api_client: kubernetes.client.ApiClient, resource: WatchedResource, namespace: str | None
) -> Callable[..., Any]:
    """The generated client method that lists (or, with ``watch=True``, watches) ``resource``."""
    if not resource.group:
        core = kubernetes.client.CoreV1Api(api_client)
        if not resource.namespaced:
            return getattr(core, f"list_{resource.plural[:-1]}")  # type: ignore[no-any-return]
        if namespace is None:
            return getattr(core, f"list_{resource.plural[:-1]}_for_all_namespaces")  # type: ignore[no-any-return]
        return lambda **kw: getattr(core, f"list_namespaced_{resource.plural[:-1]}")(
            namespace, **kw
        )
    custom = kubernetes.client.CustomObjectsApi(api_client)
    where = (resource.group, resource.version)
    if namespace is None:
        return lambda **kw: custom.list_cluster_custom_object(*where, resource.plural, **kw)
    return lambda **kw: custom.list_namespaced_custom_object(
        *where, namespace, resource.plural, **kw
    )


def load_kube_configuration(
    kubeconfig: str | None = None, context: str | None = None
) -> kubernetes.client.Configuration:
    """The API server's address and credentials: in-cluster first, then a kubeconfig.

    In a pod the service account is the right identity; on a laptop the
    kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``) is. Naming a kubeconfig
    or a context means the caller wants that one, so in-cluster is not tried.
    """
    configuration = kubernetes.client.Configuration()
    if kubeconfig is None and context is None:
        try:
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except kubernetes.config.ConfigException as exc:
            logger.debug("not in a cluster (%s); trying the kubeconfig", exc)
        else:
            logger.info("using the in-cluster service account for %s", configuration.host)
            return configuration
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig,
        context=context,
        client_configuration=configuration,
        persist_config=False,
    )
    logger.info("using the kubeconfig for %s", configuration.host)
    return configuration
