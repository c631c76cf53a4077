"""The fake API server's storage: etcd's versioning rules, without etcd.

The watcher under test relies on exactly these rules, so the fake keeps them
rather than approximating them (kmock's store, for one, answers every list
with ``resourceVersion: "..."`` and never expires anything):

- One global, monotonically increasing ``resourceVersion`` across every
  resource, bumped by every write; an object carries the version of its last
  write, a deletion gets a version of its own.
- A bounded history of changes. Watches resume from it; a version older than
  what it still holds is *compacted*: watching from it or continuing a list
  at it is refused with 410 Gone.
- A paginated list is a consistent snapshot: the continue token names the
  version of the first page, and later pages are served as of that version
  (rebuilt by undoing the newer history), so writes in between do not show.

The store is not thread-safe: the server runs every call on its own loop.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

Object = dict[str, Any]
Key = str
"""An object's place in the store: ``namespace/name``, or ``name`` when cluster-scoped.

Lists are sorted by it, as etcd sorts by ``/registry/<resource>/<key>``.
"""

CREATED_AT = datetime(2026, 1, 1, tzinfo=UTC)
"""Objects are stamped with times derived from their version, so runs are identical."""


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One API resource the fake serves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def builtin(self) -> bool:
        """Built-in lists omit ``kind``/``apiVersion`` on items; custom resources keep them."""
        return not self.group


RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "nodes", "Node", namespaced=False),
    ResourceType("", "v1", "pods", "Pod", namespaced=True),
    ResourceType("batch.volcano.sh", "v1alpha1", "jobs", "Job", namespaced=True),
    ResourceType("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", namespaced=True),
    ResourceType("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False),
    # Volcano's scheduler configuration, read once by the worker's start-up check.
    ResourceType("", "v1", "configmaps", "ConfigMap", namespaced=True),
    # The worker's record of each yield and resume on the Volcano Job (kube_rules.check_event).
    ResourceType("events.k8s.io", "v1", "events", "Event", namespaced=True),
)

CREATABLE = frozenset({"events"})
"""The resources clients may POST to (the rest are scripted by the tests)."""


def resource_of(api_version: str, kind: str) -> ResourceType:
    for resource in RESOURCE_TYPES:
        if resource.api_version == api_version and resource.kind == kind:
            return resource
    raise KeyError(f"the fake serves no {kind} in {api_version}")


class Expired(Exception):
    """The requested version has been compacted away (HTTP 410, reason Expired)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the history: what a write did, and what it replaced."""

    resource_version: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: ResourceType
    key: Key
    object: Object
    previous: Object | None


@dataclass(frozen=True, slots=True)
class ContinueToken:
    """What the opaque continue token carries, as in the real server."""

    resource_version: int
    start: Key

    def encode(self) -> str:
        body = {"v": "meta.k8s.io/v1", "rv": self.resource_version, "start": self.start}
        return base64.urlsafe_b64encode(json.dumps(body).encode()).decode()

    @classmethod
    def decode(cls, token: str) -> ContinueToken:
        body = json.loads(base64.urlsafe_b64decode(token.encode()))
        return cls(resource_version=int(body["rv"]), start=str(body["start"]))


def key_of(resource: ResourceType, obj: Object) -> Key:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if resource.namespaced else meta["name"]


def in_namespace(key: Key, namespace: str | None) -> bool:
    return namespace is None or key.startswith(f"{namespace}/")


class KubeStore:
    """Objects by resource and key, the global version and the bounded history."""

    def __init__(self, *, history_limit: int = 1000, first_version: int = 1000) -> None:
        self.resource_version = first_version
        self.floor = first_version
        """The oldest version still served: anything older gets 410."""
        self._history_limit = history_limit
        self._history: deque[Change] = deque()
        self._objects: dict[str, dict[Key, Object]] = {r.plural: {} for r in RESOURCE_TYPES}
        self._subscribers: list[Callable[[Change], None]] = []

    def subscribe(self, callback: Callable[[Change], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    # -- writes -------------------------------------------------------------

    def create(self, obj: Object) -> Object:
        resource = resource_of(obj["apiVersion"], obj["kind"])
        stored = copy.deepcopy(obj)
        key = key_of(resource, stored)
        if key in self._objects[resource.plural]:
            raise ValueError(f"{resource.kind} {key} already exists")
        version = self._next_version()
        meta = stored["metadata"]
        meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{resource.plural}/{key}/{version}"))
        meta["creationTimestamp"] = _timestamp(version)
        if resource.group:
            meta["generation"] = 1
        meta["resourceVersion"] = str(version)
        return self._commit(version, "ADDED", resource, key, stored, previous=None)

    def replace(self, obj: Object) -> Object:
        """An update: keeps identity and creation time, bumps the version (and generation)."""
        resource = resource_of(obj["apiVersion"], obj["kind"])
        key = key_of(resource, obj)
        previous = self._objects[resource.plural].get(key)
        if previous is None:
            raise KeyError(f"{resource.kind} {key} does not exist")
        stored = copy.deepcopy(obj)
        version = self._next_version()
        meta = stored["metadata"]
        for field in ("uid", "creationTimestamp"):
            meta[field] = previous["metadata"][field]
        if resource.group:
            generation = previous["metadata"].get("generation", 1)
            changed = stored.get("spec") != previous.get("spec")
            meta["generation"] = generation + 1 if changed else generation
        meta["resourceVersion"] = str(version)
        return self._commit(version, "MODIFIED", resource, key, stored, previous=previous)

    def delete(self, resource: ResourceType, key: Key) -> Object:
        previous = self._objects[resource.plural].get(key)
        if previous is None:
            raise KeyError(f"{resource.kind} {key} does not exist")
        version = self._next_version()
        final = copy.deepcopy(previous)
        final["metadata"]["resourceVersion"] = str(version)
        return self._commit(version, "DELETED", resource, key, final, previous=previous)

    def compact(self) -> None:
        """Forget all history: only the current version can be watched or continued from."""
        self._history.clear()
        self.floor = self.resource_version

    # -- reads --------------------------------------------------------------

    def get(self, resource: ResourceType, key: Key) -> Object | None:
        obj = self._objects[resource.plural].get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def snapshot(
        self, resource: ResourceType, namespace: str | None, at: int | None = None
    ) -> list[tuple[Key, Object]]:
        """The objects as of version ``at`` (default: now), sorted by key."""
        objects = dict(self._objects[resource.plural])
        if at is not None and at < self.resource_version:
            self.check_available(at)
            for change in reversed(self._history):
                if change.resource_version <= at:
                    break
                if change.resource is not resource:
                    continue
                if change.previous is None:
                    objects.pop(change.key, None)
                else:
                    objects[change.key] = change.previous
        return [
            (key, copy.deepcopy(objects[key]))
            for key in sorted(objects)
            if in_namespace(key, namespace)
        ]

    def changes_since(
        self, resource: ResourceType, namespace: str | None, after: int
    ) -> Iterator[Change]:
        """The recorded changes newer than ``after``; 410 if some may have been forgotten."""
        self.check_available(after)
        for change in self._history:
            if (
                change.resource_version > after
                and change.resource is resource
                and in_namespace(change.key, namespace)
            ):
                yield change

    # -- internals ----------------------------------------------------------

    def check_available(self, version: int) -> None:
        if version < self.floor:
            raise Expired(f"too old resource version: {version} ({self.floor})")

    def _next_version(self) -> int:
        self.resource_version += 1
        return self.resource_version

    def _commit(
        self,
        version: int,
        type_: str,
        resource: ResourceType,
        key: Key,
        obj: Object,
        previous: Object | None,
    ) -> Object:
        if type_ == "DELETED":
            del self._objects[resource.plural][key]
        else:
            self._objects[resource.plural][key] = obj
        change = Change(version, type_, resource, key, obj, previous)
        self._history.append(change)
        while len(self._history) > self._history_limit:
            self.floor = self._history.popleft().resource_version
        for subscriber in list(self._subscribers):
            subscriber(change)
        return copy.deepcopy(obj)


def _timestamp(version: int) -> str:
    return (CREATED_AT + timedelta(seconds=version)).strftime("%Y-%m-%dT%H:%M:%SZ")


def label_selector(text: str) -> Callable[[Object], bool]:
    """A ``labelSelector`` query (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``,
    ``a notin (x,y)``, comma-joined) as a predicate on objects; ValueError if malformed."""
    requirements: list[Callable[[dict[str, str]], bool]] = []
    for term in _selector_terms(text):
        requirements.append(_requirement(term))

    def matches(obj: Object) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


def _selector_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current.strip())
    return terms


def _requirement(term: str) -> Callable[[dict[str, str]], bool]:
    for operator in (" notin ", " in "):
        if operator in term:
            key, _, rest = term.partition(operator)
            rest = rest.strip()
            if not (rest.startswith("(") and rest.endswith(")")):
                raise ValueError(f"unable to parse requirement: {term!r}")
            values = {v.strip() for v in rest[1:-1].split(",")}
            key = key.strip()
            if operator == " in ":
                return lambda labels: labels.get(key) in values
            return lambda labels: labels.get(key) not in values
    for operator in ("!=", "==", "="):
        if operator in term:
            key, _, value = (part.strip() for part in term.partition(operator))
            if not key:
                raise ValueError(f"unable to parse requirement: {term!r}")
            if operator == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if term.startswith("!"):
        key = term[1:].strip()
        return lambda labels: key not in labels
    if not term:
        raise ValueError("unable to parse requirement: empty")
    return lambda labels: term in labels
