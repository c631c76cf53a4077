"""A fake Kubernetes API server that speaks the real HTTP protocol.

The official client is the code under test's only way to the cluster, so the
fake sits behind a real socket and answers what kube-apiserver answers for the
five resources gpuyield watches (nodes, pods, Volcano jobs, podgroups and
queues): paginated LISTs with continue tokens and ``remainingItemCount``;
WATCH streams of chunked JSON lines that resume after a ``resourceVersion``
from a bounded history, send BOOKMARKs when asked to, end after
``timeoutSeconds``, and answer a compacted version with an ``ERROR`` event of
code 410 (the real server's answer on a watch; an expired continue token is an
HTTP 410). It also serves ConfigMaps (the worker GETs Volcano's scheduler
configuration) and answers 403 with RBAC's Status for what a test denied
(``forbid``). The storage rules live in ``kube_store``.

Clients may write too: PATCH (strategic merge, merge and JSON patches,
``kube_patch``) and PUT of a named object, with the registry's update rules
(``kube_rules``: resourceVersion conflicts, the pod-update validation, node
taints), each write a new version and a MODIFIED event. Discovery
(``kube_discovery``) and ``labelSelector`` on lists and watches are served, so kubectl
works against it.

Tests drive it from their own thread: writes (``create``/``replace``/
``modify``/``delete``) and controls (``compact``, ``drop_watches``,
``end_watches``, ``send_bookmarks``, ``fail_next``, ``after_list_page``,
``forbid``, ``uninstall``, ``before_write``) run on the server's loop and return once
done, so a test never races the server. Every request is recorded, so a test
can check what the client asked for::

    with FakeKubeApi() as api:
        api.create(a_gpu_node("n1"))
        client = kubernetes.client.ApiClient(api.configuration())
        ...
        assert api.watch_requests("nodes")[-1].resource_version == "1001"
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import kubernetes.client
from aiohttp import web
from fakes.kube_discovery import discovery
from fakes.kube_patch import PatchError, apply_patch
from fakes.kube_rules import BadRequest, Conflict, Invalid, check_event, prepare_update
from fakes.kube_store import (
    CREATABLE,
    RESOURCE_TYPES,
    Change,
    ContinueToken,
    Expired,
    Key,
    KubeStore,
    Object,
    ResourceType,
    key_of,
    label_selector,
    resource_of,
)

T = TypeVar("T")

REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token "
    "in this response to retrieve the remainder of the results."
)


def status_object(code: int, message: str, reason: str | None = None) -> Object:
    """A ``metav1.Status`` failure, as the server sends it in error bodies and ERROR events."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }


def _invalid_response(exc: Invalid, group: str) -> web.Response:
    """422 Invalid, with the field that is wrong as the API server's Status names it."""
    return _status_response(
        422,
        str(exc),
        details={
            "name": exc.name,
            "group": group,
            "kind": exc.kind,
            "causes": [{"reason": exc.reason, "message": exc.detail, "field": exc.field}],
        },
    )


def _status_response(
    code: int, message: str, reason: str | None = None, details: Object | None = None
) -> web.Response:
    body = status_object(code, message, reason)
    if details is not None:
        body["details"] = details
    return web.json_response(body, status=code)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fake received, parsed."""

    method: str
    path: str
    query: dict[str, str]
    verb: str  # list, watch, get, patch, update, discovery or unknown
    plural: str | None
    namespace: str | None

    @property
    def resource_version(self) -> str | None:
        return self.query.get("resourceVersion")

    @property
    def continue_token(self) -> str | None:
        return self.query.get("continue")

    content_type: str = ""
    body: Any = None
    """A write's decoded JSON body."""


@dataclass(frozen=True, slots=True)
class _Route:
    resource: ResourceType
    namespace: str | None
    name: str | None


@dataclass(frozen=True, slots=True)
class _Bookmark:
    resource_version: int


class _End:
    """The stream ends cleanly (``end_watches``, or the server is shutting down)."""


class _Drop:
    """The connection was cut; the handler just leaves."""


_Item = tuple[str, Object] | _Bookmark | _End | _Drop


