"""The demo's clocks: policy timers compressed by ``SPEED``, real-time grace, and how it waits.

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

Nothing here may decide the outcome on a slow machine (a busy core, a shared
CI runner): every wall-clock limit is an upper bound for something that takes
a second or two on an idle machine, sized so that a machine several times
slower still stays inside it, and each one that only bounds a wait costs
nothing when things are fast (a yield ends when its trainer exits, a
reservation when its job is placed). The demo itself never fails on elapsed
time alone: ``Watchdog`` fails a wait only when nothing it waits on has
moved for a long while.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.demo.scenario import SPEED
from gpuyield.schemas import Policy
from gpuyield.schemas.config import NodeAgentKnobs
from gpuyield.streams.settings import Settings, settings_from

TICK_S = 0.5
"""The worker's tick: how soon deadlines, retries and resumes are looked at."""

ACK_SLACK_S = 60.0
"""After a yield's deadline, how long the decider waits for its ack before it gives up on it
(and lets the demand plan again, which evicts someone else). It must cover the node agent's
slowest legitimate path: a hard kill at the deadline, ``kill_timeout_s`` for the pods to go and
``release_timeout_s`` of retried suspension, then the ack's publication; 10 s, the old
setting, was shorter than that, so a slow yield could look lost and cost a second eviction."""

RESERVATION_S = 120.0
"""How long the GPUs freed for a preemptor stay held for it. It must outlast the slowest
legitimate yield (the grace, ``ACK_SLACK_S``) plus the simulated Volcano's placement: a hold
that expires while its pods are still leaving hands the GPUs to whichever job asks next, the
oscillation reservations exist to stop. It ends early, when the preemptor is placed, so a long
one costs nothing on a fast machine."""


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
        ack_slack_s=ACK_SLACK_S,
        reservation_s=RESERVATION_S,
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
    node_agent: NodeAgentKnobs | None = None,
) -> Settings:
    """The demo's deployment: its embedded broker and Redis, its compressed policy timers;
    ``node_agent`` the node agents' waits (None: ``DEMO_NODE_AGENT``)."""
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
            "node_agent": node_agent or DEMO_NODE_AGENT,
        }
    )


DEMO_NODE_AGENT = NodeAgentKnobs(
    node_settle_s=3.0,
    node_poll_s=0.2,
    node_exit_grace_s=15.0,
    node_kill_timeout_s=10.0,
    node_release_timeout_s=20.0,
)
"""Shorter waits than the defaults: a demo's trainers are a few steps a second on one machine.

``node_exit_grace_s`` is what a trainer gets from its checkpoint to its exit
before it is killed: a torch process needs a second to tear down when idle
and was measured at over 5 s with both cores busy (then killed: the yield
still counts as checkpointed, but the kill is noise in the demo's log).
``node_settle_s`` waits for a checkpoint heartbeat still in flight after the
pods are gone; it costs time only when no checkpoint is seen at all."""

STALL_S = 150.0
"""A phase of the story fails when nothing it waits on has changed for this long. The longest
silence a healthy run has is a few seconds idle (a resume backoff, a yield's grace, a torch
import) and about 40 s measured with both cores busy; a stalled system (a gang no resume ever
places) is told from a slow one by this, not by how long the phase took."""

RUN_LIMIT_S = 1200.0
"""The story's ceiling, whatever moves: a livelock keeps changing state forever (yields and
resumes in a loop), and a demo must end. About twenty times an idle machine's run."""


@dataclass(slots=True)
class Watchdog:
    """Fails a wait on no progress, not on elapsed time.

    ``observe`` is called with a fingerprint of everything the wait depends on
    (job phases, messages counted, trainers' steps) and the time; it answers
    why to give up, or None. A slow machine moves slowly but moves, so it
    passes; a stuck one stops moving, and fails ``stall_s`` later.
    """

    stall_s: float
    deadline: float
    """Absolute time (same clock as ``now``) after which the wait fails even while moving."""
    _seen: Hashable = field(default=None)
    _moved_at: float | None = None

    def observe(self, fingerprint: Hashable, now: float) -> str | None:
        if self._moved_at is None or fingerprint != self._seen:
            self._seen = fingerprint
            self._moved_at = now
        if now - self._moved_at > self.stall_s:
            return f"nothing moved for {self.stall_s:.0f} s"
        if now > self.deadline:
            return "the demo's time limit was reached while the system kept changing"
        return None
