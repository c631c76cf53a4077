"""The decider, message by message: demands in, decisions, yield commands and alerts out."""

from __future__ import annotations

import pytest
from cluster_objects import T0, node, pod, pod_group, queue
from harness import NOW, Controller, production_demand, production_demand_outcome, shared_pool

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import InputRejected
from gpuyield.agents.planner import plan
from gpuyield.schemas import Policy
from gpuyield.schemas.messages import (
    CommandAction,
    JobProgress,
    JobProgressBatch,
    ReservationState,
    YieldAck,
    YieldOutcome,
)


def ack(c: Controller, command_index: int, at: float, outcome: YieldOutcome) -> None:
    command = c.commands[command_index]
    c.feed(
        YieldAck(
            command_id=command.command_id,
            decision_id=command.decision_id,
            node=command.node,
            job=command.job,
            outcome=outcome,
            checkpoint_step=1200 if outcome is YieldOutcome.CHECKPOINTED else None,
            seconds_taken=40.0,
            acked_at=at,
        )
    )


def test_an_unschedulable_production_gang_gets_one_decision_with_a_command_per_victim_node() -> (
    None
):
    c = shared_pool()
    production_demand(c, pods=1)
    assert len(c.decisions) == 1
    decision = c.decisions[0]
    assert decision.demand == "prod/ft-llama"
    assert [v.job for v in decision.plan.victims] == ["research/sweep-0"]
    assert sorted((cmd.node, cmd.pods) for cmd in c.commands) == [
        ("gpu-00", ("sweep-0-worker-0",)),
        ("gpu-01", ("sweep-0-worker-1",)),
    ]
    assert {cmd.action for cmd in c.commands} == {CommandAction.YIELD}
    assert all(cmd.deadline == cmd.issued_at + 120.0 for cmd in c.commands)
    assert decision.commands == tuple(cmd.command_id for cmd in c.commands)


def test_the_decision_record_replays_to_the_same_plan() -> None:
    c = shared_pool()
    production_demand(c)
    decision = c.decisions[0]
    replayed = plan(decision.snapshot, decision.demand, explain=True)
    assert replayed.model_dump_json() == decision.plan.model_dump_json()


def test_a_pending_gang_volcano_has_not_marked_unschedulable_is_left_to_volcano() -> None:
    c = shared_pool()
    c.add(pod_group("ft", namespace="prod", queue="production", phase="Inqueue"), NOW)
    c.add(
        {**pod("ft", 0, namespace="prod", priority=1000), "status": {"phase": "Pending"}},
        NOW,
    )
    assert c.decisions == []


def test_reprocessing_the_same_input_gives_the_same_decision_and_command_ids() -> None:
    first, second = shared_pool(), shared_pool()
    production_demand(first)
    production_demand(second)
    assert [c.command_id for c in first.commands] == [c.command_id for c in second.commands]
    assert first.decisions[0].decision_id == second.decisions[0].decision_id


def test_the_same_shortage_triggers_no_second_round_while_its_yields_are_in_flight() -> None:
    c = shared_pool()
    production_demand(c)
    for seconds in (5, 30, 90):
        c.tick(NOW + seconds)
        c.change(
            pod_group(
                "ft-llama",
                namespace="prod",
                queue="production",
                phase="Inqueue",
                unschedulable=True,
            ),
            NOW + seconds,
        )
    assert len(c.decisions) == 1


def test_freed_gpus_stay_nominated_for_the_preemptor() -> None:
    c = shared_pool()
    production_demand(c, "ft-llama")
    production_demand(c, "ft-mistral", at=NOW + 1)
    first_nodes = {cmd.node for cmd in c.commands if c.decisions[0].decision_id == cmd.decision_id}
    second = [d for d in c.decisions if d.demand == "prod/ft-mistral"]
    assert second, "the second demand is planned with the GPUs not nominated for the first"
    assert not {cmd.node for cmd in c.commands if cmd.decision_id == second[0].decision_id} & (
        first_nodes
    )


def test_a_placed_preemptor_settles_its_demand_and_releases_its_nomination() -> None:
    c = shared_pool()
    production_demand(c)
    c.change(pod_group("ft-llama", namespace="prod", queue="production"), NOW + 60)
    assert not any(k.startswith(("demand/", "reservation/")) for k in c.records)


