"""One job's history from the record: what the decider decided about it, and what happened."""

from __future__ import annotations

import json
from pathlib import Path

from cluster_objects import T0
from harness import NOW, Controller, production_demand, shared_pool
from typer.testing import CliRunner

from gpuyield.agents.controller.audit import Recorded, history
from gpuyield.cli import app
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import (
    CommandAction,
    Heartbeat,
    JobProgress,
    JobProgressBatch,
    KubeEvent,
    KubeEventType,
    KubeKind,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)
from gpuyield.streams.archive import Archive, ArchivedMessage

VICTIM = "research/sweep-0"


def recorded(topic: str, at: float, value: bytes, offset: int = 0) -> Recorded:
    return Recorded(topic, 0, offset, int(at * 1000), value)


def beat(step: int, at: float, checkpoint: int) -> Recorded:
    heartbeat = Heartbeat(
        job=VICTIM,
        pod="sweep-0-worker-0",
        step=step,
        progress=step / 5000,
        last_checkpoint_step=checkpoint,
        last_checkpoint_at=at - 60,
        sent_at=at,
    )
    return recorded("gpuyield.heartbeats", at, encode(heartbeat), step)


def submitted_job() -> Recorded:
    job = {
        "kind": "Job",
        "metadata": {
            "name": "sweep-0",
            "namespace": "research",
            "creationTimestamp": "2025-11-24T16:00:00Z",
        },
        "status": {"state": {"phase": "Running"}},
    }
    event = KubeEvent(
        type=KubeEventType.ADDED,
        kind=KubeKind.JOB,
        namespace="research",
        name="sweep-0",
        object=job,
        observed_at=T0,
    )
    return recorded("gpuyield.kube-events", T0, encode(event))


def a_yield_and_its_resume() -> tuple[Controller, list[Recorded]]:
    """The decider's real decision for a production demand, its acks, then a resume."""
    c = shared_pool()
    production_demand(c)
    record = [submitted_job(), beat(1000, NOW - 600, 900), beat(1200, NOW - 10, 1200)]
    record += [recorded("gpuyield.decisions", NOW, encode(d)) for d in c.decisions]
    record += [recorded("gpuyield.yield-commands", NOW, encode(cmd)) for cmd in c.commands]
    for i, cmd in enumerate(c.commands):
        ack = YieldAck(
            command_id=cmd.command_id,
            node=cmd.node,
            job=cmd.job,
            outcome=YieldOutcome.CHECKPOINTED,
            checkpoint_step=1234,
            seconds_taken=41.5,
            gpu_seconds_lost=0.0,
            acked_at=NOW + 42 + i,
        )
        record.append(recorded("gpuyield.yield-acks", ack.acked_at, encode(ack), i))
    resume = YieldCommand(
        command_id="resume-1",
        decision_id="resume-decision",
        action=CommandAction.RESUME,
        node="gpu-02",
        job=VICTIM,
        issued_at=NOW + 3600,
        deadline=NOW + 3720,
    )
    record.append(recorded("gpuyield.yield-commands", resume.issued_at, encode(resume), 9))
    return c, record


def test_a_job_never_recorded_has_no_history() -> None:
    _, record = a_yield_and_its_resume()
    assert history("research/never-submitted", record) is None


def test_the_decision_that_took_the_job_names_the_preemptor_rule_and_lost_work() -> None:
    c, record = a_yield_and_its_resume()
    found = history(VICTIM, record)
    assert found is not None
    (taken,) = [d for d in found.considered if d.role == "victim"]
    victim = next(v for v in c.decisions[0].plan.victims if v.job == VICTIM)
    assert taken.preemptor == "prod/ft-llama"
    assert taken.rule == victim.reason
    assert taken.w_eff == victim.w_eff
    assert taken.lost_gpu_seconds == victim.lost_gpu_seconds


def test_a_job_the_decision_spared_is_shown_with_the_rule_that_spared_it() -> None:
    _, record = a_yield_and_its_resume()
    found = history("research/sweep-1", record)
    assert found is not None
    (spared,) = found.considered
    assert spared.role in {"spared", "ineligible"}
    assert spared.preemptor == "prod/ft-llama"
    assert spared.rule


def test_each_yield_carries_its_ack_and_the_job_resumes_from_the_acked_step() -> None:
    c, record = a_yield_and_its_resume()
    found = history(VICTIM, record)
    assert found is not None
    assert [y.outcome for y in found.yields] == ["checkpointed"] * len(c.commands)
    assert {y.seconds_taken for y in found.yields} == {41.5}
    assert found.suspended_at, "a whole-job yield suspends the job"
    assert [r.node for r in found.resumed] == ["gpu-02"]
    assert found.resumed_from_step == 1234


def test_progress_is_summarised_from_the_heartbeats() -> None:
    _, record = a_yield_and_its_resume()
    found = history(VICTIM, record)
    assert found is not None
    assert (found.progress.heartbeats, found.progress.first_step, found.progress.last_step) == (
        2,
        1000,
        1200,
    )
    assert found.progress.checkpoints == 2
    assert found.submitted_at == 1_764_000_000.0
    assert found.started_at == T0


