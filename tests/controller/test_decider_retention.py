"""The decider's table holds only what a later decision can need (ISSUE9 §5 "Bounded")."""

from __future__ import annotations

from cluster_objects import T0, event, pod, pod_group
from harness import NOW, Controller, ReadsCounted, apply_writes, production_demand, shared_pool

from gpuyield.agents.controller.decider import step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.schemas.messages import (
    AlertKind,
    JobProgress,
    KubeEventType,
    Tick,
    YieldAck,
    YieldOutcome,
)


def hard_killed_ack(c: Controller, index: int, at: float) -> YieldAck:
    command = c.commands[index]
    ack = YieldAck(
        command_id=command.command_id,
        decision_id=command.decision_id,
        node=command.node,
        job=command.job,
        outcome=YieldOutcome.HARD_KILLED,
        gpu_seconds_lost=900.0,
        acked_at=at,
    )
    c.feed(ack)
    return ack


def evict_sweep_0(c: Controller) -> list[YieldAck]:
    """ft-llama takes sweep-0's GPUs; both its pods are hard-killed and go."""
    production_demand(c)
    acks = [hard_killed_ack(c, i, NOW + 121) for i in range(2)]
    for k in range(2):
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 122)
    return acks


def test_a_finished_yield_and_its_alerts_are_forgotten_after_their_retention() -> None:
    c = shared_pool()
    evict_sweep_0(c)
    assert len(c.yields_of("research/sweep-0")) == 1
    assert any(k.startswith("alert/") for k in c.records)
    keep = max(c.config.yield_retention_s, c.config.alert_retention_s)
    c.tick(NOW + 122 + keep - 1)
    assert len(c.yields_of("research/sweep-0")) == 1
    c.tick(NOW + 122 + keep + 1)
    assert c.yields_of("research/sweep-0") == []
    assert not any(k.startswith("alert/") for k in c.records)


def test_an_old_ack_replayed_after_its_records_expired_raises_nothing_again() -> None:
    c = shared_pool()
    acks = evict_sweep_0(c)
    raised = [a for a in c.alerts if a.kind is AlertKind.YIELD_HARD_KILLED]
    assert len(raised) == 2
    keep = max(c.config.yield_retention_s, c.config.alert_retention_s)
    c.tick(NOW + 122 + keep + 1)
    before = dict(c.records)
    for ack in acks:  # the consumer group was reset to an old offset
        outcome = c.feed(ack)
        assert outcome.alerts == ()
    assert {k: v for k, v in c.records.items() if k != "clock"} == {
        k: v for k, v in before.items() if k != "clock"
    }


def test_evictions_outside_the_livelock_window_are_dropped_with_the_guards_old_entries() -> None:
    c = shared_pool()
    evict_sweep_0(c)
    assert c.records["evictions/research/sweep-0"]["at"] == [NOW]
    assert c.records["guard"]["evictions"]
    window = c.config.policy.eviction_window_s
    c.tick(NOW + window - 1)
    assert c.records["evictions/research/sweep-0"]["at"] == [NOW]
    c.tick(NOW + window + 1)
    assert "evictions/research/sweep-0" not in c.records
    assert c.records["guard"] == {"evictions": [], "resumed_at": {}, "reported": {}}


def test_the_progress_of_a_deleted_job_is_forgotten_and_a_running_jobs_is_kept() -> None:
    c = shared_pool()
    for job in ("research/sweep-0", "research/deleted-yesterday"):
        c.feed(JobProgress(job=job, step=10, progress=0.5, first_seen_at=T0, updated_at=NOW - 10))
    c.tick(NOW + c.config.forget_after_s + 1)
    assert "progress/research/sweep-0" in c.records
    assert "progress/research/deleted-yesterday" not in c.records


def test_a_tick_looks_only_at_the_records_of_jobs_nothing_names_any_more() -> None:
    """Retention used to list every job the watch knows and walk every progress record
    on each tick (16 to 33 ms at 10,000 nodes); the index knows the jobs whose records
    outlived their objects."""
    c = shared_pool()
    for job in ("research/sweep-0", "research/sweep-1", "research/deleted-yesterday"):
        c.feed(JobProgress(job=job, step=10, progress=0.5, first_seen_at=T0, updated_at=NOW - 10))
    index = RecordIndex.build(c.records, c.config)
    assert index.unnamed == {"research/deleted-yesterday"}
    table = ReadsCounted(c.records)

    outcome = step(
        table, Tick(at=NOW + c.config.forget_after_s + 1), "in/0/1", c.config, index=index
    )

    assert outcome.writes["progress/research/deleted-yesterday"] is None
    assert not table.read & {"progress/research/sweep-0", "progress/research/sweep-1"}


def test_a_job_is_looked_at_once_its_last_watched_object_goes() -> None:
    c = shared_pool()
    c.feed(JobProgress(job="research/sweep-0", step=10, progress=0.5, first_seen_at=T0,
                       updated_at=NOW - 10))  # fmt: skip
    records = dict(c.records)
    index = RecordIndex.build(records, c.config)
    gone = [
        event(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW, KubeEventType.DELETED)
        for k in range(2)
    ]
    gone.append(event(pod_group("sweep-0", namespace="research", queue="research"), NOW,
                      KubeEventType.DELETED))  # fmt: skip
    for n, message in enumerate(gone):
        assert "research/sweep-0" not in index.unnamed  # something still names it
        outcome = step(records, message, f"in/0/{n}", c.config, index=index)
        apply_writes(records, outcome)
        index.apply(outcome.writes, records)
    assert "research/sweep-0" in index.unnamed

    later = Tick(at=NOW + c.config.forget_after_s + 1)
    outcome = step(records, later, "in/0/9", c.config, index=index)

    assert outcome.writes["progress/research/sweep-0"] is None
