"""``gpuyield replay`` on an archive: exit statuses, the readable diff, --json, what-ifs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from test_replay import a_yield_and_its_aftermath
from typer.testing import CliRunner

from gpuyield.agents.controller.replay import RunRecord
from gpuyield.cli import app
from gpuyield.streams.archive import Archive, ArchivedMessage
from gpuyield.streams.topics import DECIDER_JOURNAL, DECISIONS, YIELD_COMMANDS

WIDE = CliRunner(env={"COLUMNS": "200"})


def archived(tmp_path: Path, record: RunRecord) -> str:
    """``record`` as ``gpuyield archive`` lays it out."""
    archive = Archive(str(tmp_path / "archive"))
    topics: dict[tuple[str, int], list[ArchivedMessage]] = {}

    def put(topic: str, partition: int, offset: int, value: bytes | None) -> None:
        message = ArchivedMessage(topic, partition, offset, None, None, value)
        topics.setdefault((topic, partition), []).append(message)

    for offset, value in record.journal:
        put(DECIDER_JOURNAL, 0, offset, value)
    for (topic, partition, offset), value in record.inputs.items():
        put(topic, partition, offset, value)
    for offset, value in enumerate(record.decisions):
        put(DECISIONS, 0, offset, value)
    for offset, value in enumerate(record.commands):
        put(YIELD_COMMANDS, 0, offset, value)
    for messages in topics.values():
        archive.write(messages)
    return archive.url


def test_replaying_a_recorded_run_finds_it_identical_and_exits_0(tmp_path: Path) -> None:
    url = archived(tmp_path, a_yield_and_its_aftermath().record())
    result = WIDE.invoke(app, ["replay", "--archive", url])
    assert result.exit_code == 0, result.output
    assert "5 identical: identical to the record" in result.stdout
    assert "in the journal's order" in result.stdout


def test_a_difference_exits_1_with_the_field_that_differs(tmp_path: Path) -> None:
    record = a_yield_and_its_aftermath().record()
    first = json.loads(record.decisions[0] or b"")
    first["plan"]["victims"][0]["reason"] = "someone else's reason"
    changed = dataclasses.replace(
        record, decisions=[json.dumps(first).encode(), *record.decisions[1:]]
    )
    result = WIDE.invoke(app, ["replay", "--archive", archived(tmp_path, changed)])
    assert result.exit_code == 1, result.output
    assert 'plan.victims[0].reason: "someone else\'s reason" -> ' in result.stdout
    assert "1 differences" in result.stdout


def test_json_gives_every_item_and_the_count_of_differences(tmp_path: Path) -> None:
    url = archived(tmp_path, a_yield_and_its_aftermath().record())
    result = CliRunner().invoke(app, ["replay", "--archive", url, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["differences"] == 0
    assert [i["outcome"] for i in doc["items"] if i["kind"] == "decision"] == [
        "yield",
        "skipped-yielding",
        "skipped-held",
    ]


def test_a_log_of_inputs_only_is_derived_and_says_so_for_each_decision(tmp_path: Path) -> None:
    record = a_yield_and_its_aftermath().record()
    inputs_only = dataclasses.replace(record, journal=[], decisions=[], commands=[])
    result = WIDE.invoke(app, ["replay", "--archive", archived(tmp_path, inputs_only), "--all"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("derived (nothing recorded)") == 5
    assert "no journal: by their own times" in result.stdout


def test_a_what_if_reports_the_spared_eviction_says_it_is_open_loop_and_exits_0(
    tmp_path: Path,
) -> None:
    c = a_yield_and_its_aftermath()
    url = archived(tmp_path, c.record())
    result = WIDE.invoke(app, ["replay", "--archive", url, "--set", "cooldown_s=25200"])
    assert result.exit_code == 0, result.output
    assert "what-if (cooldown_s=25200) against the record" in result.stdout
    assert "open loop" in result.stdout
    assert "gpuyield simulate --from-archive DIR" in result.stdout
    victim = c.decisions[0].plan.victims[0]
    assert "evictions that would not have happened" in result.stdout
    assert victim.job in result.stdout
    assert "no evictions that would have happened instead" in result.stdout


def test_a_what_if_from_a_policy_file_gives_json(tmp_path: Path) -> None:
    url = archived(tmp_path, a_yield_and_its_aftermath().record())
    policy = tmp_path / "policy.yaml"
    policy.write_text("cooldown_s: 25200\nalpha: 150\n")
    result = CliRunner().invoke(
        app, ["replay", "--archive", url, "--policy", str(policy), "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["settings"] == {"cooldown_s": 25200, "alpha": 150}
    assert len(doc["spared"]) == 1
    assert doc["instead"] == []


def test_an_unknown_setting_is_one_line_and_status_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--archive", "x", "--set", "coldown_s=1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("gpuyield: unknown setting coldown_s (the decider's settings:")


def test_a_setting_out_of_range_is_named(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--archive", "x", "--set", "grace_s=-5"])
    assert result.exit_code == 2
    assert "grace_s" in result.stderr


def test_an_empty_archive_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--archive", str(tmp_path / "nothing")])
    assert result.exit_code == 2
    assert "nothing to replay" in result.stderr


def test_a_record_that_begins_mid_history_is_bad_input(tmp_path: Path) -> None:
    record = a_yield_and_its_aftermath().record()
    cut = dataclasses.replace(record, journal=record.journal[5:])
    result = CliRunner().invoke(app, ["replay", "--archive", archived(tmp_path, cut)])
    assert result.exit_code == 2
    assert "the journal begins mid-history" in result.stderr