@dataclass(eq=False)
class _OpenWatch:
    route: _Route
    bookmarks: bool
    request: web.Request
    queue: asyncio.Queue[_Item] = field(default_factory=asyncio.Queue)
    selected: Callable[[Object], bool] = field(default=lambda _: True)

    def offer(self, change: Change) -> None:
        """Queue ``change`` as this watch sees it through its label selector.

        As the watch cache does: an object that starts matching is ADDED, one
        that stops matching is DELETED (its new state), others pass as they are.
        """
        now = self.selected(change.object)
        before = change.previous is not None and self.selected(change.previous)
        if change.type == "MODIFIED" and now != before:
            self.queue.put_nowait(("ADDED" if now else "DELETED", change.object))
        elif now or (change.type == "DELETED" and before):
            self.queue.put_nowait((change.type, change.object))


@dataclass(frozen=True, slots=True)
class _Denial:
    verb: str
    plural: str
    namespace: str | None
    name: str | None
    user: str


@dataclass(frozen=True, slots=True)
class _Failure:
    status: int
    verb: str | None


def parse_path(path: str) -> _Route | None:
    """Map a request path to a resource, the way the API server's routes do."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 2:
        return None
    for resource in RESOURCE_TYPES:
        if (resource.group, resource.version, resource.plural) == (group, version, rest[0]):
            break
    else:
        return None
    name = rest[1] if len(rest) == 2 else None
    if namespace is not None and not resource.namespaced:
        return None
    if name is not None and resource.namespaced and namespace is None:
        return None
    return _Route(resource, namespace, name)


def write_kubeconfig(path: Path, server: str, *, user: str = "gpuyield") -> Path:
    """A kubeconfig whose current context is ``server``, with a token nobody checks."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: {user}, user: {{token: not-checked}}}}]\n"
        f"contexts: [{{name: fake, context: {{cluster: fake, user: {user}}}}}]\n"
        "current-context: fake\n",
        encoding="utf-8",
    )
    return path


def _truthy(value: str | None) -> bool:
    return value in ("true", "True", "1")


