"""The three patch types kube-apiserver accepts on a PATCH, with their real semantics.

- ``application/merge-patch+json``: RFC 7386. Objects merge key by key, ``null``
  deletes a key, anything else (lists included) replaces.
- ``application/strategic-merge-patch+json``: Kubernetes' own (built-in kinds
  only; custom resources answer 415). Like a merge patch, except that lists
  whose Go field carries a ``patchMergeKey`` merge item by item on that key
  (``containers`` by ``name``, ``conditions`` by ``type``...), with the
  ``$patch: delete`` / ``$patch: replace`` directives. A list with no merge key
  is replaced whole: **taints and tolerations have none**, so a patch that
  sends one toleration leaves the pod with that one only. ``$setElementOrder``
  directives (sent by kubectl) are read and ignored: order is not checked.
- ``application/json-patch+json``: RFC 6902 operations, ``test`` included. A
  failed ``test`` or a missing path is a 422 from the real server, a patch that
  is not a list of operations a 400.

``PatchError`` carries the HTTP status the real server answers with.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

# (kind, path of the list with "*" for list items) -> merge key; from the
# patchMergeKey tags of k8s.io/api/core/v1 types.go for the fields these kinds use.
_POD_SPEC_KEYS = {
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "containers", "*", "env"): "name",
    ("spec", "containers", "*", "ports"): "containerPort",
    ("spec", "containers", "*", "volumeMounts"): "mountPath",
    ("spec", "initContainers", "*", "env"): "name",
    ("spec", "initContainers", "*", "volumeMounts"): "mountPath",
    ("status", "conditions"): "type",
}
MERGE_KEYS: dict[str, dict[tuple[str, ...], str]] = {
    "Pod": {
        ("metadata", "ownerReferences"): "uid",
        ("metadata", "finalizers"): "",  # a set of strings: merged, duplicates dropped
        **_POD_SPEC_KEYS,
    },
    "Node": {
        ("metadata", "ownerReferences"): "uid",
        ("metadata", "finalizers"): "",
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
    },
}


class PatchError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(kind: str, target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise PatchError(400, "a strategic merge patch must be a JSON object")
    return _strategic(MERGE_KEYS.get(kind, {}), (), target, patch)


def _strategic(
    keys: Mapping[tuple[str, ...], str], path: tuple[str, ...], target: Any, patch: Any
) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$retainKeys", "$deleteFromPrimitiveList/")):
            if key.startswith("$deleteFromPrimitiveList/"):
                field = key.split("/", 1)[1]
                result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if key == "$patch":
            continue
        here = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and here in keys:
            result[key] = _merge_list(keys, here, keys[here], result.get(key), value)
        else:
            result[key] = _strategic(keys, here, result.get(key), value)
    return result


def _merge_list(
    keys: Mapping[tuple[str, ...], str],
    path: tuple[str, ...],
    merge_key: str,
    target: Any,
    patch: list[Any],
) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if not merge_key:  # a list of primitives merged as a set
        return current + [v for v in patch if v not in current]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(400, f"map: {item} does not contain declared merge key: {merge_key}")
        at = next(
            (i for i, old in enumerate(current) if old.get(merge_key) == item[merge_key]), None
        )
        if item.get("$patch") == "delete":
            if at is not None:
                del current[at]
            continue
        if at is None:
            current.append(_strategic(keys, (*path, "*"), {}, item))
        else:
            current[at] = _strategic(keys, (*path, "*"), current[at], item)
    return current


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of ``target``."""
    if not isinstance(operations, list):
        raise PatchError(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(400, f"invalid JSON patch operation: {operation}")
        op = operation["op"]
        path = _pointer(operation["path"])
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(_value(operation)))
        elif op == "remove":
            doc, _ = _remove(doc, path)
        elif op == "replace":
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(_value(operation)))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from", ""))
            if op == "move":
                doc, moved = _remove(doc, source)
            else:
                moved = copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, moved)
        elif op == "test":
            if _get(doc, path) != _value(operation):
                raise PatchError(422, f"testing value {operation['path']} failed: test failed")
        else:
            raise PatchError(400, f"unexpected kind of JSON patch operation: {op!r}")
    return doc


def _value(operation: Mapping[str, Any]) -> Any:
    if "value" not in operation:
        raise PatchError(400, f"{operation['op']} operation has no value")
    return operation["value"]


def _pointer(text: Any) -> list[str]:
    if not isinstance(text, str) or (text and not text.startswith("/")):
        raise PatchError(400, f"invalid JSON pointer {text!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in text.split("/")[1:]]


def _missing(path: list[str]) -> PatchError:
    return PatchError(422, f"doc is missing path: /{'/'.join(path)}")


def _get(doc: Any, path: list[str]) -> Any:
    for part in path:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise _missing(path)
    return doc


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(doc, path[:-1])
    last = path[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _missing(path)
    else:
        raise _missing(path)
    return doc


def _remove(doc: Any, path: list[str]) -> tuple[Any, Any]:
    if not path:
        return None, doc
    parent = _get(doc, path[:-1])
    last = path[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return doc, parent.pop(int(last))
    raise _missing(path)


def apply_patch(content_type: str, kind: str, builtin: bool, target: Any, patch: Any) -> Any:
    """The patched object, or ``PatchError`` with the real server's status (415 for others)."""
    media = content_type.split(";", 1)[0].strip()
    if media == MERGE:
        return merge_patch(target, patch)
    if media == JSON_PATCH:
        return json_patch(target, patch)
    if media == STRATEGIC:
        if not builtin:
            raise PatchError(
                415,
                "the body of the request was in an unknown format - accepted media "
                f"types include: {JSON_PATCH}, {MERGE}, {APPLY}",
            )
        return strategic_merge_patch(kind, target, patch)
    accepted = [JSON_PATCH, MERGE] + ([STRATEGIC] if builtin else [])
    raise PatchError(
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )
