"""What deploy/monitoring holds, read for the tests: its rules, their unit tests, the dashboard."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from .manifests import DEPLOY

MONITORING = DEPLOY / "monitoring"
RULE_FILE = "gpuyield-rules.yaml"  # the name rules-test.yaml loads
METRIC = re.compile(r"\b(gpuyield_[a-z0-9_]+|up)\b")
NOT_OURS = {"up"}  # Prometheus' own series


def rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's ``spec.groups``: a Prometheus rule file's ``groups``."""
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text(encoding="utf-8"))
    groups: list[dict[str, Any]] = doc["spec"]["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def rule_tests() -> dict[str, Any]:
    tests: dict[str, Any] = yaml.safe_load(
        (MONITORING / "rules-test.yaml").read_text(encoding="utf-8")
    )
    return tests


def dashboard() -> dict[str, Any]:
    board: dict[str, Any] = json.loads((MONITORING / "dashboard.json").read_text(encoding="utf-8"))
    return board


def panel_expressions() -> list[str]:
    return [t["expr"] for panel in dashboard()["panels"] for t in panel.get("targets", [])]


def metric_names(expression: str) -> set[str]:
    """The series names a PromQL expression selects (ours and ``up``)."""
    return set(METRIC.findall(expression))


def base_name(sample: str) -> str:
    """A histogram's or counter's family, from a name a query may use."""
    for suffix in ("_bucket", "_count", "_sum"):
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample
