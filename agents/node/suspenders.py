"""After a yield, the job must not come straight back: the ``JobSuspender`` protocol.

Once its pods are gone, a yielded Volcano Job is *suspended* (aborted, to be
resumed later), never restarted: a restart would put it back into the very
shortage it yielded to, and Volcano's ``RestartJob`` counts against the job's
``maxRetry``, so a few preemptions would turn it ``Failed`` (volcano#2560).
``volcano.VolcanoJobSuspender`` does it with Volcano's bus ``Command`` objects;
``LocalJobSuspender`` records the state for runs outside Kubernetes.

Both calls must be idempotent per ``command_id``: after a crash the agent
calls them again for the same command.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, cast

from redis.asyncio import Redis


class JobGone(RuntimeError):
    """The job to suspend or resume does not exist (any more)."""


class JobSuspender(Protocol):
    async def suspend(self, job: str, *, command_id: str, reason: str) -> None:
        """Release the job's resources and keep it from restarting until resumed."""
        ...

    async def resume(self, job: str, *, command_id: str) -> None:
        """Let a suspended job run again (from its latest checkpoint)."""
        ...


class LocalJobSuspender:
    """Runs outside Kubernetes: the job's state goes to a Redis hash for whoever runs the job.

    ``<prefix>:local-jobs`` maps a job to ``{"state": "suspended"|"resumed",
    "command_id": ..., "reason": ...}``; a local launcher (the demo's simulated
    cluster) reads it to know not to restart a yielded job, and when to restart
    a resumed one. Writing the same state twice is harmless.
    """

    def __init__(self, redis: Redis, *, prefix: str = "gpuyield") -> None:
        self._redis = redis
        self.key = f"{prefix}:local-jobs"

    async def suspend(self, job: str, *, command_id: str, reason: str) -> None:
        await self._write(job, {"state": "suspended", "command_id": command_id, "reason": reason})

    async def resume(self, job: str, *, command_id: str) -> None:
        await self._write(job, {"state": "resumed", "command_id": command_id, "reason": ""})

    async def state(self, job: str) -> dict[str, Any] | None:
        raw = await cast("Any", self._redis.hget(self.key, job))
        return None if raw is None else cast("dict[str, Any]", json.loads(raw))

    async def _write(self, job: str, value: dict[str, str]) -> None:
        await cast("Any", self._redis.hset(self.key, job, json.dumps(value, sort_keys=True)))
