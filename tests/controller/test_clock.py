"""Trusted time: no message moves the decider's clock far, and a poisoned clock is repaired."""

from __future__ import annotations

import pytest
from cluster_objects import node
from harness import NOW, production_demand, shared_pool
from hypothesis import given
from hypothesis import strategies as st

from gpuyield.agents.controller.clock import advance, clamp_times
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import step
from gpuyield.agents.controller.progress import fold
from gpuyield.agents.worker.heartbeats import ProgressFolder
from gpuyield.schemas.messages import (
    AlertKind,
    Heartbeat,
    JobProgress,
    KubeEvent,
    KubeEventType,
    KubeKind,
    Tick,
    YieldAck,
    YieldOutcome,
)

BOUND = ControllerConfig().max_clock_skew_s
YEAR = 365 * 86400.0
times = st.floats(min_value=1.6e9, max_value=4.1e9, allow_nan=False)


@given(clock=times, tick=st.none() | times, at=times)
def test_no_message_but_a_tick_moves_the_clock_by_more_than_the_bound(
    clock: float, tick: float | None, at: float
) -> None:
    tick = None if tick is None else min(tick, clock)  # a tick never runs ahead of the clock
    reading = advance(clock, tick, at, is_tick=False, max_skew_s=BOUND)
    assert clock <= reading.now <= clock + BOUND
    if tick is not None:
        assert reading.now <= max(clock, tick + BOUND)


def any_input(at: float) -> st.SearchStrategy[KubeEvent | JobProgress | YieldAck]:
    return st.sampled_from(
        [
            KubeEvent(
                type=KubeEventType.ADDED,
                kind=KubeKind.NODE,
                name="gpu-99",
                object=node("gpu-99"),
                observed_at=at,
            ),
            JobProgress(job="research/x", step=1, progress=0.1, first_seen_at=at, updated_at=at),
            YieldAck(
                command_id="unknown", node="gpu-01", job="research/x", outcome="exited", acked_at=at
            ),
        ]
    )


@given(data=st.data(), ahead=st.floats(min_value=0, max_value=YEAR))
def test_through_the_decider_no_input_moves_the_clock_by_more_than_the_bound(
    data: st.DataObject, ahead: float
) -> None:
    c = shared_pool()
    before = c.records["clock"]["now"]
    message = data.draw(any_input(before + ahead))
    c.feed(message)
    assert before <= c.records["clock"]["now"] <= before + BOUND


def test_a_watch_event_from_a_year_ahead_is_clamped_and_flagged() -> None:
    c = shared_pool()
    before = c.records["clock"]["now"]
    c.add(node("gpu-09"), before + YEAR)
    assert c.records["clock"]["now"] == before + BOUND
    (alert,) = [a for a in c.alerts if a.kind is AlertKind.CLOCK_SKEW]
    assert alert.details["input"] == "KubeEvent"


def test_yield_deadlines_stay_near_the_workers_time_after_a_forged_time() -> None:
    c = shared_pool()
    c.tick(NOW - 30)
    c.change(node("gpu-00"), NOW + YEAR)
    production_demand(c)
    assert c.commands
    assert all(cmd.deadline <= NOW + BOUND + 120 for cmd in c.commands)


def test_a_tick_far_behind_a_poisoned_clock_sets_it_back_and_clamps_later_times() -> None:
    c = shared_pool()
    production_demand(c)
    held = c.records["reservation/prod/ft-llama"]
    poisoned = {**c.records, "clock": {"now": NOW + YEAR, "tick": None}}
    poisoned["reservation/prod/ft-llama"] = {**held, "until": NOW + YEAR + 600}
    outcome = step(poisoned, Tick(at=NOW + 5), "ticks/0/1", ControllerConfig())
    assert outcome.writes["clock"] == {"now": NOW + 5, "tick": NOW + 5}
    # the hold stamped a year ahead is clamped to now, so it ends at once
    assert [(r.job, r.state.value) for r in outcome.reservations][:1] == [
        ("prod/ft-llama", "released")
    ]
    repaired = [a for a in outcome.alerts if a.kind is AlertKind.CLOCK_SKEW]
    assert repaired[0].severity == "critical"


def test_a_tick_moves_the_clock_forward_however_far_a_worker_back_from_an_outage() -> None:
    c = shared_pool()
    c.tick(NOW + 86400)
    assert c.records["clock"]["now"] == NOW + 86400


def test_clamping_leaves_counts_and_names_alone() -> None:
    record = {"since": 9e9, "decision": "d", "checkpoint_step": 9_000_000_000, "nodes": ["a"]}
    assert clamp_times(record, 100.0) == {**record, "since": 100.0}


def beat(step: int, sent_at: float, checkpoint_at: float | None = None) -> Heartbeat:
    return Heartbeat(
        job="research/sweep-7",
        pod="sweep-7-0",
        step=step,
        progress=step / 1000,
        last_checkpoint_step=step - 10 if checkpoint_at else None,
        last_checkpoint_at=checkpoint_at,
        sent_at=sent_at,
    )


def test_a_trainer_a_year_ahead_is_read_in_the_workers_time() -> None:
    folded = fold(None, beat(100, NOW + YEAR, NOW + YEAR - 600), received_at=NOW)
    assert folded is not None
    assert folded.updated_at == NOW
    assert folded.last_checkpoint_at == NOW - 600  # its checkpoint age is kept
    assert folded.clock_offset_s == YEAR


