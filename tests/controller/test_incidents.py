"""Incidents: a condition's alert fires once, is resolved once when it ends, and a
recurrence is a new incident with a new id; events are never resolved."""

from __future__ import annotations

from cluster_objects import T0, event, node, pod, pod_group, queue
from harness import NOW, Controller, apply_writes, production_demand, shared_pool
from test_decider import ack
from test_decider_live_path import suspended_trio
from test_gang_deadlock import deadlocked
from test_queue_capability import cpu_and_memory_only, pool_with_production_capability_without_gpus

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.schemas.messages import (
    Alert,
    AlertKind,
    AlertState,
    CommandAction,
    JobProgress,
    Tick,
    YieldOutcome,
)


def of(c: Controller, kind: AlertKind) -> list[Alert]:
    return [a for a in c.alerts if a.kind is kind]


def states(alerts: list[Alert]) -> list[tuple[str, str]]:
    return [(a.alert_id, a.state.value) for a in alerts]


def fixed_production_queue(c: Controller, at: float) -> None:
    c.change(queue("production", weight=4, capability=32, guarantee=16, reclaimable=False), at)


def test_a_fixed_queue_resolves_its_incident_under_the_same_id() -> None:
    c = pool_with_production_capability_without_gpus(ControllerConfig())
    production_demand(c)
    c.tick(NOW + 60)
    fixed_production_queue(c, NOW + 120)
    c.tick(NOW + 180)
    (firing, resolved) = of(c, AlertKind.QUEUE_MISCONFIGURED)
    assert firing.state is AlertState.FIRING
    assert resolved.state is AlertState.RESOLVED
    assert resolved.alert_id == firing.alert_id
    assert resolved.resolved_at == NOW + 120
    assert resolved.raised_at == firing.raised_at


def test_a_condition_that_comes_back_is_a_new_incident_with_a_new_id() -> None:
    c = pool_with_production_capability_without_gpus(ControllerConfig())
    production_demand(c)
    fixed_production_queue(c, NOW + 120)
    # the same mistake made again
    c.change(
        cpu_and_memory_only("production", weight=4, guarantee=16, reclaimable=False), NOW + 300
    )
    fixed_production_queue(c, NOW + 400)
    alerts = of(c, AlertKind.QUEUE_MISCONFIGURED)
    assert [a.state.value for a in alerts] == ["firing", "resolved", "firing", "resolved"]
    first, second = alerts[0].alert_id, alerts[2].alert_id
    assert first != second
    assert states(alerts) == [
        (first, "firing"),
        (first, "resolved"),
        (second, "firing"),
        (second, "resolved"),
    ]


def test_an_open_incident_is_not_raised_again_nor_resolved_while_it_holds() -> None:
    c = pool_with_production_capability_without_gpus(ControllerConfig())
    production_demand(c)
    for dt in (60, 120, 3600):
        c.tick(NOW + dt)
    assert [a.state for a in of(c, AlertKind.QUEUE_MISCONFIGURED)] == [AlertState.FIRING]


def test_a_late_ack_resolves_the_missed_deadline() -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 120 + 31)
    missed = of(c, AlertKind.YIELD_DEADLINE_MISSED)
    assert len(missed) == 2  # one per command
    ack(c, 0, NOW + 200, YieldOutcome.CHECKPOINTED)
    c.tick(NOW + 202)
    alerts = of(c, AlertKind.YIELD_DEADLINE_MISSED)
    assert [a.state for a in alerts] == [AlertState.FIRING] * 2 + [AlertState.RESOLVED]
    assert alerts[2].alert_id == missed[0].alert_id  # the command that answered


def test_a_hard_kill_is_an_event_and_is_never_resolved() -> None:
    c = shared_pool()
    production_demand(c)
    ack(c, 0, NOW + 120, YieldOutcome.HARD_KILLED)
    for dt in (200, 4000):
        c.tick(NOW + dt)
    assert [a.state for a in of(c, AlertKind.YIELD_HARD_KILLED)] == [AlertState.FIRING]


def test_a_gang_deadlock_broken_by_a_yield_is_resolved_once_the_gang_has_left() -> None:
    c = deadlocked()
    (decision,) = c.decisions
    (victim,) = decision.plan.victims
    name = victim.job.split("/")[1]
    for k in range(3):
        c.delete(pod(name, k, namespace="train", gpus=5, node="gone"), NOW + 60)
    c.tick(NOW + 61)
    alerts = of(c, AlertKind.GANG_DEADLOCK)
    assert [a.state for a in alerts] == [AlertState.FIRING, AlertState.RESOLVED]
    assert alerts[0].alert_id == alerts[1].alert_id


def test_a_deadlock_no_gang_may_break_stays_open_until_a_gang_is_deleted() -> None:
    c = deadlocked(preemptable=False)
    c.tick(NOW + 61)
    assert [a.state for a in of(c, AlertKind.GANG_DEADLOCK)] == [AlertState.FIRING]
    c.delete(pod_group("llm-b", namespace="train", queue="training", min_member=4), NOW + 90)
    for k in range(4):
        c.delete(pod("llm-b", k, namespace="train", gpus=5), NOW + 90)
    c.tick(NOW + 91)
    assert [a.state for a in of(c, AlertKind.GANG_DEADLOCK)] == [
        AlertState.FIRING,
        AlertState.RESOLVED,
    ]


def progress(job: str, *, checkpoint_at: float | None, at: float) -> JobProgress:
    return JobProgress(
        job=job,
        step=1000,
        progress=0.4,
        last_checkpoint_at=checkpoint_at,
        checkpoint_interval_s=600.0,
        first_seen_at=NOW - 7200,
        updated_at=at,
    )


def test_a_checkpoint_older_than_three_intervals_fires_and_a_fresh_one_resolves_it() -> None:
    c = shared_pool()
    c.feed(progress("research/sweep-0", checkpoint_at=NOW - 1000, at=NOW))
    c.tick(NOW + 10)
    assert of(c, AlertKind.CHECKPOINT_STALE) == []  # 1010 s: under 3 x 600
    c.tick(NOW + 900)
    (stale,) = of(c, AlertKind.CHECKPOINT_STALE)
    assert stale.job == "research/sweep-0"
    assert stale.details["age_s"] == 1900
    c.feed(progress("research/sweep-0", checkpoint_at=NOW + 950, at=NOW + 951))
    alerts = of(c, AlertKind.CHECKPOINT_STALE)
    assert [a.state for a in alerts] == [AlertState.FIRING, AlertState.RESOLVED]


def test_a_resumed_job_is_judged_from_its_restart_not_from_before_its_suspension() -> None:
    """It restarted from its newest checkpoint: the hours it waited put no work at risk."""
    c = shared_pool()
    c.feed(progress("research/sweep-0", checkpoint_at=NOW - 600, at=NOW))
    for k in range(2):  # suspended for an hour and a half, then its pods start anew
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 10)
    for k in range(2):
        c.add(
            pod("sweep-0", k, namespace="research", node=f"gpu-0{k}", started=NOW + 5400),
            NOW + 5400,
        )
    c.tick(NOW + 5410)
    assert of(c, AlertKind.CHECKPOINT_STALE) == []
    c.tick(NOW + 5400 + 1801)  # no checkpoint in three intervals of this run
    (stale,) = of(c, AlertKind.CHECKPOINT_STALE)
    assert stale.details["age_s"] == 1801


def test_a_job_that_reports_no_checkpoint_interval_is_never_stale() -> None:
    c = shared_pool()
    c.feed(
        progress("research/sweep-0", checkpoint_at=None, at=NOW).model_copy(
            update={"checkpoint_interval_s": None}
        )
    )
    c.tick(NOW + 86_000)
    assert of(c, AlertKind.CHECKPOINT_STALE) == []


