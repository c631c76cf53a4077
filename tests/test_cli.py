"""The ``gpuyield`` command line: plan JSON out, one clear line on bad input, schemas.

Contract: ``shared/spec/plan-contract.md`` (first section: ``gpuyield plan
SNAPSHOT.json [--preemptor JOB]`` prints the plan on stdout; bad input is one
line on stderr naming the field, exit status 2, and no plan). Most tests use
typer's CliRunner (which captures stdout and stderr apart); a few run the real
console script and ``python -m gpuyield`` in a subprocess, as a user would.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from gpuyield.cli import app
from gpuyield.schemas import Plan

NOW = 1_764_000_000.0
Doc = dict[str, Any]


def valid_snapshot() -> Doc:
    """Raw JSON, as a user writes it: 'infer' needs n2 (free) and n1 (held by 'train')."""
    return {
        "version": 1,
        "now": NOW,
        "policy": {"grace_s": 60},
        "nodes": [
            {"name": "n1", "gpus": 8, "topology": {"rack": "r1"}},
            {"name": "n2", "gpus": 8},
            {"name": "n3", "gpus": 8, "schedulable": False},
        ],
        "queues": [{"name": "prod", "weight": 80, "guarantee": {"gpu": 16}}],
        "jobs": [
            {
                "name": "train",
                "queue": "prod",
                "priority": 100,
                "state": "Running",
                "pods": [{"name": "train-0", "gpus": 8, "node": "n1", "phase": "Running"}],
                "submitted_at": NOW - 7200,
                "started_at": NOW - 3600,
                "progress": 0.25,
                "last_checkpoint_at": NOW - 60,
                "evictions": [],
            },
            {
                "name": "pinned",
                "queue": "prod",
                "priority": 100,
                "preemptable": False,
                "state": "Running",
                "pods": [{"name": "pinned-0", "gpus": 8, "node": "n3", "phase": "Running"}],
                "started_at": NOW - 3600,
            },
            {
                "name": "infer",
                "queue": "prod",
                "priority": 1000,
                "state": "Pending",
                "pods": [
                    {"name": "infer-0", "gpus": 8, "node": None, "phase": "Pending"},
                    {"name": "infer-1", "gpus": 8, "node": None, "phase": "Pending"},
                ],
                "submitted_at": NOW - 10,
            },
        ],
    }


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def write(tmp_path: Path, doc: Doc | str, name: str = "snapshot.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def plan_json(result: Result) -> Doc:
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc: Doc = json.loads(result.stdout)
    return doc


# --------------------------------------------------------------------------- plan


def test_plan_prints_the_plan_as_json_on_stdout(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot()))])
    doc = plan_json(result)
    assert doc["version"] == 1
    assert doc["preemptor"] == "infer"
    assert doc["action"] == "preempt"
    assert doc["feasible"] is True
    assert [v["job"] for v in doc["victims"]] == ["train"]
    assert doc["victims"][0]["pods"] == ["train-0"]
    assert doc["victims"][0]["grace_s"] == 60
    assert doc["victims"][0]["lost_gpu_seconds"] == 8 * 60
    assert doc["lost_gpu_seconds"] == 8 * 60
    assert doc["placement"] == {"infer-0": "n1", "infer-1": "n2"}
    assert doc["explanation"]


def test_the_printed_plan_is_a_valid_plan_document(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot()))])
    assert Plan.model_validate_json(result.stdout).preemptor == "infer"


def test_plan_output_is_byte_identical_across_runs(runner: CliRunner, tmp_path: Path) -> None:
    path = str(write(tmp_path, valid_snapshot()))
    first = runner.invoke(app, ["plan", path])
    second = runner.invoke(app, ["plan", path])
    assert first.exit_code == second.exit_code == 0
    assert first.stdout_bytes == second.stdout_bytes


def test_plan_dash_reads_the_snapshot_from_stdin(runner: CliRunner, tmp_path: Path) -> None:
    from_file = runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot()))])
    from_stdin = runner.invoke(app, ["plan", "-"], input=json.dumps(valid_snapshot()))
    assert plan_json(from_stdin)["preemptor"] == "infer"
    assert from_stdin.stdout == from_file.stdout


def test_preemptor_option_plans_for_the_named_job(runner: CliRunner, tmp_path: Path) -> None:
    doc = valid_snapshot()
    doc["jobs"].append(
        {
            "name": "small",
            "queue": "prod",
            "priority": 1,
            "state": "Pending",
            "pods": [{"name": "small-0", "gpus": 8, "node": None, "phase": "Pending"}],
        }
    )
    path = str(write(tmp_path, doc))
    assert plan_json(runner.invoke(app, ["plan", path]))["preemptor"] == "infer"
    named = plan_json(runner.invoke(app, ["plan", path, "--preemptor", "small"]))
    assert named["preemptor"] == "small"
    assert named["victims"] == []
    assert named["placement"] == {"small-0": "n2"}


def test_unknown_fields_are_ignored(runner: CliRunner, tmp_path: Path) -> None:
    doc = valid_snapshot()
    doc["cluster"] = "eu-west"
    doc["nodes"][0]["vendor"] = "nvidia"
    doc["jobs"][0]["pods"][0]["labels"] = {"team": "llm"}
    baseline = runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot(), "a.json"))])
    extended = runner.invoke(app, ["plan", str(write(tmp_path, doc, "b.json"))])
    assert plan_json(extended) == plan_json(baseline)


def test_the_plan_json_leaves_out_the_candidate_table(runner: CliRunner, tmp_path: Path) -> None:
    doc = plan_json(runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot()))]))
    assert "candidates" not in doc


# --------------------------------------------------------------------------- --explain


def table_rows(text: str) -> dict[str, list[str]]:
    """Rows of the rich table keyed by their first cell (the job), first line only."""
    rows: dict[str, list[str]] = {}
    for line in text.replace("┃", "│").splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0] and cells[0] not in rows:
            rows[cells[0]] = cells
    return rows


def test_explain_prints_a_table_naming_each_candidate_and_its_outcome(
    runner: CliRunner, tmp_path: Path
) -> None:
    doc = valid_snapshot()
    # A third candidate that may be taken but is not needed: 'spare' on n2.
    doc["nodes"].append({"name": "n4", "gpus": 8})
    doc["jobs"].append(
        {
            "name": "spare",
            "queue": "prod",
            "priority": 100,
            "state": "Running",
            "pods": [{"name": "spare-0", "gpus": 8, "node": "n2", "phase": "Running"}],
            "started_at": NOW - 3600,
        }
    )
    result = runner.invoke(app, ["plan", str(write(tmp_path, doc)), "--explain"])
    assert result.exit_code == 0, result.stderr
    rows = table_rows(result.stdout)
    header = rows.pop("job")
    outcome = header.index("outcome")
    assert {job: cells[outcome].split()[0] for job, cells in rows.items()} == {
        "train": "victim",
        "spare": "spared",
        "pinned": "ineligible",
    }


def test_explain_gives_the_reason_a_candidate_is_ineligible(
    runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot())), "--explain"])
    assert "preemptable: false" in result.stdout
    assert "infer" in result.stdout  # the preemptor it plans for


def test_explain_prints_a_table_not_json(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot())), "--explain"])
    assert result.exit_code == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


# --------------------------------------------------------------------------- bad input


def edit(change: Callable[[Doc], object]) -> str:
    doc = copy.deepcopy(valid_snapshot())
    change(doc)
    return json.dumps(doc)


def set_in(path: tuple[str | int, ...], value: object) -> Callable[[Doc], object]:
    def change(doc: Doc) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def drop(path: tuple[str | int, ...]) -> Callable[[Doc], object]:
    def change(doc: Doc) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return change


BAD_DOCUMENTS = {
    "empty file": ("", "empty"),
    "only whitespace": ("  \n\t\n", "empty"),
    "not JSON": ("{'version': 1,", "not valid JSON"),
    "a JSON array": ("[]", "expected a JSON object"),
    "a JSON string": ('"snapshot"', "expected a JSON object"),
    "negative node GPUs": (edit(set_in(("nodes", 0, "gpus"), -1)), "nodes[0].gpus"),
    "negative pod GPUs": (edit(set_in(("jobs", 0, "pods", 0, "gpus"), -8)), "jobs[0].pods[0].gpus"),
    "fractional GPUs": (edit(set_in(("nodes", 1, "gpus"), 7.5)), "nodes[1].gpus"),
    "unknown queue": (
        edit(set_in(("jobs", 2, "queue"), "research")),
        "jobs[2].queue: unknown queue 'research'",
    ),
    "unknown node": (
        edit(set_in(("jobs", 0, "pods", 0, "node"), "n9")),
        "jobs[0].pods[0].node: unknown node 'n9'",
    ),
    "duplicate pod name": (
        edit(set_in(("jobs", 2, "pods", 1, "name"), "train-0")),
        "jobs[2].pods[1].name: duplicate pod name 'train-0'",
    ),
    "duplicate job name": (
        edit(set_in(("jobs", 1, "name"), "train")),
        "jobs[1].name: duplicate job name 'train'",
    ),
    "unknown parent queue": (
        edit(set_in(("queues", 0, "parent"), "org")),
        "queues[0].parent: unknown queue 'org'",
    ),
    "pods over a node's GPUs": (
        edit(set_in(("jobs", 0, "pods", 0, "gpus"), 9)),
        "nodes[0].gpus",
    ),
    "duplicate node name": (
        edit(set_in(("nodes", 1, "name"), "n1")),
        "nodes[1].name: duplicate node name 'n1'",
    ),
    "capability below guarantee": (
        edit(set_in(("queues", 0, "capability"), {"gpu": 8})),
        "queues[0].capability.gpu",
    ),
    "queue cycle": (
        edit(set_in(("queues", 0, "parent"), "prod")),
        "queues[0].parent",
    ),
    "NaN time": (edit(set_in(("now",), float("nan"))), "now"),
    "unsupported version": (edit(set_in(("version",), 2)), "version"),
    "missing version": (edit(drop(("version",))), "version"),
    "missing required field": (edit(drop(("jobs", 1, "state"))), "jobs[1].state"),
    "missing nodes": (edit(drop(("nodes",))), "nodes"),
    "wrong type": (edit(set_in(("now",), "yesterday")), "now"),
    "unknown state": (edit(set_in(("jobs", 0, "state"), "Sleeping")), "jobs[0].state"),
    "progress above 1": (edit(set_in(("jobs", 0, "progress"), 1.5)), "jobs[0].progress"),
    "min_available above pods": (
        edit(set_in(("jobs", 0, "min_available"), 2)),
        "jobs[0].min_available",
    ),
}


def assert_one_clear_line(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.endswith("\n")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert isinstance(result.exception, SystemExit)
    for fragment in fragments:
        assert fragment in result.stderr


@pytest.mark.parametrize(("text", "names"), BAD_DOCUMENTS.values(), ids=BAD_DOCUMENTS.keys())
def test_bad_input_file_is_one_line_on_stderr_naming_the_problem_and_exit_2(
    runner: CliRunner, tmp_path: Path, text: str, names: str
) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, text))])
    assert_one_clear_line(result, names)


@pytest.mark.parametrize(("text", "names"), BAD_DOCUMENTS.values(), ids=BAD_DOCUMENTS.keys())
def test_bad_input_on_stdin_is_one_line_on_stderr_and_exit_2(
    runner: CliRunner, text: str, names: str
) -> None:
    assert_one_clear_line(runner.invoke(app, ["plan", "-"], input=text), names)


def test_a_missing_file_is_one_line_naming_the_file(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    result = runner.invoke(app, ["plan", str(missing)])
    assert_one_clear_line(result, str(missing), "no such file")


def test_a_directory_instead_of_a_file_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    assert_one_clear_line(runner.invoke(app, ["plan", str(tmp_path)]), str(tmp_path))


def test_an_unknown_preemptor_is_one_line_naming_it(runner: CliRunner, tmp_path: Path) -> None:
    path = str(write(tmp_path, valid_snapshot()))
    result = runner.invoke(app, ["plan", path, "--preemptor", "ghost"])
    assert_one_clear_line(result, "preemptor", "ghost")


def test_only_the_first_of_several_problems_is_printed_with_a_count(
    runner: CliRunner, tmp_path: Path
) -> None:
    doc = valid_snapshot()
    doc["nodes"][0]["gpus"] = -1
    doc["nodes"][1]["gpus"] = -2
    result = runner.invoke(app, ["plan", str(write(tmp_path, doc))])
    assert_one_clear_line(result, "nodes[0].gpus", "1 more")


# --------------------------------------------------------------------------- schemas


ANNOTATIONS = {"title", "description", "default", "$defs"}
VALIDATED = {
    "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum",
    "const", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "$ref",
    "minItems", "maxItems",
}  # fmt: skip
JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def keywords(schema: Any) -> set[str]:
    """Every keyword used anywhere in ``schema`` (names under properties/$defs excluded)."""
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    for key, value in schema.items():
        if key in ("properties", "$defs"):
            for sub in value.values():
                found |= keywords(sub)
        elif key in ("items", "additionalProperties"):
            found |= keywords(value)
        elif key == "anyOf":
            for sub in value:
                found |= keywords(sub)
    return found


def refs(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        own = {schema["$ref"]} if "$ref" in schema else set()
        return own.union(*(refs(v) for k, v in schema.items() if k != "default"))
    if isinstance(schema, list):
        return set().union(*(refs(v) for v in schema))
    return set()


def errors(schema: Any, doc: Any, root: Doc, path: str = "$") -> list[str]:
    """A small validator for the keywords pydantic emits (checked by ``keywords`` above)."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return errors(root["$defs"][name], doc, root, path)
    if "anyOf" in schema:
        if all(errors(sub, doc, root, path) for sub in schema["anyOf"]):
            return [f"{path}: matches no alternative"]
        return []
    out: list[str] = []
    kind = schema.get("type")
    is_number = isinstance(doc, int | float) and not isinstance(doc, bool)
    type_ok = {
        None: True,
        "object": isinstance(doc, dict),
        "array": isinstance(doc, list),
        "string": isinstance(doc, str),
        "number": is_number,
        "integer": is_number and float(doc).is_integer(),
        "boolean": isinstance(doc, bool),
        "null": doc is None,
    }[kind]
    if not type_ok:
        return [f"{path}: not of type {kind}"]
    if "const" in schema and doc != schema["const"]:
        out.append(f"{path}: not {schema['const']!r}")
    if "enum" in schema and doc not in schema["enum"]:
        out.append(f"{path}: not one of {schema['enum']}")
    if "minimum" in schema and doc < schema["minimum"]:
        out.append(f"{path}: below {schema['minimum']}")
    if "exclusiveMinimum" in schema and doc <= schema["exclusiveMinimum"]:
        out.append(f"{path}: not above {schema['exclusiveMinimum']}")
    if "maximum" in schema and doc > schema["maximum"]:
        out.append(f"{path}: above {schema['maximum']}")
    if "minLength" in schema and len(doc) < schema["minLength"]:
        out.append(f"{path}: too short")
    if "maxLength" in schema and len(doc) > schema["maxLength"]:
        out.append(f"{path}: too long")
    if "minItems" in schema and len(doc) < schema["minItems"]:
        out.append(f"{path}: too few items")
    if "maxItems" in schema and len(doc) > schema["maxItems"]:
        out.append(f"{path}: too many items")
    if isinstance(doc, dict):
        out += [f"{path}.{k}: required" for k in schema.get("required", ()) if k not in doc]
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in doc.items():
            if key in props:
                out += errors(props[key], value, root, f"{path}.{key}")
            elif isinstance(extra, dict):
                out += errors(extra, value, root, f"{path}.{key}")
    if isinstance(doc, list) and "items" in schema:
        for i, item in enumerate(doc):
            out += errors(schema["items"], item, root, f"{path}[{i}]")
    return out


