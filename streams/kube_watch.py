"""The Kubernetes source: every change of the watched objects, as ``KubeEvent``s.

Each watched resource (in each watched namespace, when restricted) runs
client-go's informer cycle in a worker thread of its own, because the official
client is synchronous:

1. LIST in pages (``limit``/``continue``): one consistent snapshot at one
   version. An expired continue token restarts the list.
2. Compare the snapshot with what was last seen (a cache of key -> object):
   new keys come out as ADDED, changed versions as MODIFIED, vanished keys as
   DELETED with the last object seen. Unchanged objects are not repeated, so a
   relist after an outage costs consumers only the real differences.
3. WATCH from the list's version with bookmarks and a server-side timeout,
   remembering the newest version seen (bookmarks included). When the stream
   ends or drops, watch again from there: no gap and no duplicate.
4. 410 Gone (the version was compacted): back to 1 at once. Any other failure:
   wait (exponential backoff with jitter), then resume; the backoff starts
   over once a watch delivers something.

A worker hands each event to the asyncio loop and waits until ``publish`` has
finished with it. So one object's events stay in order, a slow publisher slows
the watch instead of filling memory, and the cache and resume version move
past an event only once it is published: a failed publish is retried, not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from gpuyield.schemas.messages import KubeEvent, KubeEventType
from gpuyield.streams.kube_resources import (
    ALL_RESOURCES,
    Object,
    ResourceClient,
    WatchedResource,
    list_all,
)

logger = logging.getLogger(__name__)

Publish = Callable[[KubeEvent], Awaitable[None]]
Key = tuple[str | None, str]
"""An object's identity within one resource: (namespace, name)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter, so that many watchers do not retry in step."""

    initial_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5
    """Up to this fraction of each delay is taken off at random."""

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait before retry number ``attempt`` (0 for the first retry)."""
        base = min(self.max_s, self.initial_s * self.multiplier ** min(attempt, 64))
        return base * (1.0 - self.jitter * rng.random())


@dataclass(frozen=True, slots=True)
class KubeWatchSettings:
    """How the source talks to the API server; the defaults suit a production cluster."""

    page_size: int = 500
    """Objects per LIST page: few round trips, yet no huge response (client-go uses 500 too)."""

    watch_timeout_s: int = 300
    """Each watch asks the server to end it after this long; the source then resumes
    from the last version. A connection that died silently is noticed by then."""

    read_timeout_margin_s: float = 30.0
    """How long past ``watch_timeout_s`` a silent connection is trusted."""

    short_watch_s: float = 1.0
    """A watch the server ends sooner than this, with nothing in it, counts as a
    failure (and waits its backoff), as in client-go's reflector."""

    connect_timeout_s: float = 10.0
    list_timeout_s: float = 60.0
    """Per LIST page request."""

    list_restarts: int = 3
    """Expired continue tokens in a row that restart a list at once, before the
    next one counts as a failure (and waits its backoff)."""

    stop_timeout_s: float = 10.0
    """How long ``stop`` waits for the workers (a LIST in flight is not interrupted)."""

    backoff: Backoff = field(default_factory=Backoff)


class WatchError(Exception):
    """The server ended a watch with an ERROR event other than 410."""


class _Expired(Exception):
    """The resume version was compacted away (410 Gone): only a relist can continue."""


class _Stopping(Exception):
    """The watcher is stopping: unwind the worker."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def _version(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: Object) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def _lines(response: urllib3.HTTPResponse) -> Iterator[bytes]:
    """The non-empty lines of a watch stream, as the chunks arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line, buffer = buffer[:end], buffer[end + 1 :]
            if line.strip():
                yield line


