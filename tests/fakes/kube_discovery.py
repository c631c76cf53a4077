"""The discovery documents kube-apiserver serves, for the resources the fake serves.

kubectl reads them before any other call: ``/api`` and ``/apis`` (the groups
and versions), then ``/api/v1`` and ``/apis/<group>/<version>`` (each
version's resources, with their verbs, scope, kind and short names), and
``/version``. Newer kubectl asks for aggregated discovery first; a server
that answers with these legacy documents (``application/json``) gets the
legacy walk, as an older API server would. Verbs list what the fake serves,
not everything the real server does, so a client is not told it may create
what the fake cannot.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from fakes.kube_store import CREATABLE, RESOURCE_TYPES, ResourceType

Object = dict[str, Any]

VERBS = ["get", "list", "watch", "patch", "update"]
SHORT_NAMES = {
    ("", "nodes"): ["no"],
    ("", "pods"): ["po"],
    ("batch.volcano.sh", "jobs"): ["vcjob", "vj"],
    ("scheduling.volcano.sh", "podgroups"): ["pg", "podgroup-v1beta1"],
    ("scheduling.volcano.sh", "queues"): ["q", "queue-v1beta1"],
}
SERVER_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource(resource: ResourceType) -> Object:
    entry: Object = {
        "name": resource.plural,
        "singularName": resource.kind.lower(),
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": [*VERBS, "create"] if resource.plural in CREATABLE else VERBS,
    }
    short = SHORT_NAMES.get((resource.group, resource.plural))
    if short:
        entry["shortNames"] = short
    if resource.plural == "pods":
        entry["categories"] = ["all"]
    return entry


def _group_versions(absent: frozenset[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for resource in RESOURCE_TYPES:
        if resource.group in absent:
            continue
        versions = groups.setdefault(resource.group, [])
        if resource.version not in versions:
            versions.append(resource.version)
    return groups


def discovery(path: str, url: str, absent: frozenset[str] = frozenset()) -> Object | None:
    """The document served at ``path``, or None if ``path`` is not a discovery path;
    the API groups in ``absent`` (their CRDs not installed) are not served."""
    parts = [p for p in path.split("/") if p]
    groups = _group_versions(absent)
    if parts == ["version"]:
        return SERVER_VERSION
    if parts == ["api"]:
        address = urlparse(url).netloc
        return {
            "kind": "APIVersions",
            "versions": groups.get("", []),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }
    if parts == ["apis"]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                    "preferredVersion": {
                        "groupVersion": f"{group}/{versions[0]}",
                        "version": versions[0],
                    },
                }
                for group, versions in groups.items()
                if group
            ],
        }
    if len(parts) == 2 and parts[0] == "api" and parts[1] in groups.get("", []):
        return _resource_list("", parts[1])
    if len(parts) == 3 and parts[0] == "apis" and parts[2] in groups.get(parts[1], []):
        return _resource_list(parts[1], parts[2])
    return None


def _resource_list(group: str, version: str) -> Object:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [
            _resource(r) for r in RESOURCE_TYPES if (r.group, r.version) == (group, version)
        ],
    }