def test_a_production_gang_pending_past_its_sla_fires_and_is_resolved_when_placed() -> None:
    c = shared_pool()
    sla = (NOW - T0) + 700  # the PodGroup was created at T0
    c.config = ControllerConfig(pending_sla_s=sla, sla_priority=1000.0)
    fixed_production_queue(c, NOW - 60)
    c.add(pod_group("ft", namespace="prod", queue="production", phase="Pending"), NOW)
    c.add(pod("ft", 0, namespace="prod", priority=1000), NOW)
    c.add(pod("low", 0, namespace="prod", priority=10), NOW)
    c.tick(NOW + 600)
    assert of(c, AlertKind.PENDING_PAST_SLA) == []
    c.tick(NOW + 1000)
    (late,) = of(c, AlertKind.PENDING_PAST_SLA)
    assert late.job == "prod/ft"
    assert late.severity == "critical"
    c.change(pod("ft", 0, namespace="prod", priority=1000, node="gpu-00"), NOW + 1100)
    c.change(pod_group("ft", namespace="prod", queue="production"), NOW + 1100)
    assert [a.state for a in of(c, AlertKind.PENDING_PAST_SLA)] == [
        AlertState.FIRING,
        AlertState.RESOLVED,
    ]


def test_the_sla_alert_names_the_phase_of_the_jobs_own_pod_group_among_its_neighbours() -> None:
    c = shared_pool()
    c.config = ControllerConfig(pending_sla_s=(NOW - T0) + 700, sla_priority=1000.0)
    fixed_production_queue(c, NOW - 60)
    # Neighbours in the namespace, before and after it in key order, in other phases.
    c.add(pod_group("eval-a", namespace="prod", queue="production"), NOW)
    c.add(pod_group("ft", namespace="prod", queue="production", phase="Inqueue"), NOW)
    c.add(pod_group("zz-serve", namespace="prod", queue="production", phase="Pending"), NOW)
    c.add(pod("ft", 0, namespace="prod", priority=1000), NOW)
    c.tick(NOW + 1000)
    (late,) = of(c, AlertKind.PENDING_PAST_SLA)
    assert late.job == "prod/ft"
    assert late.message.endswith("(its PodGroup is Inqueue)"), late.message


def test_without_an_sla_no_pending_job_raises_anything() -> None:
    c = shared_pool()
    c.add(pod_group("ft", namespace="prod", queue="production", phase="Pending"), NOW)
    c.add(pod("ft", 0, namespace="prod", priority=1000), NOW)
    c.tick(NOW + 86_000)
    assert of(c, AlertKind.PENDING_PAST_SLA) == []


def test_invalid_input_is_resolved_once_a_valid_snapshot_is_built_again() -> None:
    c = shared_pool()
    bad = queue("production", weight=4, capability=32, guarantee=16, reclaimable=False)
    bad["spec"]["weight"] = -4  # Volcano's webhook would refuse it
    c.change(bad, NOW - 30)
    production_demand(c)
    c.tick(NOW + 30)
    assert [a.state for a in of(c, AlertKind.INVALID_INPUT)] == [AlertState.FIRING]
    fixed_production_queue(c, NOW + 60)
    c.tick(NOW + 90)
    alerts = of(c, AlertKind.INVALID_INPUT)
    assert [a.state for a in alerts] == [AlertState.FIRING, AlertState.RESOLVED]
    assert alerts[1].alert_id == alerts[0].alert_id
    assert c.decisions  # and the demand is decided on at last


def test_a_running_gang_that_lost_a_pod_is_dangling_after_the_threshold_until_it_recovers() -> None:
    c = shared_pool()  # sweep-0 runs 2 pods with minMember 2
    lost = pod("sweep-0", 1, namespace="research", node="gpu-01")
    c.delete(lost, NOW)
    c.tick(NOW + 1)
    c.tick(NOW + 200)
    assert of(c, AlertKind.DANGLING_GANG) == []  # under 300 s
    c.tick(NOW + 302)
    (dangling,) = of(c, AlertKind.DANGLING_GANG)
    assert dangling.job == "research/sweep-0"
    assert dangling.details["placed"] == 1
    assert dangling.details["min_available"] == 2
    c.add(pod("sweep-0", 2, namespace="research", node="gpu-01"), NOW + 400)  # replaced
    c.tick(NOW + 401)
    assert [a.state for a in of(c, AlertKind.DANGLING_GANG)] == [
        AlertState.FIRING,
        AlertState.RESOLVED,
    ]


