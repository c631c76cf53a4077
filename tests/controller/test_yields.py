"""A yield's life: issued, acknowledged or expired, settled, done, forgotten."""

from __future__ import annotations

from gpuyield.agents.controller import yields
from gpuyield.agents.controller.yields import YieldPhase
from gpuyield.schemas.messages import YieldCommand, YieldOutcome

T = 1_764_460_800.0


def two_node_yield() -> yields.YieldRecord:
    commands = [
        YieldCommand(
            command_id=f"c-{node}",
            decision_id="d-1",
            node=node,
            job="research/sweep-0",
            pods=(f"sweep-0-worker-{i}",),
            grace_s=120.0,
            issued_at=T,
            deadline=T + 120.0,
        )
        for i, node in enumerate(["gpu-01", "gpu-00"])
    ]
    return yields.issue(commands, preemptor="prod/ft-llama", whole_job=True)


def test_an_issued_yield_holds_all_its_pods_as_leaving() -> None:
    y = two_node_yield()
    assert yields.phase(y) is YieldPhase.ISSUED
    assert yields.leaving_pods(y) == {"sweep-0-worker-0", "sweep-0-worker-1"}
    assert [c.node for c in y.commands] == ["gpu-00", "gpu-01"]
    assert y.deadline == T + 120.0


def test_it_settles_when_every_command_is_acknowledged_and_is_done_when_its_pods_are_gone() -> None:
    y = two_node_yield()
    first = yields.acknowledge(y, "c-gpu-00", YieldOutcome.CHECKPOINTED, T + 40)
    assert first is not None
    assert yields.phase(first.value) is YieldPhase.ISSUED
    second = yields.acknowledge(first.value, "c-gpu-01", YieldOutcome.CHECKPOINTED, T + 41)
    assert second is not None
    assert yields.phase(second.value) is YieldPhase.SETTLED
    still_there = yields.observe_pods(second.value, False, T + 60, leaving_limit_s=600)
    assert yields.phase(still_there) is YieldPhase.SETTLED
    gone = yields.observe_pods(still_there, True, T + 61, leaving_limit_s=600)
    assert yields.phase(gone) is YieldPhase.DONE
    assert yields.leaving_pods(gone) == frozenset()


def test_a_redelivered_ack_changes_nothing() -> None:
    acked = yields.acknowledge(two_node_yield(), "c-gpu-00", YieldOutcome.CHECKPOINTED, T + 40)
    assert acked is not None
    assert yields.acknowledge(acked.value, "c-gpu-00", YieldOutcome.CHECKPOINTED, T + 50) is None
    assert yields.acknowledge(acked.value, "c-unknown", YieldOutcome.CHECKPOINTED, T + 50) is None


def test_unacknowledged_commands_expire_after_deadline_and_slack_and_a_late_ack_still_applies() -> (
    None
):
    y = two_node_yield()
    assert yields.expire(y, T + 150, slack_s=30.0) == (y, ())
    expired, which = yields.expire(y, T + 151, slack_s=30.0)
    assert [c.command_id for c in which] == ["c-gpu-00", "c-gpu-01"]
    assert yields.phase(expired) is YieldPhase.SETTLED
    late = yields.acknowledge(expired, "c-gpu-00", YieldOutcome.CHECKPOINTED, T + 400)
    assert late is not None
    assert late.late
    assert late.command.status == "acked"
    assert late.command.outcome == "checkpointed"


def test_pods_the_watch_never_shows_gone_stop_counting_after_the_leaving_limit() -> None:
    expired, _ = yields.expire(two_node_yield(), T + 151, slack_s=30.0)
    assert yields.phase(yields.observe_pods(expired, False, T + 751, 600)) is YieldPhase.SETTLED
    assert yields.phase(yields.observe_pods(expired, False, T + 752, 600)) is YieldPhase.DONE


def test_a_done_yield_is_forgotten_only_after_its_retention() -> None:
    expired, _ = yields.expire(two_node_yield(), T + 151, slack_s=30.0)
    done = yields.observe_pods(expired, True, T + 200, 600)
    assert not yields.forgettable(expired, T + 10**6, retention_s=3600)
    assert not yields.forgettable(done, T + 200 + 3600, retention_s=3600)
    assert yields.forgettable(done, T + 200 + 3601, retention_s=3600)


def test_only_a_settled_yield_awaits_its_pods_and_a_yield_that_does_not_move_is_itself() -> None:
    issued = two_node_yield()
    expired, _ = yields.expire(issued, T + 151, slack_s=30.0)
    done = yields.observe_pods(expired, True, T + 200, 600)
    assert [yields.awaits_pods(y) for y in (issued, expired, done)] == [False, True, False]
    # The decider skips rewriting a yield that came back as the very same object.
    assert yields.observe_pods(issued, True, T + 200, 600) is issued
    assert yields.observe_pods(expired, False, T + 200, 600) is expired
    assert yields.expire(issued, T + 100, slack_s=30.0)[0] is issued
