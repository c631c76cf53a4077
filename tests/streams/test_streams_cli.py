"""``gpuyield topics`` and ``gpuyield broker``, run as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from typer.testing import CliRunner

from gpuyield.cli import app
from gpuyield.streams.embedded import free_port
from gpuyield.streams.topics import changelogs, registry

GPUYIELD = Path(sys.executable).with_name("gpuyield")


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    for name in list(os.environ):
        if name.startswith("GPUYIELD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return dict(os.environ)


def test_topics_prints_the_registry_as_a_table(clean_env: dict[str, str]) -> None:
    result = CliRunner().invoke(app, ["topics"])
    assert result.exit_code == 0, result.output
    for spec in registry():
        assert spec.name in result.output
        assert spec.schema in result.output
    assert "30 days" in result.output
    assert "7 days" in result.output


def test_topics_json_follows_the_configured_partitions(
    clean_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUYIELD_TOPIC_PARTITIONS", "12")
    result = CliRunner().invoke(app, ["topics", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == [spec.describe() for spec in registry(12)]
    assert {item["name"]: item["partitions"] for item in doc}["gpuyield.heartbeats"] == 12
    assert set(doc[0]) == {
        "name",
        "key",
        "schema",
        "partitions",
        "cleanup_policy",
        "retention_ms",
        "max_message_bytes",
        "why",
    }


def test_topics_with_bad_settings_is_one_line(
    clean_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUYIELD_TOPIC_PARTITIONS", "0")
    result = CliRunner().invoke(app, ["topics"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("gpuyield: GPUYIELD_TOPIC_PARTITIONS: input should be")
    assert result.stderr.count("\n") == 1


def read_line(stream: IO[str] | None, timeout_s: float) -> str:
    """One line from a pipe, or '' when none comes before the deadline."""
    assert stream is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return lines[0] if lines else ""


def broker_pids(port: int) -> list[int]:
    """Tansu processes listening on ``port`` (from /proc: Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"tansu") and f"tcp://127.0.0.1:{port}".encode() in argv:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_broker_prints_its_address_and_stops_cleanly(
    clean_env: dict[str, str], stop_signal: signal.Signals
) -> None:
    port = free_port()
    process = subprocess.Popen(
        [str(GPUYIELD), "broker", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env,
    )
    try:
        first = read_line(process.stdout, timeout_s=30)
        assert first == f"GPUYIELD_KAFKA_BOOTSTRAP=127.0.0.1:{port}\n"
        assert read_line(process.stdout, timeout_s=5) == "GPUYIELD_KAFKA_PROFILE=tansu\n"
        assert accepts(port)
        assert len(broker_pids(port)) == 1
        process.send_signal(stop_signal)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        _, stderr = process.communicate(timeout=5)
    assert "Traceback" not in stderr
    assert wait_for(lambda: not broker_pids(port)), "the broker outlived the command"
    assert not accepts(port)


def test_broker_on_a_taken_port_fails_in_one_line(clean_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(GPUYIELD), "broker", "--port", str(port)],
            capture_output=True,
            text=True,
            env=clean_env,
            timeout=30,
            check=False,
        )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"gpuyield: cannot start the broker: port {port} is in use\n"


async def _partitions(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(names)
    finally:
        await admin.close()
    return {item["topic"]: len(item["partitions"]) for item in described if not item["error_code"]}


def test_broker_creates_every_topic_the_worker_needs_changelogs_included(
    clean_env: dict[str, str],
) -> None:
    process = subprocess.Popen(
        [str(GPUYIELD), "broker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean_env, "GPUYIELD_APP_ID": "audit-7", "GPUYIELD_TOPIC_PARTITIONS": "3"},
    )
    try:
        first = read_line(process.stdout, timeout_s=30)
        bootstrap = first.removeprefix("GPUYIELD_KAFKA_BOOTSTRAP=").strip()
        wanted = {spec.name: spec.partitions for spec in registry(3) + changelogs("audit-7", 3)}
        found = asyncio.run(_partitions(bootstrap, sorted(wanted)))
    finally:
        process.terminate()
        process.wait(timeout=15)
        process.communicate(timeout=5)
    assert found == wanted
    assert found["audit-7-decider-changelog"] == 1