def test_a_skewed_trainers_later_heartbeats_are_not_ignored() -> None:
    folder = ProgressFolder({})
    folder.fold(beat(100, NOW + YEAR), received_at=NOW)
    assert folder.fold(beat(110, NOW + YEAR + 10), received_at=NOW + 10) == "research/sweep-7"
    assert folder.latest["research/sweep-7"].step == 110


def test_a_record_left_in_the_future_by_a_skewed_trainer_is_replaced() -> None:
    poisoned = fold(None, beat(100, NOW + YEAR))
    assert poisoned is not None
    folded = fold(poisoned, beat(120, NOW), received_at=NOW)
    assert folded is not None
    assert (folded.step, folded.updated_at) == (120, NOW)


def test_a_trainer_within_the_bound_keeps_its_own_times() -> None:
    folded = fold(None, beat(100, NOW + 5, NOW - 60), received_at=NOW)
    assert folded is not None
    assert (folded.updated_at, folded.last_checkpoint_at, folded.clock_offset_s) == (
        NOW + 5,
        NOW - 60,
        None,
    )


def test_the_decider_flags_a_trainer_whose_clock_was_corrected() -> None:
    c = shared_pool()
    summary = fold(None, beat(100, NOW + YEAR), received_at=NOW)
    assert summary is not None
    c.feed(summary)
    assert [a.job for a in c.alerts if a.kind is AlertKind.CLOCK_SKEW] == ["research/sweep-7"]


def test_an_exited_ack_from_the_future_changes_nothing_but_the_clock_bound() -> None:
    c = shared_pool()
    before = c.records["clock"]["now"]
    ack = YieldAck(
        command_id="c", node="gpu-00", job="research/x", outcome=YieldOutcome.EXITED, acked_at=4e9
    )
    c.feed(ack)
    assert c.records["clock"]["now"] == before + BOUND


def test_a_backlog_older_than_the_bound_is_folded_whole_when_caught_up() -> None:
    """A worker back after 40 minutes reads 250 beats its trainer queued 10 s apart."""
    sent = [NOW - 2500 + 10 * i for i in range(250)]
    # Checkpoints every 30 minutes, once the first is written.
    beats = [beat(4 * (i + 1), at, at - at % 1800 if i > 2 else None) for i, at in enumerate(sent)]
    folder = ProgressFolder({})
    changed = [
        folder.fold(b, received_at=NOW + 0.01 * i, queued_at=b.sent_at + 0.05)
        for i, b in enumerate(beats)
    ]
    assert changed == ["research/sweep-7"] * 250  # none taken for old news
    (forwarded,) = [f.record for f in folder.forward_changed(["research/sweep-7"])]
    assert (forwarded.step, forwarded.progress, forwarded.updated_at) == (1000, 1.0, sent[-1])
    assert forwarded.clock_offset_s is None
    assert forwarded.step_rate == pytest.approx(0.4)  # 4 steps every 10 s: the trainer's times
    c = shared_pool()
    c.feed(forwarded)
    assert [a for a in c.alerts if a.kind is AlertKind.CLOCK_SKEW] == []


def test_a_trainer_ahead_is_caught_though_its_own_producer_stamped_the_record() -> None:
    """Where the topic keeps CreateTime the record's time is the trainer's clock too."""
    folded = fold(None, beat(100, NOW + YEAR), received_at=NOW, queued_at=NOW + YEAR)
    assert folded is not None
    assert (folded.updated_at, folded.clock_offset_s) == (NOW, YEAR)


def test_a_trainer_behind_is_caught_when_the_broker_stamped_the_record() -> None:
    """Where the topic stamps LogAppendTime, a beat a year old on arrival at the broker is
    a clock a year behind, even when the worker reads it late from a backlog."""
    late = beat(100, NOW - YEAR, NOW - YEAR - 600)
    folded = fold(None, late, received_at=NOW + 2500, queued_at=NOW)
    assert folded is not None
    assert folded.updated_at == NOW  # when it was queued, not when it was read
    assert folded.last_checkpoint_at == NOW - 600  # its checkpoint age is kept
    assert folded.clock_offset_s == -YEAR


def test_a_skewed_trainers_backlog_keeps_its_order_in_the_brokers_time() -> None:
    folder = ProgressFolder({})
    queued = [NOW - 2500 + 10 * i for i in range(250)]
    for i, at in enumerate(queued):
        skewed = beat(4 * (i + 1), at + YEAR)
        assert folder.fold(skewed, received_at=NOW + 0.01 * i, queued_at=at) is not None
    record = folder.latest["research/sweep-7"]
    assert (record.step, record.updated_at, record.clock_offset_s) == (1000, queued[-1], YEAR)
    assert record.step_rate == pytest.approx(0.4)


def test_kafkas_missing_timestamp_leaves_the_reading_as_the_witness() -> None:
    folded = fold(None, beat(100, NOW - 2500), received_at=NOW, queued_at=-0.001)
    assert folded is not None
    assert (folded.updated_at, folded.clock_offset_s) == (NOW, -2500)
