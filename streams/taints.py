"""Whether a pod may be scheduled onto a node, as far as taints decide it.

The one copy of Kubernetes' rule (``k8s.io/api/core/v1``: ``Toleration.ToleratesTaint``
and the scheduler's TaintToleration filter), which Volcano's ``predicates``
plugin runs unchanged (``predicate.TaintTolerationEnable``, on by default). The
reservation enforcer's tests check with it that a reserved node repels every
pod but the preemptor's, and a simulated cluster can use it to honour the same
taints the real scheduler does. Pure: plain dicts in the API's JSON shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Taint = Mapping[str, Any]
Toleration = Mapping[str, Any]

FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""The effects that keep a pod off a node. ``PreferNoSchedule`` only lowers its score."""


def toleration_matches(toleration: Toleration, taint: Taint) -> bool:
    """``ToleratesTaint``: an empty effect or key matches any; ``Exists`` ignores the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False  # an operator this rule does not know tolerates nothing


def untolerated(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> list[Taint]:
    """The node's filtering taints that none of the pod's tolerations matches."""
    held = list(tolerations)
    return [
        taint
        for taint in taints
        if taint.get("effect") in FILTERED_EFFECTS
        and not any(toleration_matches(t, taint) for t in held)
    ]


def tolerates(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """True when no taint of ``node`` keeps ``pod`` off it (both as the API serves them)."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    taints = (node.get("spec") or {}).get("taints") or ()
    return not untolerated(tolerations, taints)
