"""gpuyield doctor on the command line: a table or JSON lines, exit 0 healthy, 1 findings,
2 unreadable input (one line, no traceback)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "controller"))

from test_doctor import GOOD_CONF, healthy

from gpuyield.cli import app

RUNNER = CliRunner()


def dump(tmp_path: Path, objects: list[dict[str, object]]) -> str:
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def broken() -> list[dict[str, object]]:
    objects = healthy()
    objects[6]["spec"]["policies"] = [{"event": "PodEvicted", "action": "RestartJob"}]  # type: ignore[index]
    return objects


def test_a_healthy_dump_exits_0_and_says_so(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["doctor", dump(tmp_path, healthy())])
    assert result.exit_code == 0, result.output
    assert "nothing wrong" in result.stdout


def test_findings_exit_1_with_a_table_naming_the_check_and_the_fix(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["doctor", dump(tmp_path, broken())])
    assert result.exit_code == 1
    assert "restart-on-eviction" in result.stdout
    assert "research/sweep" in result.stdout


def test_json_gives_one_finding_per_line_with_its_fields(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["doctor", "--json", dump(tmp_path, broken())])
    assert result.exit_code == 1
    (line,) = result.stdout.splitlines()
    assert json.loads(line) == {
        "check": "restart-on-eviction",
        "severity": "critical",
        "object": "Job/research/sweep",
        "message": json.loads(line)["message"],
        "fix": json.loads(line)["fix"],
    }


def test_the_dump_may_come_on_stdin(tmp_path: Path) -> None:
    text = json.dumps({"kind": "List", "items": broken()})
    result = RUNNER.invoke(app, ["doctor", "--json", "-"], input=text)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["check"] == "restart-on-eviction"


def test_a_scheduler_conf_beside_the_dump_is_checked(tmp_path: Path) -> None:
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text(GOOD_CONF.replace("enqueue, allocate", "enqueue, allocate, preempt"))
    objects = healthy()[:-1]
    result = RUNNER.invoke(
        app, ["doctor", "--json", "--scheduler-conf", str(conf), dump(tmp_path, objects)]
    )
    assert result.exit_code == 1
    assert json.loads(result.stdout)["check"] == "volcano-preempt-enabled"


def test_input_that_is_not_json_exits_2_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text("items:\n- kind: Node\n")
    result = RUNNER.invoke(app, ["doctor", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "not JSON" in result.stderr
    assert "-o json" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_file_or_a_document_without_items_exits_2(tmp_path: Path) -> None:
    missing = RUNNER.invoke(app, ["doctor", str(tmp_path / "nope.json")])
    assert (missing.exit_code, missing.stderr) == (
        2,
        f"gpuyield: {tmp_path / 'nope.json'}: no such file\n",
    )
    path = tmp_path / "odd.json"
    path.write_text('{"hello": 1}')
    odd = RUNNER.invoke(app, ["doctor", str(path)])
    assert odd.exit_code == 2
    assert "no items" in odd.stderr
