"""A real ``gpuyield worker``'s resident memory holding a 10,000-node decider table.

The table of ``decider_stream``'s cluster (every watched object's record, as
``bench_decider_scale.load`` builds it) is written to the decider table's
changelog topic on the embedded broker, as a worker that ran the cluster for
a while would have left it; a worker process then starts, recovers the table
from the changelog, builds the decider's index on its first step (its own
ticks) and keeps deciding. The process's resident memory (``VmRSS``) and peak
(``VmHWM``) are read from ``/proc`` once it has stepped, beside those of a
worker on an empty table.

    .venv/bin/python bench/bench_worker_memory.py [--nodes 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from aiokafka import AIOKafkaProducer
from bench_controller import GPUYIELD, machine, pick_redis
from bench_decider_scale import load
from decider_stream import Stream

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.schemas.messages import Tick
from gpuyield.streams.embedded import EmbeddedBroker
from gpuyield.streams.live_view_store import view_key
from gpuyield.streams.topics import TopicSpec, ensure_topics, registry


def memory(pid: int) -> dict[str, float]:
    """The process's VmRSS and VmHWM in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) / 1024
    return out


async def write_changelog(bootstrap: str, topic: str, nodes: int) -> int:
    """The decider table of a ``nodes``-node cluster, one record per request (Tansu)."""
    table = load(Stream(nodes), ControllerConfig()) if nodes else {}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=16384, linger_ms=0)
    await producer.start()
    try:
        for key, value in table.items():
            await (
                await producer.send(
                    topic,
                    key=key.encode(),
                    value=json.dumps(value, separators=(",", ":")).encode(),
                    partition=0,
                )
            )
    finally:
        await producer.stop()
    return len(table)


async def measure(
    bootstrap: str, redis_url: str, nodes: int, state: Path, wait_s: float
) -> dict[str, Any]:
    app_id = f"mem-{secrets.token_hex(3)}"
    prefix = f"m{secrets.token_hex(3)}."
    changelog = TopicSpec(
        name=f"{app_id}-decider-changelog",
        key="record key",
        value_type=Tick,  # not read: the records are the table's JSON
        partitions=1,  # the decider's table has one partition, like its inputs
        cleanup_policy="compact",
        retention_ms=None,
        why="the decider table a worker recovers",
    )
    await ensure_topics({"bootstrap_servers": bootstrap}, [*registry(prefix=prefix), changelog], 1)
    started = time.monotonic()
    records = await write_changelog(bootstrap, changelog.name, nodes)
    written_s = time.monotonic() - started
    state.mkdir(parents=True, exist_ok=True)
    log = state / "worker.log"
    env = {
        **os.environ,
        "GPUYIELD_KAFKA_BOOTSTRAP": bootstrap,
        "GPUYIELD_KAFKA_PROFILE": "tansu",
        "GPUYIELD_REDIS_URL": redis_url,
        "GPUYIELD_TOPIC_PREFIX": prefix,
        "GPUYIELD_APP_ID": app_id,
        "GPUYIELD_CLUSTER_ID": app_id,
        "GPUYIELD_STATE_DIR": str(state),
    }
    with log.open("ab") as out:
        process = subprocess.Popen(
            [GPUYIELD, "worker", "--tick-s", "2"], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        started = time.monotonic()
        while b"Worker ready" not in log.read_bytes():
            if process.poll() is not None:
                raise RuntimeError(f"the worker exited:\n{log.read_text()[-3000:]}")
            await asyncio.sleep(0.5)
        ready_s = time.monotonic() - started
        await asyncio.sleep(wait_s)  # its ticks: the first step builds the index
        # The live view it publishes lists the jobs of the table it recovered.
        raw = redis.Redis.from_url(redis_url).get(view_key(app_id))
        jobs = len(json.loads(raw)["jobs"]) if raw else None
        if jobs is None:  # it has not stepped: say why
            print(log.read_text(errors="replace")[-4000:])
        return {"nodes": nodes, "records": records, "written_s": written_s,
                "ready_s": ready_s, "jobs_in_live_view": jobs, **memory(process.pid)}  # fmt: skip
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
        if process.poll() is None:
            process.kill()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--wait-s", type=float, default=60.0)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        broker = stack.enter_context(EmbeddedBroker(log_path=state / "tansu.log"))
        redis_url = pick_redis(stack, state)
        for nodes in (0, args.nodes):
            result = await measure(
                broker.bootstrap, redis_url, nodes, state / str(nodes), args.wait_s
            )
            print(result, flush=True)
    print(f"machine: {machine()}")


if __name__ == "__main__":
    asyncio.run(main())
