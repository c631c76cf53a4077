"""A real ``gpuyield worker`` with GPUYIELD_METRICS_PORT serves what the shipped rules and
dashboard panels query (but the node agent's and the archiver's own families)."""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "controller"))
sys.path.insert(0, str(Path(__file__).parents[1]))

import pytest
from cluster_objects import event as kube_event
from cluster_objects import node
from live_worker import publish
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from deploy.monitoring import NOT_OURS, base_name, metric_names, panel_expressions, rules
from gpuyield.agents.node.metrics import NodeMetrics
from gpuyield.agents.worker.metrics import WorkerMetrics
from gpuyield.streams.metrics import ArchiveMetrics

NOW = 1_764_460_800.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and labels.items() <= s.labels.items():
                return float(s.value)
    return None


@pytest.mark.slow  # a worker process: ~10 s on 2 shared cores
async def test_the_worker_serves_the_rules_metrics_and_counts_what_it_reads(
    worker_factory, kafka_bootstrap: str, topic_prefix: str
) -> None:
    port = free_port()
    worker = worker_factory(env={"GPUYIELD_METRICS_PORT": str(port)})
    worker.wait_ready()
    kube = topic_prefix + "gpuyield.kube-events"
    await publish(
        kafka_bootstrap,
        kube,
        [("garbage", b"\x00\xff not json"), ("node/gpu-00", kube_event(node("gpu-00"), NOW))],
    )
    # The dead letter is counted as the first message is read, the lag gauge is
    # refreshed on its own period: wait for the state both messages lead to.
    deadline = time.monotonic() + 60
    text = None
    while time.monotonic() < deadline:
        text = scrape(port)
        if (
            text
            and sample(text, "gpuyield_dead_letters_total", topic="gpuyield.kube-events")
            and sample(text, "gpuyield_consumer_lag_messages", topic="gpuyield.kube-events") == 0
        ):
            break
        time.sleep(0.3)
    assert text is not None, worker.tail()
    assert sample(text, "gpuyield_dead_letters_total", topic="gpuyield.kube-events") == 1
    assert (sample(text, "gpuyield_decider_step_seconds_count") or 0) >= 2  # and the ticks
    assert sample(text, "gpuyield_consumer_lag_messages", topic="gpuyield.kube-events") == 0
    served = {f.name for f in text_string_to_metric_families(text)}
    named = {rule["alert"]: rule["expr"] for rule in rules()} | {
        f"panel {i}": expr for i, expr in enumerate(panel_expressions())
    }
    for where, expression in named.items():
        for metric in metric_names(expression) - NOT_OURS:
            family = base_name(metric).removesuffix("_total")
            if family not in OTHER_PROCESSES:
                assert family in served, (where, metric)


def families(registry: CollectorRegistry) -> set[str]:
    return {m.name for m in registry.collect()}


OTHER_PROCESSES = (
    families(NodeMetrics().registry) | families(ArchiveMetrics().registry)
) - families(WorkerMetrics().registry)
"""Families only the node agent or the archiver serve: the worker need not."""
