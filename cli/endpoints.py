"""Where a running ``gpuyield worker``'s embedded broker and Redis listen.

With no ``GPUYIELD_KAFKA_BOOTSTRAP`` (or ``GPUYIELD_REDIS_URL``) the worker
starts embedded services and writes their addresses to
``<state_dir>/endpoints.json``; ``status``, ``watch``, ``archive``, ``audit``,
``alerts`` and node agents on the same machine read them here. This module
is kept apart from ``worker_command`` so that those commands do not import
Faust, the Kubernetes client and the worker's agents just to find a broker.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuyield.streams.settings import Settings

ENDPOINTS_FILE = "endpoints.json"


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: list[str]
    redis_url: str
    broker_alive: Callable[[], bool] | None = None
    """Whether the embedded broker this process started still runs (None: not embedded)."""


def endpoints_path(settings: Settings) -> Path:
    return Path(settings.state_dir) / ENDPOINTS_FILE


def read_endpoints(settings: Settings) -> Endpoints | None:
    """What the settings say, completed from a running worker's embedded services."""
    recorded: dict[str, Any] = {}
    path = endpoints_path(settings)
    if path.is_file():
        with contextlib.suppress(OSError, ValueError):
            recorded = json.loads(path.read_text(encoding="utf-8"))
    bootstrap = settings.kafka_bootstrap or recorded.get("kafka_bootstrap")
    redis_url = settings.redis_url or recorded.get("redis_url")
    if not bootstrap or not redis_url:
        return None
    return Endpoints(list(bootstrap), str(redis_url))


def recorded_bootstrap(settings: Settings) -> list[str] | None:
    """The Kafka to read: the settings', else a running worker's embedded broker."""
    endpoints = read_endpoints(settings)
    return settings.kafka_bootstrap or (endpoints.kafka_bootstrap if endpoints else None)
