"""The decider's table holds only what a later decision can need (ISSUE9 §5 "Bounded")."""

from __future__ import annotations

from cluster_objects import T0, pod
from harness import NOW, Controller, production_demand, shared_pool

from gpuyield.schemas.messages import AlertKind, JobProgress, YieldAck, YieldOutcome


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
