"""The node agent's pure rules: staleness, checkpoint detection, the waiting moves, lost work."""

from __future__ import annotations

import pytest

from gpuyield.agents.node import handling
from gpuyield.agents.node.handling import Finish, Kill, Timing, Wait, Watch
from gpuyield.agents.node.progress import SeenProgress
from gpuyield.schemas.messages import YieldCommand, YieldOutcome

SIGNALLED = 1000.0
TIMING = Timing(deadline=SIGNALLED + 60, exit_grace_s=10, settle_s=2)


def command(**changes: object) -> YieldCommand:
    fields: dict[str, object] = {
        "command_id": "c1",
        "decision_id": "d1",
        "node": "n1",
        "job": "team/train",
        "pods": ("train-0",),
        "grace_s": 60.0,
        "issued_at": SIGNALLED,
        "deadline": SIGNALLED + 60,
    }
    fields.update(changes)
    return YieldCommand.model_validate(fields)


def seen(
    step: int = 50,
    sent_at: float = SIGNALLED - 5,
    ckpt: int | None = 40,
    ckpt_at: float | None = SIGNALLED - 100,
) -> SeenProgress:
    return SeenProgress(step, sent_at, ckpt, ckpt_at)


def run(
    watch: Watch,
    now: float,
    *,
    alive: bool,
    progress: SeenProgress | None,
    baseline: int | None = 40,
):
    return handling.step(
        watch,
        now=now,
        alive=alive,
        seen=progress,
        signalled_at=SIGNALLED,
        baseline_step=baseline,
        timing=TIMING,
    )


def test_a_command_is_stale_only_well_past_its_deadline() -> None:
    cmd = command()
    assert not handling.is_stale(cmd, cmd.deadline + 59, stale_after_s=60)
    assert handling.is_stale(cmd, cmd.deadline + 61, stale_after_s=60)


def test_the_signal_grace_is_what_is_left_of_the_deadline() -> None:
    cmd = command(grace_s=30.0)
    assert handling.signal_grace_s(cmd, SIGNALLED) == 30.0  # capped by grace_s
    assert handling.signal_grace_s(cmd, SIGNALLED + 50) == 10.0
    assert handling.signal_grace_s(cmd, SIGNALLED + 70) == 0.0


@pytest.mark.parametrize(
    ("progress", "baseline", "expected"),
    [
        (None, 40, None),
        (seen(ckpt=None, ckpt_at=None), 40, None),
        (seen(ckpt=41, ckpt_at=SIGNALLED + 3), 40, 41),  # saved after the signal
        (seen(ckpt=41, ckpt_at=SIGNALLED - 1), 40, None),  # a periodic save just before it
        (seen(ckpt=41, ckpt_at=None), 40, 41),  # no save time: the step moved past the baseline
        (seen(ckpt=40, ckpt_at=None), 40, None),
        (seen(ckpt=41, ckpt_at=None), None, None),  # neither time nor baseline: cannot tell
    ],
)
def test_checkpoint_after_signal(
    progress: SeenProgress | None, baseline: int | None, expected: int | None
) -> None:
    assert handling.checkpoint_after_signal(progress, SIGNALLED, baseline) == expected


def test_checkpointed_and_gone_finishes_checkpointed() -> None:
    watch, move = run(Watch(), SIGNALLED + 1, alive=True, progress=seen())
    assert move == Wait(TIMING.deadline)
    progress = seen(step=42, sent_at=SIGNALLED + 2, ckpt=42, ckpt_at=SIGNALLED + 2)
    watch, move = run(watch, SIGNALLED + 2, alive=True, progress=progress)
    assert watch.checkpoint_step == 42
    assert move == Wait(SIGNALLED + 2 + 10)  # the exit grace after the checkpoint
    watch, move = run(watch, SIGNALLED + 3, alive=False, progress=progress)
    assert move == Finish(YieldOutcome.CHECKPOINTED, SIGNALLED + 3)


def test_checkpointed_but_still_running_is_killed_after_the_exit_grace_and_stays_checkpointed() -> (
    None
):
    progress = seen(ckpt=42, ckpt_at=SIGNALLED + 2)
    watch, _ = run(Watch(), SIGNALLED + 2, alive=True, progress=progress)
    _, move = run(watch, SIGNALLED + 12, alive=True, progress=progress)
    assert move == Kill(YieldOutcome.CHECKPOINTED)


