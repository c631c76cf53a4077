"""Replay: the pure step re-run over a recorded run, in the journal's order, compared.

The runs are recorded as the worker records them (``recorded_run``): the
inputs on their topics, one journal entry per input, the decisions and
commands published.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from cluster_objects import pod
from harness import NOW, production_demand, shared_pool
from recorded_run import RecordingController

from gpuyield.agents.controller.replay import (
    ReplayError,
    RunRecord,
    Window,
    compare,
    derive,
    what_if,
)
from gpuyield.schemas.config import with_knobs
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import (
    Decision,
    JobProgress,
    JobProgressBatch,
    JournalEntry,
    RoundOutcome,
    YieldAck,
    YieldOutcome,
)


def a_yield_and_its_aftermath(prefix: str = "") -> RecordingController:
    """Production's fine-tune evicts a research sweep, which checkpoints and leaves."""
    c = shared_pool(c=RecordingController(prefix=prefix))
    production_demand(c)
    c.tick(NOW + 5)
    for command in list(c.commands):
        c.feed(
            YieldAck(
                command_id=command.command_id,
                decision_id=command.decision_id,
                node=command.node,
                job=command.job,
                outcome=YieldOutcome.CHECKPOINTED,
                checkpoint_step=1200,
                seconds_taken=35.0,
                acked_at=NOW + 40,
            )
        )
    for k in range(2):
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 41)
    c.tick(NOW + 45)
    return c


def replayed(record: RunRecord, window: Window | None = None):  # type: ignore[no-untyped-def]
    return compare(record, derive(record, window=window))


def test_a_recorded_run_replays_with_every_decision_and_command_identical() -> None:
    c = a_yield_and_its_aftermath()
    report = replayed(c.record())
    assert report.differences == 0
    assert report.journalled
    assert report.recorded
    assert report.steps == len(c.journal)
    outcomes = [i.outcome for i in report.items if i.kind == "decision"]
    assert outcomes == ["yield", "skipped-yielding", "skipped-held"]
    assert [i.status for i in report.items] == ["identical"] * 5  # 3 decisions, 2 commands


def test_a_changed_recorded_decision_is_reported_with_a_field_by_field_diff() -> None:
    c = a_yield_and_its_aftermath()
    record = c.record()
    first = json.loads(record.decisions[0] or b"")
    first["plan"]["victims"][0]["lost_gpu_seconds"] = 1.0
    tampered = dataclasses.replace(
        record, decisions=[json.dumps(first).encode(), *record.decisions[1:]]
    )
    report = replayed(tampered)
    [different] = [i for i in report.items if i.status == "different"]
    assert different.id == c.rounds[0].decision_id
    victim = c.rounds[0].plan.victims[0]
    assert different.diff == (
        f"plan.victims[0].lost_gpu_seconds: 1.0 -> {json.dumps(victim.lost_gpu_seconds)}",
    )
    assert report.differences == 1


def test_a_decision_missing_from_the_record_or_never_derived_is_a_difference() -> None:
    c = a_yield_and_its_aftermath()
    record = c.record()
    foreign = c.rounds[1].model_copy(update={"decision_id": "not-derived"})
    changed = dataclasses.replace(record, decisions=[*record.decisions[:1], encode(foreign)])
    statuses = {i.id: i.status for i in replayed(changed).items if i.kind == "decision"}
    assert statuses[c.rounds[1].decision_id] == "derived-only"
    assert statuses["not-derived"] == "recorded-only"


def test_with_nothing_recorded_replay_derives_and_says_so_for_each_decision() -> None:
    c = a_yield_and_its_aftermath()
    report = replayed(dataclasses.replace(c.record(), decisions=[], commands=[]))
    assert not report.recorded
    assert {i.status for i in report.items} == {"derived"}
    assert report.differences == 0


def test_inputs_without_a_journal_are_taken_in_the_order_of_their_own_times() -> None:
    c = a_yield_and_its_aftermath()
    report = replayed(dataclasses.replace(c.record(), journal=[]))
    assert not report.journalled
    assert report.steps == len(c.inputs)
    # the same run: every input's time is in its order here, so the same decisions
    # (their ids name the input's position, not the journal)
    assert report.differences == 0


def test_a_journal_that_begins_mid_history_cannot_be_replayed() -> None:
    c = a_yield_and_its_aftermath()
    record = c.record()
    with pytest.raises(ReplayError, match="begins mid-history"):
        derive(dataclasses.replace(record, journal=record.journal[3:]))


