"""Alerts forwarded to a webhook or to Alertmanager: at least once, in order, once per id."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kafka import KafkaProducer

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Alert, AlertKind, AlertState
from gpuyield.streams.alert_delivery import (
    AlertmanagerDelivery,
    Backoff,
    DeliveryError,
    Forwarder,
    WebhookDelivery,
    alertname,
    to_alertmanager,
)
from gpuyield.streams.topics import TopicSpec

NOW = 1_764_460_800.0
GPUYIELD = Path(sys.executable).with_name("gpuyield")


def an_alert(n: int, state: AlertState = AlertState.FIRING, job: str = "research/sweep-0") -> Alert:
    return Alert(
        alert_id=f"alert-{n}",
        kind=AlertKind.YIELD_DEADLINE_MISSED,
        job=job,
        message=f"no acknowledgement from gpu-0{n} for the yield of {job}",
        raised_at=NOW + n,
        details={"node": f"gpu-0{n}"},
        state=state,
        resolved_at=NOW + 100 if state is AlertState.RESOLVED else None,
    )


class Receiver:
    """A real HTTP server that refuses the requests ``fail(n)`` picks (n counts from 1)."""

    def __init__(self, fail: Callable[[int], bool]) -> None:
        self.fail = fail
        self.requests = 0
        self.accepted: list[dict[str, object]] = []
        self.keys: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests += 1
                if receiver.fail(receiver.requests):
                    self.send_response(503)
                    self.end_headers()
                    return
                receiver.accepted.append(json.loads(body))
                receiver.keys.append(self.headers.get("Idempotency-Key", ""))
                self.send_response(202)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/gpuyield"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky_receiver() -> Iterator[Receiver]:
    receiver = Receiver(fail=lambda n: n % 3 != 0)  # two of every three requests fail
    yield receiver
    receiver.close()


def forward(receiver: Receiver, alerts: list[Alert]) -> tuple[Forwarder, list[int]]:
    commits: list[int] = []
    forwarder = Forwarder(
        WebhookDelivery(receiver.url, timeout_s=5),
        commits.append,
        backoff=Backoff(base_s=0.001, cap_s=0.01),
    )
    assert forwarder.handle_all((offset, encode(a)) for offset, a in enumerate(alerts))
    return forwarder, commits


def test_every_alert_reaches_a_failing_webhook_once_and_in_order(
    flaky_receiver: Receiver,
) -> None:
    alerts = [an_alert(n) for n in range(5)]
    forwarder, _ = forward(flaky_receiver, alerts)
    assert [a["alert_id"] for a in flaky_receiver.accepted] == [a.alert_id for a in alerts]
    assert forwarder.failures == 10


def test_an_offset_is_committed_only_once_its_alert_was_taken(flaky_receiver: Receiver) -> None:
    _, commits = forward(flaky_receiver, [an_alert(0), an_alert(1)])
    assert commits == [1, 2]


def test_an_alert_seen_twice_on_the_stream_is_delivered_once(flaky_receiver: Receiver) -> None:
    forward(flaky_receiver, [an_alert(0), an_alert(1), an_alert(0)])
    assert [a["alert_id"] for a in flaky_receiver.accepted] == ["alert-0", "alert-1"]


def test_its_resolution_is_a_second_delivery_of_the_same_id(flaky_receiver: Receiver) -> None:
    forward(flaky_receiver, [an_alert(0), an_alert(0, AlertState.RESOLVED)])
    assert [(a["alert_id"], a["state"]) for a in flaky_receiver.accepted] == [
        ("alert-0", "firing"),
        ("alert-0", "resolved"),
    ]
    assert flaky_receiver.keys == ["alert-0:firing", "alert-0:resolved"]


def test_a_receiver_that_does_not_answer_is_a_delivery_error() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(DeliveryError, match=str(port)):
        WebhookDelivery(f"http://127.0.0.1:{port}/x", timeout_s=2).send(an_alert(0))


def test_alertmanager_gets_labels_it_can_route_on() -> None:
    doc = to_alertmanager(an_alert(0))
    assert doc["labels"] == {
        "alertname": "GpuyieldYieldDeadlineMissed",
        "severity": "warning",
        "kind": "yield-deadline-missed",
        "alert_id": "alert-0",
        "gpuyield_job": "research/sweep-0",
    }
    assert doc["startsAt"] == "2025-11-30T00:00:00Z"
    assert "endsAt" not in doc


def test_a_resolved_alert_ends_in_alertmanager() -> None:
    assert to_alertmanager(an_alert(0, AlertState.RESOLVED))["endsAt"] == "2025-11-30T00:01:40Z"


def test_every_kind_has_an_alertname_in_prometheus_style() -> None:
    for kind in AlertKind:
        assert alertname(kind.value).isalnum()


ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    if ALERTMANAGER is None:
        pytest.skip("Debian's prometheus-alertmanager is not installed (.ci/run installs it)")
    config = tmp_path / "alertmanager.yml"
    config.write_text("route:\n  receiver: nobody\nreceivers:\n  - name: nobody\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("alertmanager did not become ready")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def active_alerts(url: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as answer:
        return list(json.loads(answer.read()))


def test_a_real_alertmanager_shows_the_alert_and_drops_it_once_resolved(alertmanager: str) -> None:
    delivery = AlertmanagerDelivery(alertmanager)
    firing = an_alert(0).model_copy(update={"raised_at": time.time() - 10})
    delivery.send(firing)
    (shown,) = active_alerts(alertmanager)
    labels = shown["labels"]
    assert isinstance(labels, dict)
    assert labels["alertname"] == "GpuyieldYieldDeadlineMissed"
    assert labels["gpuyield_job"] == "research/sweep-0"
    delivery.send(
        firing.model_copy(update={"state": AlertState.RESOLVED, "resolved_at": time.time() - 1})
    )
    assert active_alerts(alertmanager) == []


def test_the_alerts_command_forwards_what_the_topic_holds_and_resumes_after_a_restart(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec], topic_prefix: str, tmp_path: Path
) -> None:
    topic = fresh_topics["gpuyield.alerts"].name
    receiver = Receiver(fail=lambda n: n == 1)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUYIELD_")},
        "GPUYIELD_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "GPUYIELD_TOPIC_PREFIX": topic_prefix,
        "GPUYIELD_APP_ID": topic_prefix.rstrip("."),
        "GPUYIELD_STATE_DIR": str(tmp_path / "state"),
    }
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)

    def publish(alerts: list[Alert]) -> None:
        for alert in alerts:
            producer.send(topic, key=b"research/sweep-0", value=encode(alert))
        producer.flush(30)

    def run_until(count: int) -> None:
        process = subprocess.Popen(
            [str(GPUYIELD), "alerts", "--webhook", receiver.url],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while len(receiver.accepted) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        process.terminate()
        _, stderr = process.communicate(timeout=30)
        # The traceback itself, not the client's INFO lines before it (pytest cuts long messages).
        assert b"Traceback" not in stderr, stderr[stderr.find(b"Traceback") :].decode()

    try:
        publish([an_alert(0), an_alert(1)])
        run_until(2)
        publish([an_alert(2)])
        run_until(3)
    finally:
        producer.close()
        receiver.close()
    assert [a["alert_id"] for a in receiver.accepted] == ["alert-0", "alert-1", "alert-2"]


def test_the_alerts_command_prints_the_stream_as_json_lines_filtered_by_kind(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec], topic_prefix: str, tmp_path: Path
) -> None:
    topic = fresh_topics["gpuyield.alerts"].name
    livelock = an_alert(5).model_copy(update={"kind": AlertKind.LIVELOCK, "alert_id": "ll"})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        for alert in (an_alert(0), livelock):
            producer.send(topic, value=encode(alert))
        producer.flush(30)
    finally:
        producer.close()
    result = subprocess.run(
        [str(GPUYIELD), "alerts", "--json", "--kind", "livelock"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUYIELD_")},
            "GPUYIELD_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "GPUYIELD_TOPIC_PREFIX": topic_prefix,
            "GPUYIELD_STATE_DIR": str(tmp_path / "state"),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["alert_id"] for line in result.stdout.splitlines()] == ["ll"]


def test_an_unknown_alert_kind_is_one_line_and_status_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(GPUYIELD), "alerts", "--kind", "lifelock"],
        env={**os.environ, "GPUYIELD_STATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("gpuyield: --kind: unknown alert kind 'lifelock'")
    assert result.stderr.count("\n") == 1


def test_the_example_subscriber_pages_once_per_critical_incident_change(
    kafka_bootstrap: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    topic = fresh_topics["gpuyield.alerts"].name
    critical = an_alert(1).model_copy(update={"severity": "critical", "kind": AlertKind.LIVELOCK})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        for alert in (an_alert(0), critical, critical, critical.model_copy(update=RESOLVED)):
            producer.send(topic, value=encode(alert))
        producer.flush(30)
    finally:
        producer.close()
    example = Path(__file__).resolve().parents[2] / "examples" / "subscriber.py"
    result = subprocess.run(
        [sys.executable, str(example), kafka_bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.splitlines() == [
        f"PAGE livelock firing: {critical.message}",
        f"PAGE livelock resolved: {critical.message}",
    ]


RESOLVED = {"state": AlertState.RESOLVED, "resolved_at": NOW + 100}
