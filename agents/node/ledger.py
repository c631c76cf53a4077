"""The node agent's memory in Redis: one record per command, and the set of those in flight.

Keys (``<prefix>`` is ``gpuyield`` unless configured, so tests and several
deployments can share a Redis)::

    <prefix>:node:<node>:cmd:<command_id>   the record (JSON), with a TTL of days
    <prefix>:node:<node>:inflight           set of command ids not done yet

Claiming a command is one atomic step (a Lua script): ``SET ... NX EX`` the
record and, only if it was new, add the id to the in-flight set. So a
command redelivered by Kafka, or delivered to a second agent process for the
same node, is claimed once; the second claimant gets the existing record. The
TTL (a week by default, longer than the commands topic keeps messages) is what
bounds the key space; a record outlives any redelivery of its command.

Every later write replaces the record (``SET ... XX KEEPTTL``); the last one
also drops the id from the in-flight set, in the same transaction.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from redis.asyncio import Redis

from gpuyield.agents.node.records import Phase, YieldRecord
from gpuyield.schemas.messages import YieldCommand

log = logging.getLogger(__name__)

WEEK_S = 7 * 24 * 3600

_CLAIM = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
    redis.call('SADD', KEYS[2], ARGV[3])
    return false
end
return redis.call('GET', KEYS[1])
"""


class Ledger:
    """Idempotency and in-flight records of one node's agent."""

    def __init__(
        self, redis: Redis, node: str, *, prefix: str = "gpuyield", ttl_s: int = WEEK_S
    ) -> None:
        self._redis = redis
        self._base = f"{prefix}:node:{node}"
        self._ttl_s = ttl_s

    def record_key(self, command_id: str) -> str:
        return f"{self._base}:cmd:{command_id}"

    @property
    def inflight_key(self) -> str:
        return f"{self._base}:inflight"

    async def claim(self, command: YieldCommand, now: float) -> tuple[YieldRecord, bool]:
        """The command's record and True if this call created it (the command is new)."""
        fresh = YieldRecord(command=command, received_at=now)
        existing = await cast(
            "Any",
            self._redis.eval(
                _CLAIM,
                2,
                self.record_key(command.command_id),
                self.inflight_key,
                fresh.model_dump_json(),
                str(self._ttl_s),
                command.command_id,
            ),
        )
        if existing is None:
            return fresh, True
        return YieldRecord.model_validate_json(existing), False

    async def save(self, record: YieldRecord) -> None:
        """Replace the record; a ``done`` record also leaves the in-flight set."""
        key = self.record_key(record.command_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(key, record.model_dump_json(), xx=True, keepttl=True)
            if record.phase is Phase.DONE:
                pipe.srem(self.inflight_key, record.command_id)
            stored, *_ = await pipe.execute()
        if not stored:
            # The record expired (or was deleted) under a running yield: write it afresh,
            # so the outcome is still known if Kafka redelivers the command.
            log.warning("record of command %s was gone; rewriting it", record.command_id)
            await self._redis.set(key, record.model_dump_json(), ex=self._ttl_s)
            if record.phase is not Phase.DONE:
                await self._redis.sadd(self.inflight_key, record.command_id)

    async def get(self, command_id: str) -> YieldRecord | None:
        raw = await self._redis.get(self.record_key(command_id))
        return None if raw is None else YieldRecord.model_validate_json(raw)

    async def in_flight(self) -> list[YieldRecord]:
        """The records not done yet, oldest first (what a restarted agent must finish)."""
        ids = sorted(
            member.decode() if isinstance(member, bytes) else str(member)
            for member in await cast("Any", self._redis.smembers(self.inflight_key))
        )
        records: list[YieldRecord] = []
        for command_id in ids:
            record = await self.get(command_id)
            if record is None or not record.in_flight:
                # Expired, or done but not yet removed (a crash between two writes).
                await cast("Any", self._redis.srem(self.inflight_key, command_id))
                continue
            records.append(record)
        records.sort(key=lambda r: (r.received_at, r.command_id))
        return records