def test_an_unservable_demand_is_resolved_when_its_job_is_deleted() -> None:
    c = Controller()
    for i in range(4):
        c.add(node(f"gpu-{i:02d}"), NOW - 60)
    c.add(queue("production", capability=64, guarantee=32, reclaimable=False), NOW - 60)
    group = pod_group("huge", namespace="prod", queue="production", min_member=5, phase="Inqueue")
    c.add(group, NOW)
    for k in range(5):  # 40 GPUs on a 32-GPU pool: no eviction makes room
        c.add(pod("huge", k, namespace="prod", priority=1000), NOW)
    c.tick(NOW + 60)  # past the retry cooldown of the rounds its first pods started
    assert [a.state for a in of(c, AlertKind.DEMAND_UNSERVABLE)] == [AlertState.FIRING]
    c.delete(group, NOW + 90)
    for k in range(5):
        c.delete(pod("huge", k, namespace="prod", priority=1000), NOW + 90)
    c.tick(NOW + 91)
    alerts = of(c, AlertKind.DEMAND_UNSERVABLE)
    assert [a.state for a in alerts] == [AlertState.FIRING, AlertState.RESOLVED]
    assert alerts[0].alert_id == alerts[1].alert_id


def test_a_starved_resume_is_resolved_once_the_job_resumes() -> None:
    c = suspended_trio()
    later = NOW + 3600
    for k in range(4):  # 16 GPUs free, none as a whole node
        c.delete(pod("ft-wide", k, namespace="prod", priority=1000, node=f"gpu-0{k}"), later)
        c.add(pod_group(f"fill-{k}", namespace="shared", queue="research"), later)
        c.add(pod(f"fill-{k}", 0, namespace="shared", gpus=4, node=f"gpu-0{k}"), later)
    for seconds in range(0, int(c.config.resume_starved_s) + 120, 60):
        c.tick(later + 1 + seconds)
    assert len(of(c, AlertKind.RESUME_STARVED)) == 3
    done = later + c.config.resume_starved_s + 200
    for k in range(4):  # the fillers finish: whole nodes again
        c.delete(pod(f"fill-{k}", 0, namespace="shared", gpus=4, node=f"gpu-0{k}"), done)
    c.tick(done + 1)
    resolved = [a for a in of(c, AlertKind.RESUME_STARVED) if a.state is AlertState.RESOLVED]
    resumed = {r.job for r in c.commands if r.action is CommandAction.RESUME}
    assert (
        {a.job for a in resolved}
        == resumed
        == {
            "research/big",
            "research/small-a",
            "research/small-b",
        }
    )


def test_a_deadlock_ends_on_the_bind_that_completes_a_gang_with_the_index_kept() -> None:
    # As the worker steps: one index across the steps, whose memo of "nothing ended"
    # the quiet ticks fill; the bind then changes only which gangs are stuck.
    c = deadlocked(preemptable=False)
    index = RecordIndex.build(c.records, c.config)
    alerts: list[Alert] = []
    inputs = [
        Tick(at=NOW + 61),
        Tick(at=NOW + 62),
        event(node("gpu-06", gpus=5), NOW + 63),
        event(pod("llm-b", 3, namespace="train", gpus=5, node="gpu-06"), NOW + 64),
    ]
    for n, message in enumerate(inputs):
        outcome = step(c.records, message, f"in/1/{n}", c.config, index=index)
        apply_writes(c.records, outcome)
        index.apply(outcome.writes, c.records)
        alerts += outcome.alerts
    assert [a.state for a in alerts if a.kind is AlertKind.GANG_DEADLOCK] == [AlertState.RESOLVED]