@pytest.fixture
def schemas(runner: CliRunner, tmp_path: Path) -> dict[str, Doc]:
    out = tmp_path / "schemas"
    result = runner.invoke(app, ["schemas", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    written = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in out.iterdir()}
    assert sorted(result.stdout.split()) == sorted(str(out / name) for name in written)
    return written


EVERY_SCHEMA = [
    "snapshot.v1.schema.json",
    "plan.v1.schema.json",
    "kube-event.v1.schema.json",
    "heartbeat.v1.schema.json",
    "job-progress.v1.schema.json",
    "job-progress-batch.v1.schema.json",
    "tick.v1.schema.json",
    "decision.v1.schema.json",
    "yield-command.v1.schema.json",
    "yield-ack.v1.schema.json",
    "alert.v1.schema.json",
    "dead-letter.v1.schema.json",
]


def test_schemas_writes_the_schema_of_every_document_and_topic(schemas: dict[str, Doc]) -> None:
    assert set(schemas) == set(EVERY_SCHEMA)


@pytest.mark.parametrize("name", EVERY_SCHEMA)
def test_each_schema_is_a_well_formed_json_schema(schemas: dict[str, Doc], name: str) -> None:
    schema = schemas[name]
    assert schema["type"] == "object"
    assert set(schema["required"]) <= set(schema["properties"])
    assert keywords(schema) <= ANNOTATIONS | VALIDATED  # nothing the checks below ignore
    for ref in refs(schema):
        assert ref.startswith("#/$defs/")
        assert ref.removeprefix("#/$defs/") in schema["$defs"]
    for sub in [schema, *schema.get("$defs", {}).values()]:
        if "type" in sub:
            assert sub["type"] in JSON_TYPES
        for prop in sub.get("properties", {}).values():
            assert prop.get("type", "object") in JSON_TYPES


def test_the_snapshot_schema_requires_what_the_contract_requires(schemas: dict[str, Doc]) -> None:
    snapshot = schemas["snapshot.v1.schema.json"]
    assert set(snapshot["required"]) == {"version", "now", "nodes", "queues", "jobs"}
    assert snapshot["properties"]["version"]["const"] == 1


def test_the_progress_batch_schema_accepts_a_batch_and_refuses_an_empty_one(
    schemas: dict[str, Doc],
) -> None:
    schema = schemas["job-progress-batch.v1.schema.json"]
    one = {
        "job": "research/a",
        "step": 10,
        "progress": 0.5,
        "first_seen_at": 1.0,
        "updated_at": 2.0,
    }
    assert errors(schema, {"v": 1, "summaries": [one]}, schema) == []
    assert errors(schema, {"v": 1, "summaries": []}, schema) == ["$.summaries: too few items"]


def test_the_snapshot_schema_accepts_a_valid_snapshot(schemas: dict[str, Doc]) -> None:
    schema = schemas["snapshot.v1.schema.json"]
    assert errors(schema, valid_snapshot(), schema) == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (set_in(("nodes", 0, "gpus"), -1), "$.nodes[0].gpus"),
        (set_in(("version",), 2), "$.version"),
        (set_in(("jobs", 0, "state"), "Sleeping"), "$.jobs[0].state"),
        (set_in(("jobs", 0, "progress"), 1.5), "$.jobs[0].progress"),
        (set_in(("now",), "yesterday"), "$.now"),
        (drop(("jobs",)), "$.jobs"),
        (drop(("jobs", 0, "pods", 0, "gpus")), "$.jobs[0].pods[0].gpus"),
    ],
    ids=["negative GPUs", "version", "state", "progress", "now", "no jobs", "no pod GPUs"],
)
def test_the_snapshot_schema_rejects_an_invalid_snapshot(
    schemas: dict[str, Doc], change: Callable[[Doc], object], where: str
) -> None:
    schema = schemas["snapshot.v1.schema.json"]
    doc = valid_snapshot()
    change(doc)
    found = errors(schema, doc, schema)
    assert found
    assert all(e.startswith(where) for e in found), found


