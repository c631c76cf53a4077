"""--metrics-port / GPUYIELD_METRICS_PORT: served for the command's lifetime, off when unset,
and a port already taken is one clear line and exit 2."""

from __future__ import annotations

import socket
import urllib.request

import pytest
import typer
from prometheus_client import CollectorRegistry, Counter

from gpuyield.service_io import metrics_served
from gpuyield.streams.settings import settings_from


def registry() -> CollectorRegistry:
    r = CollectorRegistry()
    Counter("gpuyield_example_total", "An example.", registry=r).inc()
    return r


def test_unset_serves_nothing() -> None:
    with metrics_served(None, settings_from({}), registry()) as served:
        assert served is None


def test_the_setting_serves_the_registry_until_the_block_ends() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with metrics_served(None, settings_from({"metrics_port": port}), registry()) as served:
        assert served is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert "gpuyield_example_total 1.0" in r.read().decode()


def test_a_taken_port_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with (
            pytest.raises(typer.Exit) as exited,
            metrics_served(port, settings_from({}), registry()),
        ):
            pass
    assert exited.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuyield: --metrics-port {port}: cannot listen")
    assert err.count("\n") == 1