def test_an_unreadable_message_is_counted_not_guessed() -> None:
    _, record = a_yield_and_its_resume()
    found = history(VICTIM, [*record, recorded("gpuyield.yield-acks", NOW, b"\x00 junk")])
    assert found is not None
    assert found.unreadable == 1


def archived(tmp_path: Path) -> str:
    """The record written to an archive, as ``gpuyield archive`` lays it out."""
    _, record = a_yield_and_its_resume()
    archive = Archive(str(tmp_path / "archive"))
    by_topic: dict[str, list[ArchivedMessage]] = {}
    for r in record:
        topic = by_topic.setdefault(r.topic, [])
        topic.append(ArchivedMessage(r.topic, 0, len(topic), r.timestamp_ms, None, r.value))
    for messages in by_topic.values():
        archive.write(messages)
    return archive.url


def test_audit_reads_a_job_from_the_archive_as_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["audit", VICTIM, "--archive", archived(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["job"] == VICTIM
    assert doc["resumed_from_step"] == 1234
    assert {d["role"] for d in doc["considered"]} == {"victim"}


def test_audit_of_a_job_never_seen_exits_1_and_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["audit", "ml/ghost", "--archive", archived(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == "gpuyield: no recorded message names ml/ghost\n"


def test_audit_since_after_everything_finds_nothing(tmp_path: Path) -> None:
    url = archived(tmp_path)
    result = CliRunner().invoke(app, ["audit", VICTIM, "--archive", url, "--since", "2030-01-01"])
    assert result.exit_code == 1


def test_audit_with_a_bad_time_is_one_line_and_status_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["audit", VICTIM, "--archive", "x", "--until", "soon"])
    assert result.exit_code == 2
    assert result.stderr == "gpuyield: --until: not a time (Unix seconds or ISO 8601): 'soon'\n"


def test_audit_prints_a_readable_history(tmp_path: Path) -> None:
    wide = CliRunner(env={"COLUMNS": "200"})
    result = wide.invoke(app, ["audit", VICTIM, "--archive", archived(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "decisions that considered it" in result.stdout
    assert "prod/ft-llama" in result.stdout
    assert "checkpointed" in result.stdout


def test_the_rounds_that_skipped_a_demand_are_in_its_history_with_their_reason() -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 5)
    record = [
        recorded("gpuyield.decisions", d.decided_at, encode(d), offset)
        for offset, d in enumerate(c.rounds)
    ]
    found = history("prod/ft-llama", record)
    assert found is not None
    assert [x.role for x in found.considered] == ["preemptor", "preemptor"]
    assert found.considered[0].rule.startswith("yield: ")
    assert found.considered[1].rule == (
        "skipped-yielding: the victims of its previous round are still leaving"
    )


def job_phase(phase: str, at: float, offset: int) -> Recorded:
    job = {
        "kind": "Job",
        "metadata": {"name": "sweep-0", "namespace": "research"},
        "status": {"state": {"phase": phase}},
    }
    event = KubeEvent(
        type=KubeEventType.MODIFIED,
        kind=KubeKind.JOB,
        namespace="research",
        name="sweep-0",
        object=job,
        observed_at=at,
    )
    return recorded("gpuyield.kube-events", at, encode(event), offset)


def test_an_ack_whose_command_is_not_on_the_record_is_still_a_yield() -> None:
    """A simulated run's log (``gpuyield simulate --archive``) records acks, no commands."""
    ack = YieldAck(
        command_id="sim-1",
        node="node-003",
        job=VICTIM,
        outcome=YieldOutcome.CHECKPOINTED,
        checkpoint_step=4372,
        seconds_taken=60.0,
        acked_at=NOW + 60,
    )
    record = [
        submitted_job(),
        job_phase("Running", NOW - 600, 1),
        recorded("gpuyield.yield-acks", ack.acked_at, encode(ack)),
        job_phase("Aborted", NOW + 60, 2),
    ]
    found = history(VICTIM, record)
    assert found is not None
    [y] = found.yields
    assert (y.node, y.outcome, y.checkpoint_step) == ("node-003", "checkpointed", 4372)
    assert y.issued_at == NOW  # when the yield began: the ack's time less its seconds
    assert y.command_recorded is False
    assert found.suspended_at == (NOW + 60,)  # the Volcano Job's Aborted phase says so


def test_a_job_whose_progress_is_on_the_record_in_a_batch_has_a_history() -> None:
    summaries = tuple(
        JobProgress(job=job, step=900, progress=0.3, first_seen_at=T0, updated_at=NOW)
        for job in ("research/sweep-7", VICTIM)
    )
    record = [recorded("gpuyield.job-progress", NOW, encode(JobProgressBatch(summaries=summaries)))]
    assert history(VICTIM, record) is not None
    assert history("research/sweep-8", record) is None
