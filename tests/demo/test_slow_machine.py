"""The demo on a slow machine: its outcome follows what the system did, never how fast it did it.

Found when ``gpuyield demo`` failed every run on a machine with one core busy:
fixed timeouts gave up on a system that was still moving, the burst met torch
trainers that had not checkpointed yet (so the 16-GPU gang, which had, became
the cheapest victim), and the decider's timers were shorter than the node
agents' slowest legitimate yield. Each rule is checked here without processes;
``bench/bench_demo_reliability.py`` runs the whole demo ten times, with a core
kept busy.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpuyield.agents.demo.cluster import JobPhase, SimJob, SimPod
from gpuyield.agents.demo.run import decider_knows_settled, resumed, settled
from gpuyield.agents.demo.scenario import demo_scenario
from gpuyield.agents.demo.standin import newest_checkpoint, write_atomically
from gpuyield.agents.demo.tally import JobSteps, Tally
from gpuyield.agents.demo.timing import (
    DEMO_NODE_AGENT,
    STALL_S,
    Watchdog,
    demo_controller_config,
)
from gpuyield.schemas.messages import YieldAck, YieldOutcome

T = 1_800_000_000.0
SCENARIO = demo_scenario(random.Random(0), seed=0, duration_s=60)


def running(key: str, placed_at: float) -> SimJob:
    job = SimJob(SCENARIO.job(key), uid="u", created_at=placed_at)
    job.new_pods()
    for pod in job.pods.values():
        pod.node, pod.phase, pod.running = "gpu-0", "Running", True
    job.phase = JobPhase.RUNNING
    job.placed_at = placed_at
    return job


# -- waiting on progress, not on time ---------------------------------------------------------


@given(st.lists(st.floats(min_value=0.1, max_value=STALL_S * 0.9), min_size=1, max_size=60))
def test_a_wait_that_keeps_moving_never_stalls_however_long_each_move_takes(
    gaps: list[float],
) -> None:
    dog = Watchdog(STALL_S, deadline=T + 10 * STALL_S * len(gaps))
    now = T
    for state, gap in enumerate(gaps):
        assert dog.observe(state, now) is None
        now += gap
        assert dog.observe(state, now) is None  # just before the next change


def test_a_wait_on_which_nothing_moves_fails_after_the_stall_bound_and_not_before() -> None:
    dog = Watchdog(STALL_S, deadline=T + 100 * STALL_S)
    assert dog.observe(("Aborted", 1, 0), T) is None
    assert dog.observe(("Aborted", 1, 0), T + STALL_S) is None
    assert dog.observe(("Aborted", 1, 0), T + STALL_S + 1) == f"nothing moved for {STALL_S:.0f} s"


def test_a_system_that_keeps_changing_forever_still_ends_at_the_deadline() -> None:
    dog = Watchdog(STALL_S, deadline=T + 600)
    for second in range(0, 600, 10):
        assert dog.observe(second, T + second) is None
    assert dog.observe("a yield and a resume more", T + 601) is not None


# -- the burst meets research that has checkpointed ---------------------------------------------


def test_a_torch_job_past_its_cooldown_without_a_checkpoint_is_not_yet_settled() -> None:
    job = running("research/tiny-a", placed_at=T)
    no_checkpoint = JobSteps(step=8, checkpoint_step=None, last_beat_at=T + 30)
    assert not settled(job, no_checkpoint, T + 30, settled_s=11)
    checkpointed = JobSteps(step=27, checkpoint_step=25, last_beat_at=T + 31)
    assert settled(job, checkpointed, T + 31, settled_s=11)


def test_a_checkpointed_job_inside_its_cooldown_is_not_settled() -> None:
    job = running("research/llm-sweep", placed_at=T)
    seen = JobSteps(step=17000, checkpoint_step=17000, last_beat_at=T + 5)
    assert not settled(job, seen, T + 5, settled_s=11)
    assert not settled(job, None, T + 20, settled_s=11)


def test_the_burst_waits_until_the_decider_itself_knows_each_checkpoint() -> None:
    # The demo reads heartbeats ahead of the decider: its own view is not enough.
    lagging = {"job": "research/tiny-a", "state": "Running", "cooldown_until": None}
    assert not decider_knows_settled({**lagging, "last_checkpoint_at": None})
    assert not decider_knows_settled(None)
    assert not decider_knows_settled({**lagging, "last_checkpoint_at": T, "cooldown_until": T + 4})
    assert not decider_knows_settled({**lagging, "state": "Suspended", "last_checkpoint_at": T})
    assert decider_knows_settled({**lagging, "last_checkpoint_at": T})


def test_a_resumed_job_counts_once_its_trainer_reports_again() -> None:
    job = running("research/llm-sweep", placed_at=T)
    job.suspensions, job.resumes = 1, 1
    tally = Tally()
    assert not resumed(job, tally)
    tally.resumed_steps[job.key] = 17651
    assert resumed(job, tally)
    job.pods[1] = SimPod(1, "u-1-2")  # one pod of the gang not placed yet
    job.phase = JobPhase.PENDING
    assert not resumed(job, tally)


# -- the demo's timers outlast the node agents' slowest legitimate yield -------------------------


def test_the_decider_waits_for_an_ack_longer_than_a_hard_killed_yield_can_take() -> None:
    config = demo_controller_config(SCENARIO.grace_s)
    agent = DEMO_NODE_AGENT
    # Past the deadline: the kill, the pods going, the suspension retried, then the ack.
    slowest_after_deadline = agent.node_kill_timeout_s + agent.node_release_timeout_s
    assert config.ack_slack_s > slowest_after_deadline


def test_freed_gpus_stay_held_until_the_slowest_yield_has_given_them_up() -> None:
    config = demo_controller_config(SCENARIO.grace_s)
    assert config.reservation_s > config.policy.grace_s + config.ack_slack_s


# -- a job's ranks restart from one step ----------------------------------------------------------


def test_pods_of_one_job_restart_from_the_furthest_checkpoint_any_of_them_saved(
    tmp_path: Path,
) -> None:
    write_atomically(tmp_path / "rl-elastic-worker-0.json", {"step": 11179, "saved_at": T + 1})
    write_atomically(tmp_path / "rl-elastic-worker-1.json", {"step": 11178, "saved_at": T + 1.2})
    (tmp_path / ".rl-elastic-worker-1.json.tmp").write_text(json.dumps({"step": 99999}))
    assert newest_checkpoint(tmp_path / "rl-elastic-worker-1.json") == (11179, T + 1)
    assert newest_checkpoint(tmp_path / "llm-sweep-worker-0.json") == (11179, T + 1)
    assert newest_checkpoint(tmp_path / "missing" / "x.json") is None


def ack(node: str, step: int, at: float, outcome: YieldOutcome) -> YieldAck:
    return YieldAck(
        command_id=f"c-{node}-{at}",
        decision_id="d",
        job="research/llm-sweep",
        node=node,
        outcome=outcome,
        checkpoint_step=step,
        seconds_taken=1.5,
        gpu_seconds_lost=0.0,
        acked_at=at,
    )


def test_a_yield_acked_by_two_nodes_saved_the_furthest_step_and_a_later_yield_starts_afresh() -> (
    None
):
    tally = Tally()
    tally.fold(ack("gpu-0", 17651, T, YieldOutcome.CHECKPOINTED))
    tally.fold(ack("gpu-1", 17650, T + 1, YieldOutcome.CHECKPOINTED))
    assert tally.acked_steps["research/llm-sweep"] == 17651
    tally.fold(ack("gpu-0", 17651, T + 30, YieldOutcome.RESUMED))
    tally.fold(ack("gpu-1", 17640, T + 60, YieldOutcome.CHECKPOINTED))
    assert tally.acked_steps["research/llm-sweep"] == 17640