def test_the_plan_schema_accepts_the_plan_the_cli_prints(
    runner: CliRunner, tmp_path: Path, schemas: dict[str, Doc]
) -> None:
    schema = schemas["plan.v1.schema.json"]
    doc = plan_json(runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot()))]))
    assert doc["victims"]  # a plan with every part filled in
    assert errors(schema, doc, schema) == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (set_in(("action",), "evict"), "$.action"),
        (set_in(("feasible",), "yes"), "$.feasible"),
        (drop(("victims", 0, "job")), "$.victims[0].job"),
        (set_in(("placement",), {"infer-0": 7}), "$.placement.infer-0"),
    ],
    ids=["action", "feasible", "victim job", "placement"],
)
def test_the_plan_schema_rejects_an_invalid_plan(
    runner: CliRunner,
    tmp_path: Path,
    schemas: dict[str, Doc],
    change: Callable[[Doc], object],
    where: str,
) -> None:
    schema = schemas["plan.v1.schema.json"]
    doc = plan_json(runner.invoke(app, ["plan", str(write(tmp_path, valid_snapshot()))]))
    change(doc)
    found = errors(schema, doc, schema)
    assert found
    assert all(e.startswith(where) for e in found), found


def test_schemas_output_is_byte_identical_across_runs(runner: CliRunner, tmp_path: Path) -> None:
    for out in ("a", "b"):
        assert runner.invoke(app, ["schemas", "--out", str(tmp_path / out)]).exit_code == 0
    for name in ("snapshot.v1.schema.json", "plan.v1.schema.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


# --------------------------------------------------------------------------- real processes


CONSOLE_SCRIPT = Path(sys.executable).parent / "gpuyield"


def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )


@pytest.mark.skipif(not CONSOLE_SCRIPT.exists(), reason="gpuyield console script not installed")
def test_the_installed_gpuyield_command_prints_the_plan(runner: CliRunner, tmp_path: Path) -> None:
    path = str(write(tmp_path, valid_snapshot()))
    done = run([str(CONSOLE_SCRIPT), "plan", path])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout == runner.invoke(app, ["plan", path]).stdout


def test_python_dash_m_gpuyield_reads_stdin(tmp_path: Path) -> None:
    done = run([sys.executable, "-m", "gpuyield", "plan", "-"], stdin=json.dumps(valid_snapshot()))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["placement"] == {"infer-0": "n1", "infer-1": "n2"}


def test_a_real_process_reports_bad_input_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, edit(set_in(("jobs", 0, "pods", 0, "node"), "n9")))
    done = run([sys.executable, "-m", "gpuyield", "plan", str(path)])
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["gpuyield: jobs[0].pods[0].node: unknown node 'n9'"]


@pytest.mark.parametrize(
    "argv",
    [["plan"], ["plan", "--budget", "0", "x.json"], ["bogus"], ["plan", "--nope", "x.json"]],
    ids=["missing-snapshot", "bad-budget", "unknown-command", "unknown-option"],
)
def test_a_usage_error_is_one_line_with_status_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuyield.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("gpuyield: ")