def test_the_exit_grace_never_runs_past_the_deadline() -> None:
    progress = seen(ckpt=42, ckpt_at=TIMING.deadline - 1)
    watch, move = run(Watch(), TIMING.deadline - 1, alive=True, progress=progress)
    assert move == Wait(TIMING.deadline)
    _, move = run(watch, TIMING.deadline, alive=True, progress=progress)
    assert move == Kill(YieldOutcome.CHECKPOINTED)


def test_gone_without_a_checkpoint_waits_for_a_late_heartbeat_then_exited() -> None:
    watch, move = run(Watch(), SIGNALLED + 5, alive=False, progress=seen())
    assert move == Wait(SIGNALLED + 5 + 2)
    # The checkpoint heartbeat arrives after the exit was seen: still checkpointed.
    late = seen(ckpt=43, ckpt_at=SIGNALLED + 4)
    _, move = run(watch, SIGNALLED + 6, alive=False, progress=late)
    assert move == Finish(YieldOutcome.CHECKPOINTED, SIGNALLED + 5)
    # Without it, exited once the settle time is over.
    _, move = run(watch, SIGNALLED + 7, alive=False, progress=seen())
    assert move == Finish(YieldOutcome.EXITED, SIGNALLED + 5)


def test_still_running_at_the_deadline_without_a_checkpoint_is_hard_killed() -> None:
    watch, move = run(Watch(), TIMING.deadline - 0.5, alive=True, progress=seen())
    assert move == Wait(TIMING.deadline)
    _, move = run(watch, TIMING.deadline, alive=True, progress=seen())
    assert move == Kill(YieldOutcome.HARD_KILLED)


def test_no_heartbeat_at_all_still_ends_at_the_deadline() -> None:
    _, move = run(Watch(), TIMING.deadline + 1, alive=True, progress=None, baseline=None)
    assert move == Kill(YieldOutcome.HARD_KILLED)


def test_lost_work_is_zero_when_checkpointed() -> None:
    lost, note = handling.lost_gpu_seconds(
        YieldOutcome.CHECKPOINTED, seen(), stopped_at=SIGNALLED + 60, signalled_at=SIGNALLED, gpus=8
    )
    assert (lost, note) == (0.0, "")


def test_lost_work_is_gpus_times_the_time_since_the_last_checkpoint() -> None:
    lost, note = handling.lost_gpu_seconds(
        YieldOutcome.HARD_KILLED,
        seen(ckpt_at=SIGNALLED - 100),
        stopped_at=SIGNALLED + 60,
        signalled_at=SIGNALLED,
        gpus=8,
    )
    assert lost == 8 * 160
    assert "8 GPU(s)" in note


def test_lost_work_is_zero_when_the_trainer_stopped_at_its_checkpoint() -> None:
    # The SDK does not save a step twice: a yield right after a periodic save reports the old time.
    progress = seen(step=40, sent_at=SIGNALLED + 1, ckpt=40, ckpt_at=SIGNALLED - 3)
    lost, _ = handling.lost_gpu_seconds(
        YieldOutcome.EXITED, progress, stopped_at=SIGNALLED + 2, signalled_at=SIGNALLED, gpus=4
    )
    assert lost == 0.0


@pytest.mark.parametrize("progress", [None, seen(ckpt=None, ckpt_at=None)])
def test_lost_work_unknown_is_reported_as_such(progress: SeenProgress | None) -> None:
    lost, note = handling.lost_gpu_seconds(
        YieldOutcome.HARD_KILLED, progress, stopped_at=SIGNALLED, signalled_at=SIGNALLED, gpus=2
    )
    assert lost == 0.0
    assert note.startswith("lost work unknown")


def test_the_ack_names_the_command_and_times_from_receipt() -> None:
    ack = handling.make_ack(
        command(), YieldOutcome.EXITED, now=SIGNALLED + 9, received_at=SIGNALLED, checkpoint_step=7
    )
    assert (ack.command_id, ack.decision_id, ack.node, ack.job) == ("c1", "d1", "n1", "team/train")
    assert ack.seconds_taken == 9
    assert ack.checkpoint_step == 7
    assert ack.acked_at == SIGNALLED + 9
