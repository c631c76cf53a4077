"""Where the live view lives: one JSON document per cluster in Redis.

A single key, rewritten whole, so a reader never sees half an update and a
dashboard needs one GET. It expires when the worker stops refreshing it, so a
stale view cannot pass for a live one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio as aioredis
from pydantic import BaseModel

VIEW_TTL_S = 300


def view_key(cluster_id: str) -> str:
    return f"gpuyield:{cluster_id}:view"


def agents_key(cluster_id: str) -> str:
    """The worker agents' health (``agent_stalls``), beside the view: a stalled decider
    stops refreshing the view, so its stall must be reported elsewhere."""
    return f"gpuyield:{cluster_id}:agents"


class LiveViewWriter:
    """The worker's side: publish the newest view."""

    def __init__(self, url: str, cluster_id: str) -> None:
        self.client = aioredis.Redis.from_url(url)
        self.key = view_key(cluster_id)
        self.agents_key = agents_key(cluster_id)

    async def publish(self, view: dict[str, Any], now: float) -> None:
        await self.client.set(self.key, json.dumps(view, sort_keys=True), ex=VIEW_TTL_S)

    async def publish_agents(self, report: Sequence[BaseModel], now: float) -> None:
        body = {"updated_at": now, "agents": [h.model_dump(mode="json") for h in report]}
        await self.client.set(self.agents_key, json.dumps(body, sort_keys=True), ex=VIEW_TTL_S)

    async def close(self) -> None:
        await self.client.aclose()


def read_view(url: str, cluster_id: str) -> dict[str, Any] | None:
    """The current view, or None when no worker has published one recently."""
    return _read(url, view_key(cluster_id))


def read_agents(url: str, cluster_id: str) -> dict[str, Any] | None:
    """The agents' health (``{"updated_at", "agents"}``), or None when none was published."""
    return _read(url, agents_key(cluster_id))


def _read(url: str, key: str) -> dict[str, Any] | None:
    client = redis.Redis.from_url(url, socket_connect_timeout=3)
    try:
        raw = client.get(key)
    finally:
        client.close()
    if raw is None:
        return None
    value: dict[str, Any] = json.loads(raw)
    return value