class FakeKubeApi:
    """The fake server: start it, point a ``Configuration`` at it, script the cluster."""

    def __init__(
        self,
        *,
        history_limit: int = 1000,
        bookmark_interval_s: float | None = None,
        watch_timeout_s: float = 60.0,
    ) -> None:
        """``bookmark_interval_s``: None sends bookmarks only on ``send_bookmarks()``.

        ``watch_timeout_s`` ends watches that ask for no ``timeoutSeconds``
        (the real server picks 30-60 minutes).
        """
        self.store = KubeStore(history_limit=history_limit)
        self._bookmark_interval_s = bookmark_interval_s
        self._watch_timeout_s = watch_timeout_s
        self._watches: set[_OpenWatch] = set()
        self._requests: list[RecordedRequest] = []
        self._failures: list[_Failure] = []
        self._forbidden: list[_Denial] = []
        self._absent_groups: frozenset[str] = frozenset()
        self._list_hooks: list[Callable[[RecordedRequest], None]] = []
        self._write_hooks: list[Callable[[RecordedRequest], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port = 0
        self.store.subscribe(self._fan_out)

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> Self:
        ready = threading.Event()
        errors: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, errors), name="fake-kube-api", daemon=True
        )
        self._thread.start()
        if not ready.wait(10) or errors:
            raise RuntimeError(f"the fake API server did not start: {errors}")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def configuration(self) -> kubernetes.client.Configuration:
        """A client configuration pointing at this server (no TLS, no auth)."""
        return kubernetes.client.Configuration(host=self.url)

    # -- the cluster, for tests ---------------------------------------------

    def create(self, obj: Object) -> Object:
        """Store a new object; returns it as stored (uid, resourceVersion, timestamps)."""
        return self._call(lambda: self.store.create(obj))

    def replace(self, obj: Object) -> Object:
        return self._call(lambda: self.store.replace(obj))

    def modify(self, obj: Object, change: Callable[[Object], None]) -> Object:
        """Read the stored object ``obj`` names, let ``change`` edit it, write it back."""

        def apply() -> Object:
            resource = resource_of(obj["apiVersion"], obj["kind"])
            current = self.store.get(resource, key_of(resource, obj))
            if current is None:
                raise KeyError(f"{resource.kind} {key_of(resource, obj)} does not exist")
            change(current)
            return self.store.replace(current)

        return self._call(apply)

    def delete(self, obj: Object) -> Object:
        """Delete the stored object ``obj`` names; returns its final state."""

        def apply() -> Object:
            resource = resource_of(obj["apiVersion"], obj["kind"])
            return self.store.delete(resource, key_of(resource, obj))

        return self._call(apply)

    def get(self, obj: Object) -> Object | None:
        def read() -> Object | None:
            resource = resource_of(obj["apiVersion"], obj["kind"])
            return self.store.get(resource, key_of(resource, obj))

        return self._call(read)

    @property
    def resource_version(self) -> int:
        return self._call(lambda: self.store.resource_version)

    # -- controls -----------------------------------------------------------

    def compact(self) -> None:
        """Forget the history: resuming a watch or a list from an older version gets 410."""
        self._call(self.store.compact)

    def drop_watches(self) -> int:
        """Cut every open watch connection abruptly (no final chunk); returns how many."""

        def drop() -> int:
            for watch in list(self._watches):
                transport = watch.request.transport
                if transport is not None:
                    transport.abort()
                watch.queue.put_nowait(_Drop())
            count = len(self._watches)
            self._watches.clear()
            return count

        return self._call(drop)

    def end_watches(self) -> int:
        """End every open watch cleanly, after what is queued (as ``timeoutSeconds`` does)."""

        def end() -> int:
            for watch in self._watches:
                watch.queue.put_nowait(_End())
            return len(self._watches)

        return self._call(end)

    def send_bookmarks(self) -> int:
        """Queue a BOOKMARK at the current version on every watch that allows them."""

        def send() -> int:
            marker = _Bookmark(self.store.resource_version)
            targets = [w for w in self._watches if w.bookmarks]
            for watch in targets:
                watch.queue.put_nowait(marker)
            return len(targets)

        return self._call(send)

    def fail_next(self, count: int = 1, *, status: int = 500, verb: str | None = None) -> None:
        """Answer the next ``count`` requests (of ``verb``, if given) with an error status."""
        self._call(lambda: self._failures.extend([_Failure(status, verb)] * count))

    def after_list_page(self, hook: Callable[[RecordedRequest], None]) -> None:
        """Run ``hook`` on the server's loop after each LIST page is computed.

        The hook may call this object's methods (they run inline there), e.g.
        to write and compact between two pages of a paginated list.
        """
        self._call(lambda: self._list_hooks.append(hook))

    def before_write(self, hook: Callable[[RecordedRequest], None]) -> None:
        """Run ``hook`` on the server's loop before each PATCH or PUT is applied.

        The hook may write (``modify``...), e.g. to change the object between
        a client's read and its write, as another controller would.
        """
        self._call(lambda: self._write_hooks.append(hook))

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop, e.g. to read ``store`` consistently."""
        return self._call(fn)

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._call(lambda: list(self._requests))

    def list_requests(self, plural: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.verb == "list" and r.plural == plural]

    def watch_requests(self, plural: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.verb == "watch" and r.plural == plural]

    def open_watches(self, plural: str | None = None) -> int:
        def count() -> int:
            return sum(
                1 for w in self._watches if plural is None or w.route.resource.plural == plural
            )

        return self._call(count)

    def uninstall(self, group: str) -> None:
        """Serve nothing of API group ``group`` from now on, as a cluster without its CRDs:
        its paths answer 404 (``the server could not find the requested resource``) and
        discovery leaves the group out."""
        self._absent_groups = self._absent_groups | {group}

    def write_kubeconfig(self, path: Path, *, user: str = "gpuyield") -> Path:
        """A kubeconfig whose current context points at this server (the token is not checked)."""
        return write_kubeconfig(path, self.url, user=user)

    # -- RBAC denials ---------------------------------------------------------

    def forbid(
        self,
        verb: str,
        plural: str,
        *,
        namespace: str | None = None,
        name: str | None = None,
        user: str = "system:serviceaccount:gpuyield-system:gpuyield-worker",
    ) -> None:
        """Deny ``verb`` on ``plural`` (in ``namespace``, of ``name``; None: any) from now on.

        Authorization comes before everything else, as in kube-apiserver: a
        denied GET of an object that does not exist is a 403, not a 404. The
        answer is the Status RBAC's authorizer sends.
        """
        self._call(lambda: self._forbidden.append(_Denial(verb, plural, namespace, name, user)))

    def _denied(self, route: _Route, verb: str) -> web.Response | None:
        for denial in self._forbidden:
            if (denial.verb, denial.plural) == (verb, route.resource.plural) and (
                denial.namespace in (None, route.namespace) and denial.name in (None, route.name)
            ):
                resource = route.resource
                what = f'{resource.plural} "{route.name}"' if route.name else resource.plural
                where = (
                    f' in the namespace "{route.namespace}"'
                    if route.namespace
                    else " at the cluster scope"
                )
                message = (
                    f'{what} is forbidden: User "{denial.user}" cannot {verb} resource '
                    f'"{resource.plural}" in API group "{resource.group}"{where}'
                )
                body = status_object(403, message)
                body["details"] = {
                    "kind": resource.plural,
                    **({"name": route.name} if route.name else {}),
                }
                return web.json_response(body, status=403)
        return None

    # -- the server ---------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (inline when already there) and return its result."""
        if self._loop is None or threading.current_thread() is self._thread:
            return fn()

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _serve(self, ready: threading.Event, errors: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._start_server())
        except BaseException as exc:  # reported to start()
            errors.append(exc)
            ready.set()
            loop.close()
            return
        self._loop = loop
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _start_server(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        for watch in list(self._watches):
            watch.queue.put_nowait(_End())
        if self._runner is not None:
            await self._runner.cleanup()

    def _fan_out(self, change: Change) -> None:
        for watch in self._watches:
            route = watch.route
            if change.resource is route.resource and (
                route.namespace is None or change.key.startswith(f"{route.namespace}/")
            ):
                watch.offer(change)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = parse_path(request.path)
        if route is not None and route.resource.group in self._absent_groups:
            route = None  # its CRDs are not installed: no such route
        query = dict(request.query)
        absent = self._absent_groups
        served = discovery(request.path, self.url, absent) if request.method == "GET" else None
        if served is not None:
            verb = "discovery"
        elif route is None:
            verb = "unknown"
        elif route.name is not None:
            verb = {"PATCH": "patch", "PUT": "update"}.get(request.method, "get")
        elif request.method == "POST":
            verb = "create"
        else:
            verb = "watch" if _truthy(query.get("watch")) else "list"
        content_type = request.headers.get("Content-Type", "")
        body: Any = None
        if request.method in ("PATCH", "PUT", "POST"):
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = _NOT_JSON
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query=query,
            verb=verb,
            plural=route.resource.plural if route else None,
            namespace=route.namespace if route else None,
            content_type=content_type,
            body=None if body is _NOT_JSON else body,
        )
        self._requests.append(recorded)
        if served is not None:
            return web.json_response(served)
        if route is None:
            return _status_response(404, "the server could not find the requested resource")
        if (denied := self._denied(route, verb)) is not None:
            return denied
        if route.name is not None:
            allowed: tuple[str, ...] = ("GET", "PATCH", "PUT")
        elif route.resource.plural in CREATABLE:
            allowed = ("GET", "POST")
        else:
            allowed = ("GET",)
        if request.method not in allowed:
            return _status_response(
                405, f"the fake serves {', '.join(allowed)} here, not {request.method}"
            )
        for failure in self._failures:
            if failure.verb in (None, verb):
                self._failures.remove(failure)
                return _status_response(failure.status, f"injected failure ({failure.status})")
        if body is _NOT_JSON:
            return _status_response(400, "the request body is not JSON")
        if verb in ("patch", "update", "create"):
            for hook in list(self._write_hooks):
                hook(recorded)
        if verb == "create":
            return self._create(route, body)
        if verb == "patch":
            return self._patch(route, content_type, body)
        if verb == "update":
            return self._update(route, body)
        if verb == "get":
            return self._get(route)
        if verb == "list":
            return self._list(route, recorded)
        return await self._watch(route, query, request)

    def _create(self, route: _Route, body: Any) -> web.Response:
        """POST to a collection: a new object, 201; 409 AlreadyExists; 400/422 as the server."""
        resource = route.resource
        if not isinstance(body, dict):
            return _status_response(400, "the request body is not an object")
        if body.get("apiVersion") != resource.api_version or body.get("kind") != resource.kind:
            return _status_response(
                400,
                f"the API version in the data ({body.get('apiVersion')}) and kind "
                f"({body.get('kind')}) do not match {resource.api_version} {resource.kind}",
            )
        meta = body.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            return _status_response(
                422, f"{resource.kind} is invalid: metadata.name: Required value"
            )
        if meta.get("namespace") not in (None, route.namespace):
            return _status_response(
                400,
                "the namespace of the provided object does not match the namespace sent on the "
                "request",
            )
        name = str(meta["name"])
        namespace = route.namespace or ""
        try:
            if resource.plural == "events":
                check_event(name, namespace, body)
        except Invalid as exc:
            return _invalid_response(exc, resource.group)
        new = {**body, "metadata": {**meta, "namespace": namespace}}
        new["metadata"].pop("resourceVersion", None)
        try:
            stored = self.store.create(new)
        except ValueError:
            return _status_response(
                409,
                f'{resource.plural}{_group_suffix(resource)} "{name}" already exists',
                reason="AlreadyExists",
                details={"name": name, "group": resource.group, "kind": resource.plural},
            )
        return web.json_response(stored, status=201)

    def _patch(self, route: _Route, content_type: str, patch: Any) -> web.Response:
        """PATCH: the patch applied to the stored object, then stored as an update is."""
        current = self._stored(route)
        if current is None:
            return self._not_found(route)
        resource = route.resource
        try:
            patched = apply_patch(content_type, resource.kind, resource.builtin, current, patch)
        except PatchError as exc:
            return _status_response(exc.status, str(exc))
        if not isinstance(patched, dict):
            return _status_response(422, "the patched document is not an object")
        return self._store_update(route, current, patched)

    def _update(self, route: _Route, body: Any) -> web.Response:
        """PUT: the body replaces the object (its resourceVersion, if any, must be current)."""
        current = self._stored(route)
        if current is None:
            return self._not_found(route)
        if not isinstance(body, dict):
            return _status_response(400, "the request body is not an object")
        return self._store_update(route, current, body)

    def _store_update(self, route: _Route, current: Object, updated: Object) -> web.Response:
        assert route.name is not None
        resource = route.resource
        try:
            stored = prepare_update(resource.kind, route.name, current, updated)
        except BadRequest as exc:
            return _status_response(400, str(exc))
        except Conflict:
            return _status_response(
                409,
                f"Operation cannot be fulfilled on {resource.plural}{_group_suffix(resource)} "
                f'"{route.name}": the object has been modified; please apply your changes to '
                "the latest version and try again",
                details={"name": route.name, "group": resource.group, "kind": resource.plural},
            )
        except Invalid as exc:
            return _invalid_response(exc, resource.group)
        if stored == current:
            return web.json_response(current)  # a no-op write changes no version
        return web.json_response(self.store.replace(stored))

    def _stored(self, route: _Route) -> Object | None:
        assert route.name is not None
        key: Key = f"{route.namespace}/{route.name}" if route.namespace else route.name
        return self.store.get(route.resource, key)

    def _not_found(self, route: _Route) -> web.Response:
        resource = route.resource
        return _status_response(
            404,
            f'{resource.plural}{_group_suffix(resource)} "{route.name}" not found',
            details={"name": route.name, "group": resource.group, "kind": resource.plural},
        )

    def _get(self, route: _Route) -> web.Response:
        assert route.name is not None
        key: Key = f"{route.namespace}/{route.name}" if route.namespace else route.name
        obj = self.store.get(route.resource, key)
        if obj is None:
            kind = route.resource.plural
            return _status_response(404, f'{kind} "{route.name}" not found')
        return web.json_response(obj)

    def _list(self, route: _Route, recorded: RecordedRequest) -> web.Response:
        query = recorded.query
        resource = route.resource
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        start: Key = ""
        try:
            if token:
                try:
                    parsed = ContinueToken.decode(token)
                except (ValueError, KeyError):
                    return _status_response(400, "continue key is not valid")
                self.store.check_available(parsed.resource_version)
                at, start = parsed.resource_version, parsed.start
            else:
                at = self._list_version(query)
            selected = label_selector(query.get("labelSelector") or "")
            items = [
                (k, o)
                for k, o in self.store.snapshot(resource, route.namespace, at)
                if k >= start and selected(o)
            ]
        except ValueError as exc:
            return _status_response(400, f"unable to parse requirement: {exc}")
        except Expired as exc:
            return _status_response(410, CONTINUE_EXPIRED if token else str(exc))
        except _TooLarge as exc:
            return _status_response(504, str(exc))
        page = items[:limit] if limit else items
        metadata: dict[str, Any] = {"resourceVersion": str(at)}
        if limit and len(items) > limit:
            metadata["continue"] = ContinueToken(at, page[-1][0] + "\x00").encode()
            if not query.get("labelSelector"):  # the real server cannot count past a filter
                metadata["remainingItemCount"] = len(items) - limit
        if resource.builtin:
            for _, obj in page:
                obj.pop("kind", None)
                obj.pop("apiVersion", None)
        body = {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": [obj for _, obj in page],
        }
        for hook in list(self._list_hooks):
            hook(recorded)
        return web.json_response(body)

    def _list_version(self, query: dict[str, str]) -> int:
        """The version a fresh list is served at (``resourceVersion``, ``resourceVersionMatch``)."""
        wanted = query.get("resourceVersion") or ""
        current = self.store.resource_version
        if wanted in ("", "0"):
            return current
        version = int(wanted)
        if version > current:
            raise _TooLarge(f"Too large resource version: {version}, current: {current}")
        if query.get("resourceVersionMatch") == "Exact":
            return version
        return current

    async def _watch(
        self, route: _Route, query: dict[str, str], request: web.Request
    ) -> web.StreamResponse:
        try:
            selected = label_selector(query.get("labelSelector") or "")
        except ValueError as exc:
            return _status_response(400, f"unable to parse requirement: {exc}")
        watch = _OpenWatch(
            route, _truthy(query.get("allowWatchBookmarks")), request, selected=selected
        )
        since = query.get("resourceVersion") or ""
        # Replay and subscribe with no await in between, so no write falls in a gap.
        if since in ("", "0"):
            for _, obj in self.store.snapshot(route.resource, route.namespace):
                if selected(obj):
                    watch.queue.put_nowait(("ADDED", obj))
            self._watches.add(watch)
        else:
            try:
                for change in self.store.changes_since(route.resource, route.namespace, int(since)):
                    watch.offer(change)
                self._watches.add(watch)
            except Expired as exc:
                watch.queue.put_nowait(("ERROR", status_object(410, str(exc))))
                watch.queue.put_nowait(_End())
        timeout = float(query.get("timeoutSeconds") or self._watch_timeout_s)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if await self._stream(watch, response, timeout):
                await response.write_eof()
        except ConnectionError:
            pass  # the client went away, or the connection was dropped on purpose
        finally:
            self._watches.discard(watch)
        return response

    async def _stream(
        self, watch: _OpenWatch, response: web.StreamResponse, timeout: float
    ) -> bool:
        """Send events until the deadline or the end; False if the connection was dropped."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        interval = self._bookmark_interval_s if watch.bookmarks else None
        next_bookmark = loop.time() + interval if interval else math.inf
        while (now := loop.time()) < deadline:
            if now >= next_bookmark and interval:
                next_bookmark = now + interval
                if watch.queue.empty():  # every earlier change is out: the bookmark is true
                    await self._send_bookmark(watch, response, self.store.resource_version)
                continue
            try:
                item = await asyncio.wait_for(watch.queue.get(), min(deadline, next_bookmark) - now)
            except TimeoutError:
                continue
            if isinstance(item, _End):
                return True
            if isinstance(item, _Drop):
                return False
            if isinstance(item, _Bookmark):
                await self._send_bookmark(watch, response, item.resource_version)
                continue
            type_, obj = item
            await response.write(_line({"type": type_, "object": obj}))
        return True

    async def _send_bookmark(
        self, watch: _OpenWatch, response: web.StreamResponse, version: int
    ) -> None:
        resource = watch.route.resource
        metadata: dict[str, Any] = {"resourceVersion": str(version)}
        if resource.builtin:
            metadata["creationTimestamp"] = None
        obj = {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": metadata}
        await response.write(_line({"type": "BOOKMARK", "object": obj}))


_NOT_JSON = object()


def _group_suffix(resource: ResourceType) -> str:
    return f".{resource.group}" if resource.group else ""


class _TooLarge(Exception):
    """A list asked for a version the server has not reached (504 in the real server)."""


def _line(event: Object) -> bytes:
    return (json.dumps(event, separators=(",", ":")) + "\n").encode()
