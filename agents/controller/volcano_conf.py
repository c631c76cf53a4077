"""Volcano's scheduler configuration, read the way Volcano reads it, and what gpuyield needs of it.

gpuyield must be the cluster's one preemptor. Volcano's ``preempt`` and
``reclaim`` actions (and their gang-aware forms ``gangpreempt`` and
``gangreclaim``) evict by Volcano's own rules, with the pod's own grace period
and no checkpoint, beside gpuyield: two preemptors with different rules, and
the preempt -> requeue -> preempt oscillation gpuyield exists to stop. The
worker reads Volcano's configuration at start (``agents/worker/volcano_check``)
and this module says what is wrong with it. It is pure: text in, values out.

The parser follows Volcano's ``UnmarshalSchedulerConf``
(``pkg/scheduler/util.go`` at ``ed72c7c8``): YAML with ``actions``, one string
of comma-separated names, each trimmed and looked up case-sensitively among the
registered actions (``pkg/scheduler/actions/factory.go``), and ``tiers`` of
``plugins`` by ``name``. Fields it does not know are ignored, as the Go YAML
decoder ignores them. A configuration Volcano would reject (an unknown or empty
action name, YAML that is not a mapping) raises ``SchedulerConfError``: Volcano
then keeps the configuration it had (its built-in default at start, which has
neither preempt nor reclaim; the previous one on a reload, which may), so
gpuyield cannot tell what runs and says so instead of guessing.

``shuffle`` is not reported: it evicts only what descheduling plugins (tdm,
rescheduling, pdb) choose, a rebalancing, not preemption for a pending job.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from gpuyield.schemas.messages import Alert, AlertKind

REGISTERED_ACTIONS = frozenset(
    {
        "enqueue",
        "allocate",
        "backfill",
        "preempt",
        "reclaim",
        "gangpreempt",
        "gangreclaim",
        "shuffle",
    }
)
"""The action names Volcano registers (``actions/factory.go``); any other name is invalid."""

EVICTING_ACTIONS: Mapping[str, str] = {
    "preempt": "evicts lower-priority jobs of the same queue for a starving job",
    "reclaim": "evicts jobs of reclaimable queues over their deserved share for another queue",
    "gangpreempt": "preempt for whole gangs (same queue)",
    "gangreclaim": "reclaim for whole gangs (across queues)",
}
"""Volcano's actions that evict running pods for pending ones, with what each does."""

GPUYIELD_TIERS: tuple[tuple[str, ...], ...] = (
    ("priority", "gang", "conformance"),
    ("drf", "predicates", "proportion", "nodeorder"),
)
"""The plugin tiers of ``deploy/volcano/volcano-scheduler.conf``."""

REQUIRED_PLUGINS: Mapping[str, str] = {
    "gang": "gangs are placed all-or-nothing, as gpuyield frees GPUs for whole gangs",
    "priority": "the job gpuyield freed GPUs for is allocated before lower-priority ones",
    "proportion": "queue capabilities and guarantees bound admission, as gpuyield reads them",
    "predicates": "pods land only on nodes they fit (GPUs, taints, affinity)",
}
"""Plugins whose absence makes Volcano place jobs differently from what gpuyield plans for."""


class SchedulerConfError(ValueError):
    """Volcano would reject this configuration; ``str()`` says why, in one line."""


@dataclass(frozen=True, slots=True)
class Plugin:
    """One plugin of a tier; ``switches`` holds its ``enable...`` options as written."""

    name: str
    switches: Mapping[str, bool]


@dataclass(frozen=True, slots=True)
class Tier:
    plugins: tuple[Plugin, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.plugins)


@dataclass(frozen=True, slots=True)
class SchedulerConf:
    """The parts of ``volcano-scheduler.conf`` gpuyield reasons about."""

    actions: tuple[str, ...]
    tiers: tuple[Tier, ...]

    @property
    def plugins(self) -> frozenset[str]:
        return frozenset(name for tier in self.tiers for name in tier.names)


class FindingKind(StrEnum):
    EVICTING_ACTIONS = "evicting-actions"
    """Volcano preempts or reclaims beside gpuyield: an alert."""
    NO_ENQUEUE = "no-enqueue"
    """No gang admission: every PodGroup is admitted, whatever its queue allows."""
    MISSING_PLUGINS = "missing-plugins"
    """Plugins whose rules gpuyield's plans assume are not configured."""


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    names: tuple[str, ...]
    """The actions or plugins the finding is about, in configuration order."""
    message: str

    @property
    def alerts(self) -> bool:
        """Only a second preemptor is worth waking someone for; the rest is logged."""
        return self.kind is FindingKind.EVICTING_ACTIONS


