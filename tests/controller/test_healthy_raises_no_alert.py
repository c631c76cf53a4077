"""A healthy cluster raises no alert: a whole day of a shared pool doing its job, with every
condition gpuyield watches switched on, sends nothing on ``gpuyield.alerts``.

Research trains two checkpointing gangs on the pool; a production gang arrives, one sweep
yields with a checkpoint, production runs for an hour and finishes, the sweep resumes and
trains on. Each alert kind has its scenario elsewhere (``test_incidents``,
``test_alert_kinds``, ``test_volcano_evictions``, ...); this is the other half of the
specification: none of them fires when nothing is wrong.
"""

from __future__ import annotations

from cluster_objects import node, pod, pod_group, queue, volcano_job
from harness import NOW, Controller
from test_decider_live_path import ack, gang_demand, resumes

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.schemas.messages import CommandAction, JobProgress, YieldOutcome

SWEEPS = {"sweep-0": ["gpu-00", "gpu-01"], "sweep-1": ["gpu-02", "gpu-03"]}
CHECKPOINT_EVERY_S = 600.0


def progress(job: str, at: float, step: int) -> JobProgress:
    """A trainer that checkpoints on time: its newest checkpoint at most one interval old."""
    return JobProgress(
        job=job,
        step=step,
        progress=min(0.99, step / 100_000),
        last_checkpoint_at=at - (at % CHECKPOINT_EVERY_S),
        checkpoint_interval_s=CHECKPOINT_EVERY_S,
        first_seen_at=NOW - 3600,
        updated_at=at,
    )


def run_sweep(c: Controller, name: str, at: float, phase_of_job: str = "Running") -> None:
    c.change(volcano_job(name, namespace="research", queue="research", replicas=2), at)
    c.change(pod_group(name, namespace="research", queue="research", min_member=2), at)
    for k, on in enumerate(SWEEPS[name]):
        c.change(pod(name, k, namespace="research", node=on, started=at), at)


def watching_everything() -> ControllerConfig:
    """Every condition on: production is held to a 15-minute SLA, as a platform team would."""
    return ControllerConfig(pending_sla_s=900.0, sla_priority=1000.0)


def live_for(c: Controller, start: float, end: float, running: list[str]) -> None:
    """Ticks every 15 s, and every running sweep's heartbeats every minute."""
    at = start
    while at < end:
        c.tick(at)
        if at % 60 == 0:
            for name in running:
                c.feed(progress(f"research/{name}", at, int(at - NOW) + 10_000))
        at += 15


def test_a_day_of_a_healthy_shared_pool_raises_no_alert() -> None:
    c = Controller(config=watching_everything())
    start = NOW - 600
    for i in range(4):
        c.add(node(f"gpu-{i:02d}"), start)
    c.add(queue("production", weight=4, capability=32, guarantee=16, reclaimable=False), start)
    c.add(queue("research", weight=1, capability=32), start)
    for name in SWEEPS:
        run_sweep(c, name, start)
    live_for(c, start, NOW, list(SWEEPS))

    gang_demand(c, "ft-llama", 2, NOW)  # 16 GPUs of production's guarantee
    yields = [cmd for cmd in c.commands if cmd.action is CommandAction.YIELD]
    (victim,) = {cmd.job for cmd in yields}
    for cmd in yields:
        ack(c, cmd, NOW + 40, YieldOutcome.CHECKPOINTED)
    name = victim.split("/")[1]
    c.change(
        volcano_job(name, namespace="research", queue="research", replicas=2, phase="Aborted"),
        NOW + 45,
    )
    c.change(
        pod_group(name, namespace="research", queue="research", min_member=2, phase="Pending"),
        NOW + 45,
    )
    for k, on in enumerate(SWEEPS[name]):
        c.delete(pod(name, k, namespace="research", node=on), NOW + 45)
    for k, on in enumerate(SWEEPS[name]):
        c.change(pod("ft-llama", k, namespace="prod", priority=1000, node=on), NOW + 50)
    c.change(pod_group("ft-llama", namespace="prod", queue="production", min_member=2), NOW + 50)
    others = [n for n in SWEEPS if n != name]
    live_for(c, NOW + 60, NOW + 3600, others)

    # production finishes and leaves; gpuyield resumes the sweep on the GPUs it freed
    c.delete(pod_group("ft-llama", namespace="prod", queue="production", min_member=2), NOW + 3600)
    for k, on in enumerate(SWEEPS[name]):
        c.delete(pod("ft-llama", k, namespace="prod", priority=1000, node=on), NOW + 3600)
    c.delete(volcano_job("ft-llama", namespace="prod", queue="production", replicas=2), NOW + 3600)
    live_for(c, NOW + 3615, NOW + 3600 + 1200, others)
    (resume,) = resumes(c)
    assert resume.job == victim
    ack(c, resume, NOW + 4810, YieldOutcome.RESUMED)
    run_sweep(c, name, NOW + 4830)
    live_for(c, NOW + 4845, NOW + 86_400, list(SWEEPS))

    assert c.alerts == []