def test_a_decision_holds_the_freed_gpus_before_any_command_goes_out() -> None:
    c = shared_pool()
    outcome = production_demand_outcome(c)
    (held,) = outcome.reservations
    assert held.state is ReservationState.HELD
    assert held.job == "prod/ft-llama"
    assert held.nodes == c.records["reservation/prod/ft-llama"]["nodes"]
    assert held.until == NOW + c.config.reservation_s


def test_placing_the_preemptor_releases_its_hold() -> None:
    c = shared_pool()
    production_demand(c)
    outcome = c.change(pod_group("ft-llama", namespace="prod", queue="production"), NOW + 60)
    (released,) = outcome.reservations
    assert released.state is ReservationState.RELEASED
    assert released.reason == "placed by Volcano"


def test_a_hold_expires_with_a_release_when_the_preemptor_is_never_placed() -> None:
    c = shared_pool()
    production_demand(c)
    outcome = c.tick(NOW + c.config.reservation_s + 1)
    released = outcome.reservations[0]
    assert (released.job, released.state) == ("prod/ft-llama", ReservationState.RELEASED)
    assert released.reason == "expired before the job was placed"


def test_an_acknowledged_whole_job_yield_suspends_the_victim() -> None:
    c = shared_pool()
    production_demand(c)
    ack(c, 0, NOW + 40, YieldOutcome.CHECKPOINTED)
    ack(c, 1, NOW + 41, YieldOutcome.CHECKPOINTED)
    assert c.records["suspended/research/sweep-0"]["checkpoint_step"] == 1200


def test_acknowledged_pods_count_as_leaving_until_the_watch_shows_them_gone() -> None:
    c = shared_pool()
    production_demand(c)
    ack(c, 0, NOW + 40, YieldOutcome.CHECKPOINTED)
    ack(c, 1, NOW + 41, YieldOutcome.CHECKPOINTED)
    c.tick(NOW + 100)  # the demand may plan again, but the pods still hold their GPUs
    assert len(c.decisions) == 1
    assert c.leaving("research/sweep-0") == {"sweep-0-worker-0", "sweep-0-worker-1"}
    for k in range(2):
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 101)
    assert c.leaving("research/sweep-0") == frozenset()
    assert c.records["demand/prod/ft-llama"]["victims"] == []


def test_a_redelivered_ack_changes_nothing() -> None:
    c = shared_pool()
    production_demand(c)
    ack(c, 0, NOW + 40, YieldOutcome.CHECKPOINTED)
    before = dict(c.records)
    ack(c, 0, NOW + 40, YieldOutcome.CHECKPOINTED)
    assert c.records == before


def test_a_hard_killed_yield_raises_an_alert() -> None:
    c = shared_pool()
    production_demand(c)
    ack(c, 0, NOW + 120, YieldOutcome.HARD_KILLED)
    assert [a.kind.value for a in c.alerts] == ["yield-hard-killed"]


def test_a_yield_never_acknowledged_raises_one_alert_after_its_deadline_and_slack() -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 120 + 29)
    assert c.alerts == []
    c.tick(NOW + 120 + 31)
    c.tick(NOW + 120 + 60)
    assert [a.kind.value for a in c.alerts] == ["yield-deadline-missed"] * 2  # one per command
    assert len({a.alert_id for a in c.alerts}) == 2


def test_a_job_evicted_again_and_again_raises_a_livelock_alert_once_and_is_then_spared() -> None:
    c = Controller(config=ControllerConfig(policy=Policy(cooldown_s=0.0, max_evictions=3)))
    c.add(node("gpu-00"), NOW)
    c.add(queue("production", capability=8, guarantee=8, reclaimable=False), NOW)
    c.add(queue("research", capability=8), NOW)
    for round_ in range(5):
        t = NOW + round_ * 1000
        # Volcano requeued research and placed it again ...
        c.add(pod_group("sweep", namespace="research", queue="research"), t)
        c.add(pod("sweep", 0, namespace="research", node="gpu-00"), t)
        # ... and the next production fine-tune takes the GPUs back.
        name = f"ft-{round_}"
        issued = len(c.commands)
        production_demand(c, name, at=t + 1)
        if len(c.commands) > issued:
            ack(c, issued, t + 50, YieldOutcome.CHECKPOINTED)
            c.delete(pod("sweep", 0, namespace="research", node="gpu-00"), t + 50)
            c.add(pod(name, 0, namespace="prod", priority=1000, node="gpu-00"), t + 60)
            c.change(pod_group(name, namespace="prod", queue="production"), t + 60)
            c.delete(pod(name, 0, namespace="prod", priority=1000, node="gpu-00"), t + 900)
        c.delete(pod_group(name, namespace="prod", queue="production"), t + 900)
    evictions = [d for d in c.decisions if d.plan.victims]
    livelocks = [a for a in c.alerts if a.kind.value == "livelock"]
    assert len(evictions) == 3  # the eviction limit stops the cycle
    assert len(livelocks) == 1