class ResourceStream:
    """One resource in one scope: its cache, its resume version and its worker's loop."""

    def __init__(
        self,
        *,
        client: ResourceClient,
        settings: KubeWatchSettings,
        deliver: Callable[[KubeEvent], None],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        rng: random.Random,
        stopping: threading.Event,
        on_synced: Callable[[], None],
    ) -> None:
        self.client = client
        self.resource: WatchedResource = client.resource
        self.cache: dict[Key, Object] = {}
        self.resume_version: str | None = None
        self._settings = settings
        self._deliver = deliver
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._stopping = stopping
        self._on_synced = on_synced
        self._synced = False
        self._failures = 0
        self._progress_since_list = False
        self._response: urllib3.HTTPResponse | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.client.name

    def run(self) -> None:
        """List, watch, resume or relist until the watcher stops."""
        while not self._stopping.is_set():
            try:
                if self.resume_version is None:
                    self._relist()
                self._watch()
            except _Stopping:
                break
            except _Expired as exc:
                self.resume_version = None
                if self._progress_since_list:
                    logger.info("%s: %s; relisting", self.name, exc)
                else:  # expired again before anything arrived: do not spin
                    self._back_off(exc)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                self._back_off(exc)

    def interrupt(self) -> None:
        """Unblock a worker waiting on its watch stream (called from another thread)."""
        with self._lock:
            response = self._response
        if response is not None:
            # ValueError and friends: the stream has just finished on its own.
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                response.shutdown()

    # -- LIST ---------------------------------------------------------------

    def _relist(self) -> None:
        items, version = self._list_all()
        listed: dict[Key, Object] = {}
        for item in items:
            obj = self._normalise(item)
            if obj is not None:
                listed[self._key(obj)] = obj
        counts: Counter[KubeEventType] = Counter()
        for key in [k for k in self.cache if k not in listed]:
            self._publish(KubeEventType.DELETED, key, self.cache[key], version)
            counts[KubeEventType.DELETED] += 1
        for key, obj in listed.items():
            previous = self.cache.get(key)
            if previous is not None and _uid(previous) != _uid(obj):
                # Deleted and created again while we were away: two events, as it happened.
                self._publish(KubeEventType.DELETED, key, previous, version)
                counts[KubeEventType.DELETED] += 1
                previous = None
            if previous is None:
                self._publish(KubeEventType.ADDED, key, obj, _version(obj))
                counts[KubeEventType.ADDED] += 1
            elif _version(previous) != _version(obj):
                self._publish(KubeEventType.MODIFIED, key, obj, _version(obj))
                counts[KubeEventType.MODIFIED] += 1
        self.resume_version = version
        self._progress_since_list = False
        logger.info(
            "%s: listed %d objects at version %s (%d added, %d modified, %d deleted)",
            self.name,
            len(listed),
            version,
            counts[KubeEventType.ADDED],
            counts[KubeEventType.MODIFIED],
            counts[KubeEventType.DELETED],
        )
        if not self._synced:
            self._synced = True
            self._on_synced()

    def _list_all(self) -> tuple[list[Object], str]:
        settings = self._settings
        return list_all(
            self.client,
            page_size=settings.page_size,
            timeout_s=settings.list_timeout_s,
            restarts=settings.list_restarts,
            between_pages=self._stop_if_stopping,
        )

    def _stop_if_stopping(self) -> None:
        if self._stopping.is_set():
            raise _Stopping

    # -- WATCH --------------------------------------------------------------

    def _watch(self) -> None:
        version = self.resume_version
        assert version is not None
        settings = self._settings
        try:
            response = self.client.open_watch(
                resource_version=version,
                timeout_seconds=settings.watch_timeout_s,
                connect_timeout_s=settings.connect_timeout_s,
                read_timeout_s=settings.watch_timeout_s + settings.read_timeout_margin_s,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired(f"watch from version {version}: {_describe(exc)}") from exc
            raise
        with self._lock:
            self._response = response
        started, lines = time.monotonic(), 0
        try:
            if self._stopping.is_set():  # stop() ran before the response was known
                raise _Stopping
            logger.debug("%s: watching from version %s", self.name, version)
            for line in _lines(response):
                lines += 1
                self._on_event(json.loads(line))
                if self._stopping.is_set():
                    raise _Stopping
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()
        if not lines and time.monotonic() - started < settings.short_watch_s:
            # A server (or proxy) that ends every watch at once must not be hammered.
            raise WatchError("the server ended the watch at once, with nothing in it")
        self._progressed()  # the server ended the stream as asked
        logger.debug("%s: watch ended at version %s; resuming", self.name, self.resume_version)

    def _on_event(self, event: Any) -> None:
        type_ = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise WatchError(f"a watch event without an object: {str(event)[:200]}")
        if type_ == "ERROR":
            message = f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
            if obj.get("code") == 410:
                raise _Expired(message)
            raise WatchError(message)
        if type_ == "BOOKMARK":
            if version := _version(obj):
                self.resume_version = version
            self._progressed()
            return
        try:
            change = KubeEventType(str(type_))
        except ValueError:
            logger.warning("%s: ignoring a watch event of unknown type %r", self.name, type_)
            return
        normalised = self._normalise(obj)
        if normalised is not None:
            self._apply(change, normalised)
        if version := _version(obj):
            self.resume_version = version
        self._progressed()

    def _apply(self, change: KubeEventType, obj: Object) -> None:
        """Publish a watched change, typed by what the cache knew (as an informer does)."""
        key = self._key(obj)
        previous = self.cache.get(key)
        if change is KubeEventType.DELETED:
            self._publish(change, key, obj, _version(obj))
        elif previous is None:
            self._publish(KubeEventType.ADDED, key, obj, _version(obj))
        elif _version(previous) != _version(obj):
            self._publish(KubeEventType.MODIFIED, key, obj, _version(obj))

    # -- shared -------------------------------------------------------------

    def _publish(self, change: KubeEventType, key: Key, obj: Object, version: str) -> None:
        event = KubeEvent(
            type=change,
            kind=self.resource.kind,
            namespace=key[0],
            name=key[1],
            resource_version=version,
            object=obj,
            observed_at=self._clock(),
        )
        self._deliver(event)
        if change is KubeEventType.DELETED:
            self.cache.pop(key, None)
        else:
            self.cache[key] = obj

    def _normalise(self, obj: Object) -> Object | None:
        """The object with its kind and apiVersion (built-in lists leave them out of items)."""
        if not (obj.get("metadata") or {}).get("name"):
            logger.warning("%s: ignoring an object without a name", self.name)
            return None
        return self.resource.with_kind(obj)

    def _key(self, obj: Object) -> Key:
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") if self.resource.namespaced else None
        return (namespace or None, str(metadata["name"]))

    def _progressed(self) -> None:
        self._failures = 0
        self._progress_since_list = True

    def _back_off(self, exc: Exception) -> None:
        delay = self._settings.backoff.delay(self._failures, self._rng)
        self._failures += 1
        logger.warning(
            "%s: %s; retrying in %.2f s (failure %d in a row)",
            self.name,
            _describe(exc),
            delay,
            self._failures,
            exc_info=logger.isEnabledFor(logging.DEBUG),
        )
        self._sleep(delay)


class KubeWatcher:
    """Lists and watches the given resources into ``publish`` until stopped.

    ``publish`` runs on the loop that called ``start``. ``clock`` stamps
    ``observed_at``; ``sleep`` (called in worker threads) and ``rng`` drive
    the backoff, so tests can record the delays and run at full speed.
    """

    def __init__(
        self,
        *,
        configuration: kubernetes.client.Configuration,
        publish: Publish,
        resources: Sequence[WatchedResource] = ALL_RESOURCES,
        namespaces: Sequence[str] | None = None,
        settings: KubeWatchSettings | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._configuration = configuration
        self._publish = publish
        self._resources = tuple(resources)
        self._namespaces = tuple(namespaces) if namespaces else None
        self._settings = settings or KubeWatchSettings()
        self._clock = clock
        self._stopping = threading.Event()
        self._sleep = sleep or self._wait
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._streams: list[ResourceStream] = []
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._synced = asyncio.Event()
        self._unsynced = 0
        self._sync_lock = threading.Lock()

    @property
    def streams(self) -> Sequence[ResourceStream]:
        return tuple(self._streams)

    @property
    def synced(self) -> bool:
        """True once every resource's first list has been published."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def start(self) -> None:
        if self._loop is not None:
            raise RuntimeError("a KubeWatcher starts once")
        self._loop = asyncio.get_running_loop()
        scopes: Sequence[str | None] = self._namespaces or (None,)
        for resource in self._resources:
            for namespace in scopes if resource.namespaced else (None,):
                api_client = kubernetes.client.ApiClient(self._configuration)
                stream = ResourceStream(
                    client=ResourceClient(api_client, resource, namespace),
                    settings=self._settings,
                    deliver=self._deliver,
                    clock=self._clock,
                    sleep=self._sleep,
                    rng=self._rng,
                    stopping=self._stopping,
                    on_synced=self._stream_synced,
                )
                self._streams.append(stream)
                self._threads.append(
                    threading.Thread(
                        target=self._work,
                        args=(stream, api_client),
                        name=f"kube-watch-{stream.name.replace(' in ', '-')}",
                        daemon=True,
                    )
                )
        self._unsynced = len(self._streams)
        logger.info("watching %s", ", ".join(s.name for s in self._streams))
        for thread in self._threads:
            thread.start()

    async def stop(self) -> None:
        """Stop every worker and wait for it, without blocking the loop."""
        self._stopping.set()
        for stream in self._streams:
            stream.interrupt()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.stop_timeout_s
        while any(t.is_alive() for t in self._threads) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            logger.error("kube watch threads still running after stop: %s", ", ".join(stuck))
        else:
            logger.info("stopped watching")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _work(self, stream: ResourceStream, api_client: kubernetes.client.ApiClient) -> None:
        try:
            stream.run()
        except BaseException:  # run() handles every Exception; this is a bug
            logger.exception("%s: the watch worker failed", stream.name)
        finally:
            api_client.close()  # type: ignore[no-untyped-call]

    def _stream_synced(self) -> None:
        with self._sync_lock:
            self._unsynced -= 1
            done = self._unsynced == 0
        if done and self._loop is not None:
            self._loop.call_soon_threadsafe(self._synced.set)

    def _deliver(self, event: KubeEvent) -> None:
        """Publish on the loop, from a worker thread, and wait until it is done."""
        assert self._loop is not None
        try:
            future = asyncio.run_coroutine_threadsafe(self._publish_one(event), self._loop)
        except RuntimeError as exc:  # the loop is closed: nobody is listening any more
            self._stopping.set()
            raise _Stopping from exc
        while True:
            try:
                future.result(timeout=0.1)
                return
            except TimeoutError:
                if self._stopping.is_set():
                    future.cancel()
                    raise _Stopping from None

    def _wait(self, delay: float) -> None:
        """The default sleep: over at once when the watcher stops."""
        self._stopping.wait(delay)

    async def _publish_one(self, event: KubeEvent) -> None:
        await self._publish(event)


async def run(watcher: KubeWatcher) -> None:
    """Run ``watcher`` until cancelled, then stop it cleanly."""
    await watcher.start()
    try:
        await asyncio.Event().wait()
    finally:
        await watcher.stop()
