"""The controller end to end: watch events and heartbeats in, decisions and yields out.

Real processes (``gpuyield worker``), the session's Kafka-protocol broker and
a real Redis; the cluster is a small shared pool described by the objects a
Kubernetes API server would send.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "controller"))

from cluster_objects import event, node, pod, pod_group, queue
from live_worker import GPUYIELD, decoded, publish, read_until

from gpuyield.schemas.messages import (
    Alert,
    AlertKind,
    AlertState,
    DeadLetter,
    Decision,
    Heartbeat,
    KubeEvent,
    KubeEventType,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)
from gpuyield.streams.dead_letters import original_bytes
from gpuyield.streams.live_view_store import read_view

pytestmark = pytest.mark.slow
NOW = time.time()


def pool_events(at: float) -> list[KubeEvent]:
    """4 nodes x 8 GPUs; research borrows all 32 with two 2-pod gangs."""
    objs = [node(f"gpu-{i:02d}") for i in range(4)]
    objs += [
        queue("production", weight=4, capability=32, guarantee=16, reclaimable=False),
        queue("research", weight=1, capability=32),
    ]
    for j in range(2):
        objs.append(pod_group(f"sweep-{j}", namespace="research", queue="research", min_member=2))
        objs += [
            pod(
                f"sweep-{j}",
                k,
                namespace="research",
                node=f"gpu-{2 * j + k:02d}",
                started=at - 6 * 3600,
            )
            for k in range(2)
        ]
    return [event(o, at) for o in objs]


def demand_events(name: str, at: float) -> list[KubeEvent]:
    group = pod_group(
        name, namespace="prod", queue="production", phase="Inqueue", unschedulable=True
    )
    return [event(group, at), event(pod(name, 0, namespace="prod", priority=1000), at)]


async def wait_for_view(
    redis_url: str, cluster_id: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 30
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    view = None
    while asyncio.get_running_loop().time() < deadline:
        view = read_view(redis_url, cluster_id)
        if view is not None and done(view):
            return view
        await asyncio.sleep(0.2)
    raise AssertionError(f"the live view never got there: {view}")


def keyed(events: list[KubeEvent]) -> list[tuple[str, KubeEvent]]:
    return [(e.key, e) for e in events]


async def pool_then_demand(
    worker: Any, kafka_bootstrap: str, topic_prefix: str, redis_url: str
) -> None:
    """The shared pool, research/sweep-0 at 95% and checkpointed 20 s ago, then ft-llama's demand.

    The heartbeat's summary must reach the decider before the demand does, so the
    demand is published only once the worker's live view shows the progress.
    """
    heartbeat = Heartbeat(
        job="research/sweep-0",
        pod="sweep-0-worker-0",
        step=9_500,
        progress=0.95,
        last_checkpoint_at=NOW - 20,
        sent_at=NOW - 10,
    )
    await publish(
        kafka_bootstrap, topic_prefix + "gpuyield.heartbeats", [(heartbeat.job, heartbeat)]
    )
    await publish(kafka_bootstrap, topic_prefix + "gpuyield.kube-events", keyed(pool_events(NOW)))
    await wait_for_view(
        redis_url, worker.cluster_id, lambda v: any(j["progress"] == 0.95 for j in v["jobs"])
    )
    await publish(
        kafka_bootstrap,
        topic_prefix + "gpuyield.kube-events",
        keyed(demand_events("ft-llama", NOW + 1)),
    )


async def test_a_production_gang_left_pending_gets_one_decision_and_its_yield_commands(
    worker_factory, kafka_bootstrap: str, topic_prefix: str, redis_url: str
) -> None:
    worker = worker_factory()
    worker.wait_ready()
    await pool_then_demand(worker, kafka_bootstrap, topic_prefix, redis_url)
    decisions_topic = topic_prefix + "gpuyield.decisions"
    commands_topic = topic_prefix + "gpuyield.yield-commands"
    seen = await read_until(
        kafka_bootstrap,
        [decisions_topic, commands_topic],
        lambda s: len(s[commands_topic]) >= 2,
        settle_s=2.0,
    )
    decisions = [d for d in decoded(seen[decisions_topic], Decision) if d.commands]
    commands = decoded(seen[commands_topic], YieldCommand)
    assert [d.demand for d in decisions] == ["prod/ft-llama"], worker.tail()
    # sweep-0 is 95% done and just checkpointed: sweep-1 yields instead
    assert [v.job for v in decisions[0].plan.victims] == ["research/sweep-1"]
    assert sorted((c.node, c.pods) for c in commands) == [
        ("gpu-02", ("sweep-1-worker-0",)),
        ("gpu-03", ("sweep-1-worker-1",)),
    ]
    view = await wait_for_view(redis_url, worker.cluster_id, lambda v: v["yields_in_flight"])
    assert {y["job"] for y in view["yields_in_flight"]} == {"research/sweep-1"}
    status = subprocess.run(
        [GPUYIELD, "status"],
        env={
            **os.environ,
            "GPUYIELD_REDIS_URL": redis_url,
            "GPUYIELD_CLUSTER_ID": worker.cluster_id,
            "COLUMNS": "200",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Yields in flight" in status.stdout
    assert "research/sweep-1" in status.stdout
    assert "prod/ft-llama" in status.stdout


HUGE_BEAT = b'{"job": "research/y", "note": "' + b"y" * 900_000 + b'"}'


async def test_unreadable_messages_go_to_dead_letters_and_the_worker_keeps_deciding(
    worker_factory, kafka_bootstrap: str, topic_prefix: str
) -> None:
    worker = worker_factory()
    worker.wait_ready()
    kube = topic_prefix + "gpuyield.kube-events"
    bad_pod = pod("broken", 0, namespace="prod")
    bad_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "half"
    await publish(
        kafka_bootstrap,
        kube,
        [
            ("garbage", b"\x00\xff not json"),
            ("future", b'{"v": 7, "type": "ADDED"}'),
            ("invalid", b'{"v": 1, "type": "ADDED", "kind": "Pod"}'),
            ("unreadable", event(bad_pod, NOW)),
            ("huge", b"\x00" + b"x" * 900_000),  # its dead letter must still fit (issue 11)
        ],
    )
    await publish(
        kafka_bootstrap,
        topic_prefix + "gpuyield.heartbeats",
        [
            ("research/x", b'{"job": "research/x", "step": -3}'),
            ("research/y", HUGE_BEAT),
        ],
    )
    await publish(kafka_bootstrap, kube, keyed(pool_events(NOW)))
    await publish(kafka_bootstrap, kube, keyed(demand_events("ft-llama", NOW + 1)))
    letters_topic = topic_prefix + "gpuyield.dead-letters"
    commands_topic = topic_prefix + "gpuyield.yield-commands"
    seen = await read_until(
        kafka_bootstrap,
        [letters_topic, commands_topic],
        lambda s: len(s[letters_topic]) >= 7 and len(s[commands_topic]) >= 2,
    )
    letters = decoded(seen[letters_topic], DeadLetter)
    reasons = sorted(letter.reason for letter in letters)
    assert len(letters) == 7, worker.tail()
    # the two 900 KB messages, from the decider's and the progress agent's topics
    huge = sorted((x.source_topic, x.value_size) for x in letters if x.truncated)
    assert huge == [(topic_prefix + "gpuyield.heartbeats", len(HUGE_BEAT)), (kube, 900_001)]
    assert any(r.startswith("not JSON") for r in reasons)
    assert any(r.startswith("unknown format version 7") for r in reasons)
    assert any(r.startswith("KubeEvent:") for r in reasons)
    assert any("nvidia.com/gpu must be a whole number" in r for r in reasons)
    assert any(r.startswith("Heartbeat:") for r in reasons)
    garbage = next(x for x in letters if x.reason.startswith("not JSON"))
    assert original_bytes(garbage) == (b"garbage", b"\x00\xff not json")
    assert len(decoded(seen[commands_topic], YieldCommand)) == 2


async def test_a_repeated_demand_inside_the_cooldown_evicts_nobody_else(
    worker_factory, kafka_bootstrap: str, topic_prefix: str
) -> None:
    worker = worker_factory()
    worker.wait_ready()
    kube = topic_prefix + "gpuyield.kube-events"
    await publish(kafka_bootstrap, kube, keyed(pool_events(NOW)))
    for attempt in range(4):  # Volcano reports the same shortage again and again
        await publish(kafka_bootstrap, kube, keyed(demand_events("ft-llama", NOW + attempt)))
    commands_topic = topic_prefix + "gpuyield.yield-commands"
    seen = await read_until(
        kafka_bootstrap, [commands_topic], lambda s: len(s[commands_topic]) >= 2, settle_s=5.0
    )
    commands = decoded(seen[commands_topic], YieldCommand)
    assert len(commands) == 2, worker.tail()
    assert len({c.job for c in commands}) == 1


async def test_a_new_owner_recovers_the_yields_in_flight_and_never_issues_them_twice(
    worker_factory, kafka_bootstrap: str, topic_prefix: str, redis_url: str
) -> None:
    first = worker_factory("first")
    first.wait_ready()
    kube = topic_prefix + "gpuyield.kube-events"
    commands_topic = topic_prefix + "gpuyield.yield-commands"
    await publish(kafka_bootstrap, kube, keyed(pool_events(NOW)))
    await publish(kafka_bootstrap, kube, keyed(demand_events("ft-llama", NOW + 1)))
    await read_until(kafka_bootstrap, [commands_topic], lambda s: len(s[commands_topic]) >= 2)
    second = worker_factory("second")
    second.wait_ready()
    first.kill()  # mid-flight: its yields are not acknowledged yet
    # Volcano still reports the first shortage, and a second one arrives.
    await publish(kafka_bootstrap, kube, keyed(demand_events("ft-llama", NOW + 30)))
    await publish(kafka_bootstrap, kube, keyed(demand_events("ft-mistral", NOW + 31)))
    alerts_topic = topic_prefix + "gpuyield.alerts"
    letters_topic = topic_prefix + "gpuyield.dead-letters"
    seen = await read_until(
        kafka_bootstrap,
        [commands_topic, alerts_topic, letters_topic],
        lambda s: len(s[commands_topic]) >= 4,
        timeout_s=150,
        settle_s=3.0,
    )
    commands = decoded(seen[commands_topic], YieldCommand)
    by_job: dict[str, int] = {}
    for command in commands:
        by_job[command.job] = by_job.get(command.job, 0) + 1
    diagnosis = f"alerts {seen[alerts_topic]}, dead letters {seen[letters_topic]}\n"
    assert by_job == {"research/sweep-0": 2, "research/sweep-1": 2}, diagnosis + second.tail(80)
    assert b"decided for prod/ft-mistral" in second.log.read_bytes()


async def test_a_livelock_raises_its_alert_once_and_the_evictions_stop(
    worker_factory, kafka_bootstrap: str, topic_prefix: str, redis_url: str
) -> None:
    """Production fine-tunes keep taking the GPUs back from one research job that Volcano
    keeps requeueing: the third eviction is a livelock, and the fourth never comes."""
    # The rounds' event times run days ahead of the workers' ticks (days in seconds), so
    # the clock's skew bound is opened wide: this test is about the livelock, not time.
    worker = worker_factory(env={"GPUYIELD_MAX_CLOCK_SKEW_S": str(10 * 86400)})
    worker.wait_ready()
    kube = topic_prefix + "gpuyield.kube-events"
    commands_topic = topic_prefix + "gpuyield.yield-commands"
    alerts_topic = topic_prefix + "gpuyield.alerts"
    base = [
        node("gpu-00"),
        queue("production", capability=8, guarantee=8, reclaimable=False),
        queue("research", capability=8),
    ]
    await publish(kafka_bootstrap, kube, keyed([event(o, NOW) for o in base]))
    for round_ in range(5):
        t = NOW + round_ * 1000  # event time runs ahead of the wall clock: days in seconds
        research = pod("sweep", 0, namespace="research", node="gpu-00", started=t)
        await publish(
            kafka_bootstrap,
            kube,
            keyed(
                [
                    event(pod_group("sweep", namespace="research", queue="research"), t),
                    event(research, t),
                ]
            ),
        )
        name = f"ft-{round_}"
        await publish(kafka_bootstrap, kube, keyed(demand_events(name, t + 700)))
        if round_ < 3:
            seen = await read_until(
                kafka_bootstrap,
                [commands_topic],
                lambda s, n=round_ + 1: len(s[commands_topic]) >= n,
            )
            command = decoded(seen[commands_topic], YieldCommand)[-1]
            ack = YieldAck(
                command_id=command.command_id,
                decision_id=command.decision_id,
                node="gpu-00",
                job="research/sweep",
                outcome=YieldOutcome.CHECKPOINTED,
                acked_at=t + 750,
            )
            await publish(kafka_bootstrap, topic_prefix + "gpuyield.yield-acks", [(ack.job, ack)])
        else:
            await wait_for_view(
                redis_url,
                worker.cluster_id,
                lambda v, n=name: any(d["job"] == f"prod/{n}" for d in v["demands"]),
            )
        placed = pod(name, 0, namespace="prod", priority=1000, node="gpu-00", started=t + 760)
        await publish(
            kafka_bootstrap,
            kube,
            keyed(
                [
                    event(research, t + 750, KubeEventType.DELETED),
                    event(placed, t + 760),
                    event(pod_group(name, namespace="prod", queue="production"), t + 760),
                    event(placed, t + 900, KubeEventType.DELETED),
                ]
            ),
        )
    seen = await read_until(
        kafka_bootstrap,
        [commands_topic, alerts_topic],
        lambda s: len(s[alerts_topic]) >= 1,
        settle_s=3.0,
    )
    commands = decoded(seen[commands_topic], YieldCommand)
    alerts = decoded(seen[alerts_topic], Alert)
    assert len(commands) == 3, worker.tail()
    livelocks = [a for a in alerts if a.kind is AlertKind.LIVELOCK]
    assert [a.job for a in livelocks] == ["research/sweep"]
    # the demands it can no longer serve are reported, not forced
    unservable = [
        a.job
        for a in alerts
        if a.kind is AlertKind.DEMAND_UNSERVABLE and a.state is AlertState.FIRING
    ]
    assert unservable == ["prod/ft-3", "prod/ft-4"]  # (resolved as each is placed)
