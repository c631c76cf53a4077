"""A real worker's run, replayed: zero differences, from Kafka and from its archive.

The run is the worker's end-to-end scenario (a production fine-tune makes a
research sweep yield), with the worker ticking every half second; the
worker is stopped before the replay, so everything it took is published.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from live_worker import read_until
from test_worker import pool_then_demand
from typer.testing import CliRunner, Result

from gpuyield.cli import app
from gpuyield.streams.archive import archive_until_caught_up
from gpuyield.streams.topics import registry

pytestmark = pytest.mark.slow


def replay(env: dict[str, str], *args: str) -> Result:
    return CliRunner(env=env).invoke(app, ["replay", "--json", *args])


async def test_a_recorded_worker_run_replays_with_zero_differences(
    worker_factory, kafka_bootstrap: str, topic_prefix: str, redis_url: str, tmp_path: Path
) -> None:
    worker = worker_factory()
    worker.wait_ready()
    await pool_then_demand(worker, kafka_bootstrap, topic_prefix, redis_url)
    commands_topic = topic_prefix + "gpuyield.yield-commands"
    await read_until(
        kafka_bootstrap, [commands_topic], lambda s: len(s[commands_topic]) >= 2, settle_s=1.5
    )
    worker.stop()

    env = {"GPUYIELD_TOPIC_PREFIX": topic_prefix}
    from_kafka = replay(env, "--bootstrap", kafka_bootstrap)
    assert from_kafka.exit_code == 0, from_kafka.output + worker.tail()
    report = json.loads(from_kafka.stdout)
    assert report["differences"] == 0
    assert report["journalled"]
    assert report["steps"] > 10  # the pool, the progress, the demand and the ticks
    outcomes = [i["outcome"] for i in report["items"] if i["kind"] == "decision"]
    assert outcomes[0] == "yield"
    assert "skipped-yielding" in outcomes
    assert {i["status"] for i in report["items"]} == {"identical"}
    assert sum(1 for i in report["items"] if i["kind"] == "command") == 2

    topics = [spec.name for spec in registry(prefix=topic_prefix)]
    archive_until_caught_up(
        {"bootstrap_servers": kafka_bootstrap}, str(tmp_path / "archive"), topics
    )
    from_archive = replay(env, "--archive", str(tmp_path / "archive"))
    assert from_archive.exit_code == 0, from_archive.output
    assert json.loads(from_archive.stdout)["items"] == report["items"]
