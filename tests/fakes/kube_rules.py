"""What kube-apiserver's registry checks on an update (PUT, or a PATCH once applied).

From ``k8s.io/kubernetes/pkg/apis/core/validation/validation.go`` and the
resources' update strategies, for the fields gpuyield and its tests write:

- identity: the name in the body must be the URL's (400); ``uid`` and
  ``creationTimestamp`` are kept from the stored object;
- status: an update of the main resource keeps the stored status (the
  ``status`` subresource owns it) for pods, nodes and Volcano's kinds;
- optimistic concurrency: a ``metadata.resourceVersion`` in the body that is
  not the stored one is a 409 Conflict (an empty one: unconditional);
- pods (``ValidatePodUpdate``): the spec is immutable but for container
  images, ``activeDeadlineSeconds`` and **additions** to ``tolerations``
  (an existing toleration may change only its ``tolerationSeconds``);
  tolerations must be valid (``ValidateTolerations``);
- nodes (``validateNodeTaints``): each taint has a qualified-name key, a
  label-value value, a known effect, and taints are unique by key and effect.

And on a create of an ``events.k8s.io/v1`` Event (``ValidateEventCreate``,
``pkg/apis/core/validation/events.go``, for that API version): a DNS
subdomain name; ``eventTime``, ``reportingController`` (a qualified name),
``reportingInstance``, ``action`` and ``reason`` required, each of the last
four at most 128 characters; ``type`` Normal or Warning; ``note`` at most
1 kB; and a namespaced ``regarding`` object in the event's own namespace.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

Object = dict[str, Any]

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
POD_UPDATABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


class Invalid(Exception):
    """422 Invalid: ``field`` and ``detail`` as in a ``StatusCause``."""

    def __init__(self, kind: str, name: str, field: str, reason: str, detail: str) -> None:
        self.kind, self.name, self.field, self.reason, self.detail = (
            kind,
            name,
            field,
            reason,
            detail,
        )
        super().__init__(f'{kind} "{name}" is invalid: {field}: {detail}')


class BadRequest(Exception):
    """400."""


class Conflict(Exception):
    """409: the body's resourceVersion is not the stored one."""


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
EVENT_TYPES = ("Normal", "Warning")
EVENT_FIELD_LIMIT = 128
EVENT_NOTE_LIMIT = 1024


def check_event(name: str, namespace: str, event: Mapping[str, Any]) -> None:
    """Raise ``Invalid`` for what kube-apiserver refuses in a new events.k8s.io/v1 Event."""

    def invalid(field: str, reason: str, detail: str) -> Invalid:
        return Invalid("Event", name, field, reason, detail)

    if len(name) > 253 or not _SUBDOMAIN.match(name):
        raise invalid("metadata.name", "FieldValueInvalid", "a lowercase RFC 1123 subdomain")
    if not event.get("eventTime"):
        raise invalid("eventTime", "FieldValueRequired", "Required value")
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        value = event.get(field)
        if not isinstance(value, str) or not value:
            raise invalid(field, "FieldValueRequired", "Required value")
        if len(value) > EVENT_FIELD_LIMIT:
            raise invalid(
                field, "FieldValueTooLong", f"Too long: may not be more than {EVENT_FIELD_LIMIT}"
            )
    if not qualified_name(event["reportingController"]):
        raise invalid("reportingController", "FieldValueInvalid", "not a qualified name")
    if event.get("type") not in EVENT_TYPES:
        raise invalid("type", "FieldValueNotSupported", 'supported values: "Normal", "Warning"')
    note = event.get("note", "")
    if not isinstance(note, str) or len(note.encode()) > EVENT_NOTE_LIMIT:
        raise invalid("note", "FieldValueTooLong", f"can have at most {EVENT_NOTE_LIMIT} bytes")
    regarding = event.get("regarding") or {}
    if regarding.get("namespace") not in (None, "", namespace):
        raise invalid("regarding.namespace", "FieldValueInvalid", "does not match event.namespace")


def qualified_name(text: Any) -> bool:
    if not isinstance(text, str) or not text:
        return False
    prefix, _, name = text.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return False
    return len(name) <= 63 and bool(_NAME.match(name))


def label_value(text: Any) -> bool:
    return isinstance(text, str) and len(text) <= 63 and bool(_VALUE.match(text))


def prepare_update(kind: str, route_name: str, current: Object, updated: Object) -> Object:
    """The object to store for an update of ``current`` to ``updated``, or an exception."""
    meta = updated.get("metadata")
    if not isinstance(meta, dict):
        raise BadRequest("metadata: an object is required")
    if meta.get("name") != route_name:
        raise BadRequest(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({route_name})"
        )
    wanted = meta.get("resourceVersion")
    if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
        raise Conflict()
    stored = copy.deepcopy(updated)
    stored["apiVersion"] = current["apiVersion"]
    stored["kind"] = current["kind"]
    if "status" in current:
        stored["status"] = copy.deepcopy(current["status"])
    else:
        stored.pop("status", None)
    name = route_name
    if kind == "Pod":
        _check_pod_update(name, current.get("spec") or {}, stored.get("spec") or {})
    if kind == "Node":
        _check_taints(name, (stored.get("spec") or {}).get("taints") or [])
    return stored


