"""Faults on the live path (issue 11): a broker that restarts under its clients, a stop signal.

Real processes (``gpuyield worker``, ``gpuyield node-agent``), a real broker
and a real Redis. The broker restart uses a broker of its own, on a port that
the new broker takes over, as ``gpuyield broker --port P`` does. The stop
signal is checked on the same processes, after their restart: starting a
worker and a node agent costs most of this test's time.
"""

from __future__ import annotations

import secrets
import signal
import time
from pathlib import Path

import pytest
from live_worker import LiveNodeAgent, LiveWorker, Supervisor, decoded, publish, read_until
from test_worker import demand_events, keyed, pool_events

from gpuyield.schemas.messages import Decision, YieldAck, YieldCommand
from gpuyield.streams.broker_state import EXIT_BROKER_LOST
from gpuyield.streams.embedded import EmbeddedBroker
from gpuyield.streams.live_view_store import read_agents
from gpuyield.streams.shutdown import DEFAULT_SHUTDOWN_TIMEOUT_S

pytestmark = pytest.mark.slow
NOW = time.time()


async def test_a_broker_restart_under_a_worker_and_a_node_agent_is_survived_and_sigterm_ends_both(
    redis_url: str, redis_prefix: str, topic_prefix: str, tmp_path: Path
) -> None:
    broker = EmbeddedBroker(log_path=tmp_path / "tansu-1.log").start()
    port, bootstrap = broker.port, broker.bootstrap
    app_id, cluster_id = f"gy-{secrets.token_hex(4)}", f"c-{secrets.token_hex(4)}"
    fast = {"GPUYIELD_BROKER_CHECK_S": "0.5"}
    worker = LiveWorker(
        bootstrap, redis_url, topic_prefix, app_id, cluster_id, tmp_path, env=fast
    ).start()
    agent = LiveNodeAgent(
        bootstrap,
        redis_url,
        topic_prefix,
        app_id,
        cluster_id,
        tmp_path,
        name="node-agent",
        env=fast,
        node="gpu-00",  # where the decision below sends a yield (research/sweep-0's first pod)
        redis_prefix=redis_prefix,
    ).start()
    supervisors = [Supervisor(worker), Supervisor(agent)]
    kube = topic_prefix + "gpuyield.kube-events"
    decisions = topic_prefix + "gpuyield.decisions"
    commands = topic_prefix + "gpuyield.yield-commands"
    acks = topic_prefix + "gpuyield.yield-acks"
    try:
        worker.wait_ready()
        agent.wait_ready()
        await publish(bootstrap, kube, keyed(pool_events(NOW)))
        await publish(bootstrap, kube, keyed(demand_events("ft-before", NOW + 1)))
        await read_until(bootstrap, [commands], lambda s: len(s[commands]) >= 2)

        broker.stop()  # everything it held is gone
        broker = EmbeddedBroker(port, log_path=tmp_path / "tansu-2.log").start()

        worker.wait_ready(times=2)
        agent.wait_ready(times=2)
        # the watch relists on reconnecting: the cluster as it is now, then a new demand
        await publish(bootstrap, kube, keyed(pool_events(NOW + 10)))
        await publish(bootstrap, kube, keyed(demand_events("ft-after", NOW + 11)))
        seen = await read_until(bootstrap, [decisions, commands], lambda s: len(s[commands]) >= 2)
        assert [d.demand for d in decoded(seen[decisions], Decision)] == ["prod/ft-after"], (
            worker.tail()
        )
        ours = [c.command_id for c in decoded(seen[commands], YieldCommand) if c.node == agent.node]
        assert len(ours) == 1, f"no command for {agent.node}: {seen[commands]}"
        # the restarted node agent carries out its node's command (the acks topic may also
        # hold an ack that the old agent's producer delivered to the new broker)
        seen = await read_until(
            bootstrap,
            [acks],
            lambda s: any(a.command_id in ours for a in decoded(s[acks], YieldAck)),
        )
        assert {a.command_id for a in decoded(seen[acks], YieldAck)} >= set(ours), agent.tail()
        assert supervisors[0].exits == [EXIT_BROKER_LOST], worker.tail()
        assert supervisors[1].exits == [EXIT_BROKER_LOST], agent.tail()
        assert b"the broker lost its state" in worker.log.read_bytes()
        # the restarted worker reports its agents' health beside the live view
        health = read_agents(redis_url, cluster_id)
        assert health is not None, worker.tail()
        assert {(a["agent"], a["state"]) for a in health["agents"]} == {
            ("progress", "ok"),
            ("decider", "ok"),
        }
        # and SIGTERM ends both (as restarted) in order, within the shutdown bound
        for supervisor in supervisors:
            supervisor.close()
        for process in (worker, agent):
            assert process.process is not None
            process.process.send_signal(signal.SIGTERM)
        for process in (worker, agent):
            assert process.process is not None
            # a hang guard: the deadline ends either within its bound in any case
            status = process.process.wait(DEFAULT_SHUTDOWN_TIMEOUT_S + 10)
            assert status == 0, process.tail()  # an orderly stop, not the deadline's 124
            assert b"did not stop within" not in process.log.read_bytes()
    finally:
        for supervisor in supervisors:
            supervisor.close()
        agent.stop()
        worker.stop()
        broker.stop()