def test_progress_reaches_the_snapshot_the_planner_sees() -> None:
    c = shared_pool()
    c.feed(
        JobProgress(
            job="research/sweep-0",
            step=9000,
            progress=0.95,
            last_checkpoint_at=NOW - 30,
            first_seen_at=T0,
            updated_at=NOW - 5,
        )
    )
    production_demand(c)
    # Nearly done and just checkpointed: sweep-1 (never checkpointed) goes instead.
    assert [v.job for v in c.decisions[0].plan.victims] == ["research/sweep-1"]
    sweep0 = next(j for j in c.decisions[0].snapshot.jobs if j.name == "research/sweep-0")
    assert sweep0.progress == 0.95


def test_an_older_progress_summary_does_not_overwrite_a_newer_one() -> None:
    c = shared_pool()
    newer = JobProgress(
        job="research/sweep-0", step=10, progress=0.5, first_seen_at=T0, updated_at=NOW
    )
    c.feed(newer)
    c.feed(newer.model_copy(update={"progress": 0.1, "updated_at": NOW - 100}))
    assert c.records["progress/research/sweep-0"]["progress"] == 0.5


def summary(job: str, step: int, progress: float, at: float) -> JobProgress:
    return JobProgress(job=job, step=step, progress=progress, first_seen_at=T0, updated_at=at)


def test_a_batch_of_summaries_is_one_step_that_applies_each_as_if_fed_one_by_one() -> None:
    summaries = (
        summary("research/sweep-0", 9000, 0.95, NOW - 5),
        summary("research/sweep-1", 4000, 0.40, NOW - 3),
    )
    one_by_one, batched = shared_pool(), shared_pool()
    for s in summaries:
        one_by_one.feed(s)
    batched.feed(JobProgressBatch(summaries=summaries))
    progress = {k: v for k, v in batched.records.items() if k.startswith("progress/")}
    assert progress == {k: v for k, v in one_by_one.records.items() if k.startswith("progress/")}
    assert set(progress) == {"progress/research/sweep-0", "progress/research/sweep-1"}
    assert batched.records["clock"] == one_by_one.records["clock"]  # its newest summary's time


def test_a_summary_older_than_the_decider_s_copy_is_skipped_inside_a_batch() -> None:
    c = shared_pool()
    c.feed(summary("research/sweep-0", 10, 0.5, NOW))
    c.feed(
        JobProgressBatch(
            summaries=(
                summary("research/sweep-0", 5, 0.1, NOW - 100),
                summary("research/sweep-1", 7, 0.3, NOW - 50),
            )
        )
    )
    assert c.records["progress/research/sweep-0"]["progress"] == 0.5
    assert c.records["progress/research/sweep-1"]["progress"] == 0.3


def test_a_batch_s_progress_reaches_the_plan_of_the_next_demand() -> None:
    c = shared_pool()
    c.feed(JobProgressBatch(summaries=(summary("research/sweep-0", 9000, 0.95, NOW - 5),)))
    production_demand(c)
    sweep0 = next(j for j in c.decisions[0].snapshot.jobs if j.name == "research/sweep-0")
    assert sweep0.progress == 0.95


def suspend_sweep_for_production() -> Controller:
    """research/sweep-0 yields its two nodes to production and is suspended; production runs."""
    c = shared_pool()
    production_demand(c)
    ack(c, 0, NOW + 40, YieldOutcome.CHECKPOINTED)
    ack(c, 1, NOW + 41, YieldOutcome.CHECKPOINTED)
    for k in range(2):
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 41)
    c.add(
        pod_group("sweep-0", namespace="research", queue="research", min_member=2, phase="Pending"),
        NOW + 41,
    )
    c.add(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "sweep-0", "namespace": "research"},
            "spec": {
                "queue": "research",
                "minAvailable": 2,
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": 2,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "trainer",
                                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                    }
                                ]
                            }
                        },
                    }
                ],
            },
            "status": {"state": {"phase": "Aborted"}},
        },
        NOW + 41,
    )
    # Production placed on one node; the other freed node stays nominated until then.
    c.add(pod("ft-llama", 0, namespace="prod", priority=1000, node="gpu-00"), NOW + 60)
    c.change(pod_group("ft-llama", namespace="prod", queue="production"), NOW + 60)
    assert not [cmd for cmd in c.commands if cmd.action is CommandAction.RESUME]
    return c


