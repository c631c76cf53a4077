"""The demo's clocks: the controller's policy timers compressed by ``SPEED``, real-time grace.

The demo compresses a cluster's hours into a minute or two, so the decider's
timers that are about *cluster* time are divided by ``scenario.SPEED``: the
cooldown that spares a freshly started job, the resume backoff after an
eviction, the eviction-limit window. What is about *process* time stays real:
a trainer needs real seconds to reach a step boundary and write its
checkpoint, so the grace period, the ack slack and the node agents' waits are
wall seconds (short ones, for a snappy demo). Timestamps are the wall clock
everywhere (trainers, node agents and the decider compare them).

The demo's deployment is one ``Settings`` (``demo_settings``), the model
every ``gpuyield`` command reads: its worker gets it as ``GPUYIELD_*``
variables (``settings_env``) and reads it back with ``load_settings``; its
node agents are configured from the same object. It is built from these
values alone: the caller's own ``GPUYIELD_*`` variables (a deployment's
cooldown of ten real minutes, a real Kafka) never reach the demo, whose
timers only make sense compressed.
"""

from __future__ import annotations

from pathlib import Path

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.demo.scenario import SPEED
from gpuyield.schemas import Policy
from gpuyield.schemas.config import NodeAgentKnobs
from gpuyield.streams.settings import Settings, settings_from

TICK_S = 0.5
"""The worker's tick: how soon deadlines, retries and resumes are looked at."""


def demo_policy(grace_s: float) -> Policy:
    stock = Policy()
    return Policy(
        alpha=stock.alpha,
        beta=stock.beta,
        cooldown_s=stock.cooldown_s / SPEED,
        max_evictions=stock.max_evictions,
        eviction_window_s=stock.eviction_window_s / SPEED,
        grace_s=grace_s,
    )


def demo_controller_config(grace_s: float) -> ControllerConfig:
    stock = ControllerConfig()
    return ControllerConfig(
        policy=demo_policy(grace_s),
        demand_retry_s=3.0,
        ack_slack_s=10.0,
        reservation_s=30.0,
        resume_backoff_base_s=stock.resume_backoff_base_s / SPEED,
    )


def demo_settings(
    *,
    bootstrap: str,
    redis_url: str,
    state_dir: Path,
    grace_s: float,
    app_id: str,
    cluster_id: str,
    partitions: int,
) -> Settings:
    """The demo's deployment: its embedded broker and Redis, its compressed policy timers."""
    return settings_from(
        {
            "kafka_bootstrap": bootstrap,
            "kafka_profile": "tansu",
            "redis_url": redis_url,
            "state_dir": state_dir,
            "app_id": app_id,
            "cluster_id": cluster_id,
            "topic_prefix": "",
            "topic_partitions": partitions,
            "controller": demo_controller_config(grace_s),
            "node_agent": DEMO_NODE_AGENT,
        }
    )


DEMO_NODE_AGENT = NodeAgentKnobs(
    node_settle_s=1.5,
    node_poll_s=0.2,
    node_exit_grace_s=5.0,
    node_kill_timeout_s=10.0,
    node_release_timeout_s=20.0,
)
"""Shorter waits than the defaults: a demo's trainers are a few steps a second on one machine."""
