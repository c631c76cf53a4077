"""Where the live view lives: one JSON document per cluster in Redis.

A single key, rewritten whole, so a reader never sees half an update and a
dashboard needs one GET. It expires when the worker stops refreshing it, so a
stale view cannot pass for a live one.
"""

from __future__ import annotations

import json
from typing import Any

import redis
import redis.asyncio as aioredis

VIEW_TTL_S = 300


def view_key(cluster_id: str) -> str:
    return f"gpuyield:{cluster_id}:view"


class LiveViewWriter:
    """The worker's side: publish the newest view."""

    def __init__(self, url: str, cluster_id: str) -> None:
        self.client = aioredis.Redis.from_url(url)
        self.key = view_key(cluster_id)

    async def publish(self, view: dict[str, Any], now: float) -> None:
        await self.client.set(self.key, json.dumps(view, sort_keys=True), ex=VIEW_TTL_S)

    async def close(self) -> None:
        await self.client.aclose()


def read_view(url: str, cluster_id: str) -> dict[str, Any] | None:
    """The current view, or None when no worker has published one recently."""
    client = redis.Redis.from_url(url, socket_connect_timeout=3)
    try:
        raw = client.get(view_key(cluster_id))
    finally:
        client.close()
    if raw is None:
        return None
    view: dict[str, Any] = json.loads(raw)
    return view