def test_a_suspended_job_resumes_when_it_fits_again_and_no_heavier_job_waits() -> None:
    c = suspend_sweep_for_production()
    # Production finishes and leaves: the research job fits again, after its backoff.
    c.delete(pod("ft-llama", 0, namespace="prod", priority=1000, node="gpu-00"), NOW + 3600)
    c.tick(NOW + 3601)
    resumes = [cmd for cmd in c.commands if cmd.action is CommandAction.RESUME]
    assert [r.job for r in resumes] == ["research/sweep-0"]
    c.tick(NOW + 3700)
    assert len([cmd for cmd in c.commands if cmd.action is CommandAction.RESUME]) == 1


def test_a_suspended_job_the_free_gpus_cannot_hold_is_not_planned_for() -> None:
    c = suspend_sweep_for_production()
    # Production holds gpu-00 and the tick leaves one free 8-GPU node for a 16-GPU gang.
    c.planned_for.clear()
    c.tick(NOW + 3000)
    assert "research/sweep-0" not in c.planned_for
    # Production leaves: now the free GPUs could hold it, the planner is asked, it resumes.
    c.delete(pod("ft-llama", 0, namespace="prod", priority=1000, node="gpu-00"), NOW + 3600)
    c.tick(NOW + 3601)
    assert "research/sweep-0" in c.planned_for
    assert [cmd.job for cmd in c.commands if cmd.action is CommandAction.RESUME] == [
        "research/sweep-0"
    ]


def test_an_object_the_controller_cannot_read_is_rejected_with_the_field_named() -> None:
    c = shared_pool()
    bad = pod("ft", 0, namespace="prod")
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "two"
    with pytest.raises(InputRejected, match=r"Pod ft-worker-0: .*nvidia.com/gpu must be a whole"):
        c.add(bad, NOW)


def test_a_node_holding_more_than_it_has_is_closed_rather_than_breaking_decisions() -> None:
    c = shared_pool()
    # a stale bind: the watch shows a third pod on gpu-00 before the old one's deletion
    c.add(pod("stray", 0, namespace="research", node="gpu-00"), NOW)
    production_demand(c)
    assert len(c.decisions) == 1
    gpu00 = next(n for n in c.decisions[0].snapshot.nodes if n.name == "gpu-00")
    assert (gpu00.gpus, gpu00.schedulable) == (16, False)
    assert c.alerts == []


def test_pods_of_the_same_name_in_two_namespaces_are_told_apart() -> None:
    c = shared_pool()
    c.add(pod_group("sweep-0", namespace="team-b", queue="research", min_member=1), NOW)
    c.add(node("gpu-04"), NOW)
    c.add(pod("sweep-0", 0, namespace="team-b", node="gpu-04"), NOW)
    production_demand(c)
    decision = c.decisions[0]
    names = [p.name for j in decision.snapshot.jobs for p in j.pods]
    assert "research/sweep-0-worker-0" in names
    assert "team-b/sweep-0-worker-0" in names
    assert all("/" not in p for cmd in c.commands for p in cmd.pods)


def test_surplus_pods_of_an_elastic_job_yield_without_the_job_being_suspended() -> None:
    c = Controller()
    for i in range(2):
        c.add(node(f"gpu-{i:02d}"), NOW - 60)
    c.add(queue("production", capability=16, guarantee=16, reclaimable=False), NOW - 60)
    c.add(queue("research", capability=16), NOW - 60)
    # an elastic data-parallel job: 4 pods x 4 GPUs, runs on 2 or more
    c.add(pod_group("elastic", namespace="research", queue="research", min_member=2), NOW - 60)
    for k in range(4):
        c.add(pod("elastic", k, namespace="research", gpus=4, node=f"gpu-0{k // 2}"), NOW - 60)
    production_demand(c)
    assert [(cmd.whole_job, cmd.gpus, len(cmd.pods)) for cmd in c.commands] == [(False, 8, 2)]
    ack(c, 0, NOW + 30, YieldOutcome.CHECKPOINTED)
    assert "suspended/research/elastic" not in c.records
