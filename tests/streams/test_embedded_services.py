"""The embedded broker and Redis: real servers that serve, and never outlive their owner."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from gpuyield.streams.embedded import (
    EmbeddedBroker,
    EmbeddedRedis,
    EmbeddedServiceError,
    find_tansu,
    free_port,
)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def process_gone(pid: int) -> bool:
    """True once ``pid`` is gone (an unreaped child of ours still counts as there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_the_tansu_binary_ships_in_the_wheel() -> None:
    binary = find_tansu()
    assert binary.name == "tansu"
    assert os.access(binary, os.X_OK)


async def test_the_broker_serves_a_produced_message_and_stops(tmp_path: Path) -> None:
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    try:
        pid = broker.pid
        assert pid is not None
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        assert accepts(broker.port)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            sent = await producer.send_and_wait("probe", value=b"\x00hello\xff", key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            partition = TopicPartition("probe", sent.partition)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            record = await asyncio.wait_for(consumer.getone(), timeout=10)
        finally:
            await consumer.stop()
        assert (record.key, record.value) == (b"k", b"\x00hello\xff")
        port = broker.port
    finally:
        broker.stop()
    assert not broker.is_running()
    assert wait_for(lambda: process_gone(pid))
    assert not accepts(port)
    assert "tansu broker" in (tmp_path / "tansu.log").read_text()
    broker.stop()  # a second stop is harmless


def test_a_requested_port_in_use_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EmbeddedServiceError, match=f"port {port} is in use"):
            EmbeddedBroker(port).start()


def test_a_broker_that_dies_at_start_reports_its_log(tmp_path: Path) -> None:
    script = tmp_path / "fake-tansu"
    script.write_text("#!/bin/sh\necho 'boom: cannot start' >&2\nexit 3\n")
    script.chmod(0o755)
    broker = EmbeddedBroker(free_port(), binary=script)
    with pytest.raises(EmbeddedServiceError, match=r"exited with status 3") as caught:
        broker.start()
    assert "boom: cannot start" in str(caught.value)
    assert not broker.is_running()


def test_the_context_manager_stops_the_broker() -> None:
    with EmbeddedBroker() as broker:
        pid, port = broker.pid, broker.port
        assert pid is not None
        assert accepts(port)
    assert wait_for(lambda: process_gone(pid))
    assert not accepts(port)


def test_a_client_left_connected_does_not_keep_the_broker_alive() -> None:
    """Tansu drains open connections for about 5 s on SIGTERM; stop() does not wait that out."""
    broker = EmbeddedBroker().start()
    pid = broker.pid
    assert pid is not None
    with socket.create_connection(("127.0.0.1", broker.port)):
        started = time.monotonic()
        broker.stop(timeout_s=0.5)
        assert time.monotonic() - started < 4
        assert process_gone(pid)


OWNER_EXITS_WITHOUT_STOP = """
import sys
from pathlib import Path
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedRedis
broker = EmbeddedBroker().start()
server = EmbeddedRedis(Path(sys.argv[1])).start()
print(broker.pid, server.pid, flush=True)
"""


def test_an_owner_that_exits_without_stop_leaves_no_server(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", OWNER_EXITS_WITHOUT_STOP, str(tmp_path / "valkey")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pids = [int(word) for word in result.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        assert wait_for(lambda pid=pid: process_gone(pid)), f"pid {pid} outlived its owner"


def test_embedded_redis_answers_and_keeps_its_data_across_restarts(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    with EmbeddedRedis.under(data_dir) as server:
        pid = server.pid
        assert pid is not None
        assert server.url.startswith("redis://127.0.0.1:")
        client = redis.Redis.from_url(server.url)
        try:
            assert client.ping()
            client.set("gpuyield:probe", b"\x00kept\xff")
        finally:
            client.close()
    assert not server.is_running()
    assert wait_for(lambda: process_gone(pid))
    with EmbeddedRedis.under(data_dir) as again:
        client = redis.Redis.from_url(again.url)
        try:
            assert client.get("gpuyield:probe") == b"\x00kept\xff"
        finally:
            client.close()
    assert (data_dir / "valkey").is_dir()


def test_the_redis_url_fixture_serves_each_test_a_namespace(
    redis_url: str, redis_prefix: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.ping()
        client.set(f"{redis_prefix}probe", b"1")
        assert client.get(f"{redis_prefix}probe") == b"1"
    finally:
        client.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_broker_stops_when_its_owner_is_killed_outright(tmp_path: Path) -> None:
    owner = subprocess.Popen(  # a process that starts a broker, then is SIGKILLed
        [
            sys.executable,
            "-c",
            "import time; from gpuyield.streams.embedded import EmbeddedBroker; "
            "b = EmbeddedBroker().start(); print(b.pid, flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
    )
    assert owner.stdout is not None
    with owner.stdout:
        broker_pid = int(owner.stdout.readline())
    owner.kill()
    owner.wait(10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(broker_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(broker_pid, 9)
    pytest.fail("the broker outlived its SIGKILLed owner")


def _started_by_an_owner_then_killed(start_code: str) -> int:
    """The pid of a server a child process started before it was SIGKILLed."""
    owner = subprocess.Popen(
        [sys.executable, "-c", f"import sys, time; {start_code}; time.sleep(120)"],
        stdout=subprocess.PIPE,
    )
    assert owner.stdout is not None
    with owner.stdout:
        pid = int(owner.stdout.readline())
    owner.kill()
    owner.wait(10)
    return pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_embedded_redis_stops_when_its_owner_is_killed_outright(tmp_path: Path) -> None:
    pid = _started_by_an_owner_then_killed(
        "from pathlib import Path; from gpuyield.streams.embedded import EmbeddedRedis; "
        f"r = EmbeddedRedis(Path({str(tmp_path / 'valkey')!r})).start(); "
        "print(r.pid, flush=True)"
    )
    if not wait_for(lambda: process_gone(pid), timeout_s=20):
        os.kill(pid, 9)
        pytest.fail("the embedded Redis outlived its SIGKILLed owner")


def test_a_second_embedded_redis_on_one_data_directory_is_refused(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "valkey") as first:
        with pytest.raises(EmbeddedServiceError, match=f"owner pid {os.getpid()}"):
            EmbeddedRedis(tmp_path / "valkey").start()
        client = redis.Redis.from_url(first.url)
        try:
            assert client.ping(), "the refused start left the running server alone"
        finally:
            client.close()


def test_the_data_directory_is_free_again_once_its_redis_stopped(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "valkey"):
        pass
    with EmbeddedRedis(tmp_path / "valkey") as again:
        assert again.is_running()


def test_the_broker_restarts_on_its_port_while_old_connections_linger(tmp_path: Path) -> None:
    with EmbeddedBroker() as broker:
        port = broker.port
        # The broker closes this connection first when it stops: its side
        # of the socket then waits in TIME-WAIT on the broker's port.
        client = socket.create_connection(("127.0.0.1", port), timeout=2)
    client.close()
    with EmbeddedBroker(port=port) as again:
        assert again.port == port
        assert accepts(port)