def test_an_input_past_its_retention_is_named() -> None:
    c = a_yield_and_its_aftermath()
    record = c.record()
    inputs = dict(record.inputs)
    del inputs[("gpuyield.ticks", 0, 0)]
    with pytest.raises(ReplayError, match=r"names gpuyield\.ticks/0/0, which the record does not"):
        derive(dataclasses.replace(record, inputs=inputs))


def test_a_restarted_decider_s_recovered_table_is_checked_against_the_replay() -> None:
    c = shared_pool(c=RecordingController())
    production_demand(c)
    c.restart()
    c.tick(NOW + 5)
    report = replayed(c.record())
    assert report.state_checks == 1
    assert report.state_mismatches == ()
    journal = list(c.record().journal)
    offset, raw = journal[-1]
    entry = JournalEntry.model_validate_json(raw or b"")
    assert entry.start is not None
    lost = entry.start.model_copy(update={"records": entry.start.records - 1})
    journal[-1] = (offset, encode(entry.model_copy(update={"start": lost})))
    report = replayed(dataclasses.replace(c.record(), journal=journal))
    assert report.differences == 1
    assert "the worker started on a table of" in report.state_mismatches[0]


def test_a_window_compares_only_the_steps_inside_it_but_rebuilds_the_state_before_it() -> None:
    c = a_yield_and_its_aftermath()
    yield_step = int(c.rounds[0].origin.rsplit("/", 1)[-1])
    assert c.rounds[0].origin.startswith("gpuyield.kube-events")
    first_tick = next(
        offset
        for offset, raw in c.journal
        if JournalEntry.model_validate_json(raw or b"").topic == "gpuyield.ticks"
    )
    assert first_tick > yield_step
    report = replayed(c.record(), Window(from_offset=first_tick))
    decisions = [i for i in report.items if i.kind == "decision"]
    assert [i.outcome for i in decisions] == ["skipped-yielding", "skipped-held"]
    assert {i.status for i in decisions} == {"identical"}


def test_a_what_if_that_protects_the_victims_spares_them_and_counts_their_work() -> None:
    c = a_yield_and_its_aftermath()
    record = c.record()
    baseline = derive(record)
    # Jobs that started within the last 7 hours are never victims: the sweeps ran 6.
    protective = derive(record, adjust=lambda config: with_knobs(config, {"cooldown_s": 25200}))
    report = what_if(record, baseline, protective)
    assert report.against == "record"
    victim = c.rounds[0].plan.victims[0]
    assert [(e.job, e.preemptor) for e in report.spared] == [(victim.job, "prod/ft-llama")]
    assert report.lost_gpu_seconds_spared == victim.lost_gpu_seconds
    assert report.instead == ()
    assert "open loop" in report.open_loop
    assert "gpuyield simulate --from-archive" in report.open_loop


def test_a_what_if_under_the_same_policy_changes_nothing() -> None:
    c = a_yield_and_its_aftermath()
    record = c.record()
    report = what_if(record, derive(record), derive(record, adjust=lambda config: config))
    assert report.spared == report.instead == ()
    assert report.baseline_evictions == report.what_if_evictions == 1


def test_the_replayed_decisions_use_the_configuration_the_journal_recorded() -> None:
    c = shared_pool(c=RecordingController())
    c.config = with_knobs(c.config, {"grace_s": 45})
    c.writer = None
    production_demand(c)
    record = c.record()
    derived = derive(record)  # no configuration given: the journal's start names it
    [decision] = [d for d in derived.decisions.values() if d.outcome is RoundOutcome.YIELD]
    assert isinstance(decision, Decision)
    assert {v.grace_s for v in decision.plan.victims} == {45.0}
    assert compare(record, derived).differences == 0


def test_progress_recorded_as_a_bare_summary_or_as_a_batch_replays_identically() -> None:
    c = shared_pool(c=RecordingController())
    summary = JobProgress(
        job="research/sweep-0",
        step=9000,
        progress=0.95,
        last_checkpoint_at=NOW - 30,
        first_seen_at=NOW - 7200,
        updated_at=NOW - 5,
    )
    c.feed(summary)  # as a worker before batches sent it
    c.feed(JobProgressBatch(summaries=(summary.model_copy(update={"job": "research/sweep-1"}),)))
    production_demand(c)
    report = replayed(c.record())
    assert report.differences == 0
    assert report.steps == len(c.journal)
    assert [i.outcome for i in report.items if i.kind == "decision"] == ["yield"]
