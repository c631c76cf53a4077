"""What every command that reads the settings does first: read them, set up logging.

One place, so every command reports a bad setting the same way (exit 2, one
line naming the variable) and logs in the same format.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from prometheus_client import CollectorRegistry

from gpuyield.cli_io import fail
from gpuyield.streams.metrics import MetricsServer, serve
from gpuyield.streams.settings import (
    LoadedSettings,
    Settings,
    SettingsError,
    load_settings_traced,
)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def settings_or_fail(config: Path | None = None) -> Settings:
    """The settings from the environment and ``config``, or exit 2 naming what is wrong."""
    return traced_settings_or_fail(config).settings


def traced_settings_or_fail(config: Path | None = None) -> LoadedSettings:
    """``settings_or_fail``, with where each value came from (``gpuyield config``, simulate)."""
    try:
        return load_settings_traced(config)
    except SettingsError as exc:
        fail(str(exc))


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)


MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve Prometheus metrics at /metrics on this port (default: GPUYIELD_METRICS_PORT; "
        "unset: none).",
    ),
]


@contextlib.contextmanager
def metrics_served(
    flag: int | None, settings: Settings, registry: CollectorRegistry
) -> Iterator[MetricsServer | None]:
    """Serve ``registry`` on ``--metrics-port`` (else the setting) for the block; exit 2 if
    the port cannot be bound. Yields None when neither asks for metrics."""
    port = flag if flag is not None else settings.metrics_port
    if port is None:
        yield None
        return
    try:
        server = serve(port, registry)
    except OSError as exc:
        fail(f"--metrics-port {port}: cannot listen ({exc.strerror or exc})")
    logging.getLogger(__name__).info("metrics on :%d/metrics", server.port)
    try:
        yield server
    finally:
        server.close()