def parse_scheduler_conf(text: str) -> SchedulerConf:
    """The configuration in ``text``, or ``SchedulerConfError`` where Volcano would reject it."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SchedulerConfError(f"not YAML: {' '.join(str(exc).split())}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise SchedulerConfError(f"not a mapping but a {type(document).__name__}")
    return SchedulerConf(
        actions=_actions(document.get("actions")),
        tiers=_tiers(document.get("tiers")),
    )


def _actions(value: Any) -> tuple[str, ...]:
    if value is None:
        value = ""
    if isinstance(value, list | dict):
        raise SchedulerConfError(
            f"actions must be one string of comma-separated names, not a {type(value).__name__}"
        )
    names = tuple(part.strip() for part in str(value).split(","))
    for name in names:
        if not name:
            raise SchedulerConfError(f"actions {str(value)!r}: an empty action name")
        if name not in REGISTERED_ACTIONS:
            hint = (
                f" (names are lowercase: {name.lower()!r})"
                if name.lower() in REGISTERED_ACTIONS
                else ""
            )
            raise SchedulerConfError(f"actions: Volcano has no action {name!r}{hint}")
    return names


def _tiers(value: Any) -> tuple[Tier, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SchedulerConfError(f"tiers must be a list, not a {type(value).__name__}")
    tiers = []
    for index, tier in enumerate(value):
        tier = {} if tier is None else tier
        plugins = tier.get("plugins") if isinstance(tier, dict) else None
        if not isinstance(tier, dict) or not isinstance(plugins, list | None):
            raise SchedulerConfError(f"tiers[{index}] must be a mapping with a plugins list")
        tiers.append(Tier(tuple(_plugin(index, p) for p in plugins or ())))
    return tuple(tiers)


def _plugin(tier: int, value: Any) -> Plugin:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise SchedulerConfError(f"tiers[{tier}].plugins: {value!r} has no name")
    switches = {
        key: flag
        for key, flag in value.items()
        if key.startswith("enable") and isinstance(flag, bool)
    }
    return Plugin(name=value["name"], switches=switches)


def check_scheduler_conf(conf: SchedulerConf) -> tuple[Finding, ...]:
    """What in ``conf`` works against gpuyield, most serious first; empty when nothing does."""
    findings = []
    evicting = tuple(a for a in conf.actions if a in EVICTING_ACTIONS)
    if evicting:
        findings.append(
            Finding(
                FindingKind.EVICTING_ACTIONS,
                evicting,
                f"Volcano's {_and(evicting)} {'is' if len(evicting) == 1 else 'are'} on beside "
                "gpuyield: two preemptors with different rules, Volcano evicting by its own "
                "order with no checkpoint grace and no resume, and jobs going round "
                "preempt -> requeue -> "
                f"preempt; remove {_and(evicting)} from the scheduler's actions "
                "(deploy/volcano/volcano-scheduler.conf)",
            )
        )
    if "enqueue" not in conf.actions:
        findings.append(
            Finding(
                FindingKind.NO_ENQUEUE,
                ("enqueue",),
                "no enqueue action: allocate admits every PodGroup whatever its queue's "
                "capability, so jobs their queue cannot run create pods that wait forever",
            )
        )
    missing = tuple(name for name in REQUIRED_PLUGINS if name not in conf.plugins)
    if missing:
        findings.append(
            Finding(
                FindingKind.MISSING_PLUGINS,
                missing,
                "plugins missing: "
                + "; ".join(f"{name} ({REQUIRED_PLUGINS[name]})" for name in missing),
            )
        )
    return tuple(findings)


def preempting_alert(
    finding: Finding,
    *,
    configmap: str,
    key: str,
    resource_version: str,
    cluster_id: str,
    raised_at: float,
) -> Alert:
    """The alert for an ``EVICTING_ACTIONS`` finding in ConfigMap ``configmap`` (ns/name).

    The id derives from the ConfigMap's version and the actions, so every
    worker replica and every restart raises the same alert for the same
    configuration, and a changed one raises a new alert.
    """
    if finding.kind is not FindingKind.EVICTING_ACTIONS:
        raise ValueError(f"a {finding.kind} finding is not an alert")
    identity = f"{cluster_id}/{configmap}/{key}@{resource_version}:{','.join(finding.names)}"
    return Alert(
        alert_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuyield:volcano-preempting:{identity}")),
        kind=AlertKind.VOLCANO_PREEMPTING,
        severity="critical",
        message=f"cluster {cluster_id}: {finding.message}",
        raised_at=raised_at,
        details={
            "actions": list(finding.names),
            "configmap": configmap,
            "key": key,
            "resource_version": resource_version,
            "cluster": cluster_id,
        },
    )


def _and(names: tuple[str, ...]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