def _check_pod_update(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    old_tolerations = list(old.get("tolerations") or [])
    new_tolerations = list(new.get("tolerations") or [])
    for previous in old_tolerations:
        if not any(
            _set(previous, tolerationSeconds=t.get("tolerationSeconds")) == _set(t)
            for t in new_tolerations
            if isinstance(t, dict)
        ):
            raise Invalid(
                "Pod",
                name,
                "spec.tolerations",
                "FieldValueForbidden",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )
    for index, toleration in enumerate(new_tolerations):
        _check_toleration(name, index, toleration)
    munged = copy.deepcopy(dict(new))
    munged["tolerations"] = copy.deepcopy(old.get("tolerations"))
    if "tolerations" not in old:
        munged.pop("tolerations", None)
    for field in ("containers", "initContainers"):
        for index, container in enumerate(munged.get(field) or []):
            olds = old.get(field) or []
            if index < len(olds) and isinstance(container, dict):
                container["image"] = olds[index].get("image")
    if "activeDeadlineSeconds" in munged or "activeDeadlineSeconds" in old:
        munged["activeDeadlineSeconds"] = old.get("activeDeadlineSeconds")
        if munged["activeDeadlineSeconds"] is None:
            munged.pop("activeDeadlineSeconds")
    if munged != dict(old):
        changed = sorted(k for k in set(munged) | set(old) if munged.get(k) != old.get(k))
        raise Invalid(
            "Pod",
            name,
            "spec",
            "FieldValueForbidden",
            f"Forbidden: pod updates may not change fields other than {POD_UPDATABLE}\n"
            f"changed: {', '.join(changed)}",
        )


def _set(toleration: Any, **fields: Any) -> dict[str, Any]:
    """A toleration as Go compares it: zero values and absent fields are alike."""
    merged = {**toleration, **fields} if isinstance(toleration, dict) else {}
    return {k: v for k, v in merged.items() if v not in (None, "")}


def _check_toleration(name: str, index: int, toleration: Any) -> None:
    field = f"spec.tolerations[{index}]"

    def invalid(sub: str, detail: str, reason: str = "FieldValueInvalid") -> Invalid:
        return Invalid("Pod", name, f"{field}.{sub}", reason, detail)

    if not isinstance(toleration, dict):
        raise invalid("", "Invalid value: a toleration is an object")
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and not qualified_name(key):
        raise invalid("key", f"Invalid value: {key!r}: name part must consist of alphanumerics")
    if not key and operator != "Exists":
        raise invalid(
            "operator", f"Invalid value: {operator!r}: operator must be Exists when `key` is empty"
        )
    if operator == "Exists" and toleration.get("value"):
        raise invalid("operator", "Invalid value: value must be empty when `operator` is 'Exists'")
    if operator not in ("Equal", "Exists"):
        raise invalid(
            "operator",
            f'Unsupported value: "{operator}": supported values: "Equal", "Exists"',
            "FieldValueNotSupported",
        )
    if operator == "Equal" and not label_value(toleration.get("value") or ""):
        raise invalid("value", f"Invalid value: {toleration.get('value')!r}: not a label value")
    effect = toleration.get("effect") or ""
    if effect and effect not in TAINT_EFFECTS:
        raise invalid("effect", f'Unsupported value: "{effect}"', "FieldValueNotSupported")


def _check_taints(name: str, taints: list[Any]) -> None:
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        field = f"spec.taints[{index}]"
        if not isinstance(taint, dict):
            raise Invalid("Node", name, field, "FieldValueInvalid", "Invalid value: not an object")
        if not qualified_name(taint.get("key")):
            raise Invalid(
                "Node",
                name,
                f"{field}.key",
                "FieldValueInvalid",
                f"Invalid value: {taint.get('key')!r}: not a qualified name",
            )
        if not label_value(taint.get("value") or ""):
            raise Invalid(
                "Node",
                name,
                f"{field}.value",
                "FieldValueInvalid",
                f"Invalid value: {taint.get('value')!r}: not a label value",
            )
        if taint.get("effect") not in TAINT_EFFECTS:
            raise Invalid(
                "Node",
                name,
                f"{field}.effect",
                "FieldValueNotSupported",
                f'Unsupported value: "{taint.get("effect")}": supported values: '
                '"NoExecute", "NoSchedule", "PreferNoSchedule"',
            )
        pair = (taint["key"], taint["effect"])
        if pair in seen:
            raise Invalid(
                "Node",
                name,
                field,
                "FieldValueDuplicate",
                "Duplicate value: taints must be unique by key and effect pair",
            )
        seen.add(pair)
