"""Exact JSON types: a wrong type is an error naming the field, never a quiet conversion.

One case per kind of field (int, float, bool, str, enum, tuple, dict, nested
model, optional, format version), on the topics' messages through ``decode``
(the reason a dead letter records) and on the planner's snapshot through
``load_snapshot`` (what ``gpuyield plan`` prints).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gpuyield.schemas import InputError, load_snapshot
from gpuyield.schemas.base import WireModel
from gpuyield.schemas.decoding import MessageError, decode
from gpuyield.schemas.messages import (
    Decision,
    Heartbeat,
    Reservation,
    YieldAck,
    YieldCommand,
)

ROOT = Path(__file__).resolve().parents[2]
AT = 1_764_461_000.0
HEARTBEAT = {
    "v": 1,
    "job": "research/sweep-17",
    "pod": "sweep-17-worker-0",
    "step": 1200,
    "total_steps": 5000,
    "progress": 0.24,
    "sent_at": AT,
}
COMMAND = {
    "v": 1,
    "command_id": "c-1",
    "decision_id": "d-1",
    "node": "gpu-07",
    "job": "research/sweep-17",
    "pods": ["sweep-17-worker-0"],
    "whole_job": True,
    "gpus": 8,
    "grace_s": 120,
    "issued_at": AT,
    "deadline": AT + 120,
}
ACK = {
    "command_id": "c-1",
    "node": "gpu-07",
    "job": "research/sweep-17",
    "outcome": "checkpointed",
    "acked_at": AT,
}
RESERVATION = {"job": "prod/ft", "state": "held", "nodes": {"gpu-07": 8}, "until": AT, "at": AT}
EXAMPLE = json.loads((ROOT / "examples" / "half-placed-gang.json").read_text())


def decision(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {
        "decision_id": "d-1",
        "demand": "training/gang-a",
        "decided_at": AT,
        "snapshot": snapshot,
        "plan": {"preemptor": None, "action": "none", "feasible": True},
    }


def with_value(doc: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with the field at ``path`` set to ``value``."""
    copy: Any = json.loads(json.dumps(doc))
    cursor = copy
    for part in path[:-1]:
        cursor = cursor[part]
    cursor[path[-1]] = value
    result: dict[str, Any] = copy
    return result


def reason(model: type[WireModel], doc: dict[str, Any]) -> str:
    with pytest.raises(MessageError) as caught:
        decode(model, json.dumps(doc).encode())
    return str(caught.value)


WRONG_MESSAGE_TYPES = [
    # kind, model, valid document, field, wrong value, the field as named, what is wrong
    ("int as a string", Heartbeat, HEARTBEAT, ("step",), "1200", "step", "valid integer"),
    ("int as a float", Heartbeat, HEARTBEAT, ("step",), 1200.0, "step", "valid integer"),
    ("int as a bool", YieldCommand, COMMAND, ("gpus",), True, "gpus", "valid integer"),
    ("float as a string", Heartbeat, HEARTBEAT, ("progress",), "0.24", "progress", "valid number"),
    ("float as a bool", Heartbeat, HEARTBEAT, ("sent_at",), True, "sent_at", "valid number"),
    ("bool as a number", YieldCommand, COMMAND, ("whole_job",), 1, "whole_job", "valid boolean"),
    (
        "bool as a string",
        YieldCommand,
        COMMAND,
        ("whole_job",),
        "true",
        "whole_job",
        "valid boolean",
    ),
    ("str as a number", YieldCommand, COMMAND, ("node",), 7, "node", "valid string"),
    ("enum by its name", YieldAck, ACK, ("outcome",), "CHECKPOINTED", "outcome", "input should be"),
    (
        "tuple as a string",
        YieldCommand,
        COMMAND,
        ("pods",),
        "sweep-17-worker-0",
        "pods",
        "valid array",
    ),
    ("tuple item as a number", YieldCommand, COMMAND, ("pods",), [0], "pods[0]", "valid string"),
    (
        "dict value as a string",
        Reservation,
        RESERVATION,
        ("nodes", "gpu-07"),
        "8",
        "nodes.gpu-07",
        "valid integer",
    ),
    (
        "optional as a string",
        Heartbeat,
        HEARTBEAT,
        ("total_steps",),
        "5000",
        "total_steps",
        "valid integer",
    ),
    (
        "nested model field",
        Decision,
        decision(EXAMPLE),
        ("snapshot", "nodes", 0, "gpus"),
        "8",
        "snapshot.nodes[0].gpus",
        "valid integer",
    ),
    (
        "nested enum",
        Decision,
        decision(EXAMPLE),
        ("snapshot", "jobs", 0, "state"),
        "pending",
        "snapshot.jobs[0].state",
        "input should be",
    ),
    (
        "nested version as a bool",
        Decision,
        decision(EXAMPLE),
        ("plan", "version"),
        True,
        "plan.version",
        "the number 1",
    ),
]


@pytest.mark.parametrize(
    ("model", "doc", "path", "value", "named", "says"),
    [case[1:] for case in WRONG_MESSAGE_TYPES],
    ids=[case[0] for case in WRONG_MESSAGE_TYPES],
)
def test_a_wrong_json_type_in_a_message_is_an_error_naming_the_field(
    model: type[WireModel],
    doc: dict[str, Any],
    path: tuple[str | int, ...],
    value: Any,
    named: str,
    says: str,
) -> None:
    decode(model, json.dumps(doc).encode())  # the document itself is valid
    got = reason(model, with_value(doc, path, value))
    assert got.startswith(f"{model.__name__}: {named}: input should be"), got
    assert says in got


def test_a_boolean_format_version_is_refused_like_an_unknown_version() -> None:
    assert reason(Heartbeat, {**HEARTBEAT, "v": True}).startswith("unknown format version true")


def test_a_whole_number_is_a_valid_float_as_in_the_contracts_own_example() -> None:
    beat = decode(Heartbeat, json.dumps({**HEARTBEAT, "progress": 0, "sent_at": 1764461000}))
    assert (beat.progress, beat.sent_at) == (0.0, 1764461000.0)
    assert isinstance(beat.sent_at, float)


def test_an_optional_field_accepts_null() -> None:
    assert decode(Heartbeat, json.dumps({**HEARTBEAT, "total_steps": None})).total_steps is None


def test_model_validate_json_is_exact_for_every_wire_model_by_default() -> None:
    with pytest.raises(ValueError, match="valid integer"):
        Heartbeat.model_validate_json(json.dumps({**HEARTBEAT, "step": "1200"}))


WRONG_SNAPSHOT_TYPES = [
    (("version",), True, "version", "unsupported snapshot version true"),
    (("now",), "1764000000", "now", "valid number"),
    (("policy", "max_evictions"), 3.0, "policy.max_evictions", "valid integer"),
    (("policy", "alpha"), True, "policy.alpha", "valid number"),
    (("nodes", 0, "gpus"), "8", "nodes[0].gpus", "valid integer"),
    (("nodes", 0, "schedulable"), 1, "nodes[0].schedulable", "valid boolean"),
    (("nodes", 0, "topology", "rack"), 0, "nodes[0].topology.rack", "valid string"),
    (("queues", 0, "weight"), "1", "queues[0].weight", "valid number"),
    (("queues", 0, "guarantee", "gpu"), "32", "queues[0].guarantee.gpu", "valid integer"),
    (("jobs", 0, "state"), "pending", "jobs[0].state", "input should be"),
    (("jobs", 0, "min_available"), True, "jobs[0].min_available", "valid integer"),
    (("jobs", 0, "pods"), {"name": "gang-a-0"}, "jobs[0].pods", "valid array"),
    (("jobs", 0, "evictions"), ["1763990000"], "jobs[0].evictions[0]", "valid number"),
]


@pytest.mark.parametrize(("path", "value", "named", "says"), WRONG_SNAPSHOT_TYPES, ids=str)
def test_a_wrong_json_type_in_a_snapshot_is_an_error_naming_the_field(
    path: tuple[str | int, ...], value: Any, named: str, says: str
) -> None:
    with pytest.raises(InputError) as caught:
        load_snapshot(json.dumps(with_value(EXAMPLE, path, value)))
    assert str(caught.value).startswith(f"{named}: "), str(caught.value)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    "path",
    [*sorted((ROOT / "examples").glob("*.json")), ROOT / "deploy/planner-dry-run/snapshot.json"],
    ids=lambda p: p.name,
)
def test_the_shipped_snapshots_have_exact_types(path: Path) -> None:
    doc = json.loads(path.read_text())
    if "version" not in doc:
        pytest.skip("not a snapshot")
    load_snapshot(path.read_text(), str(path))


def _versioned_models() -> list[type[WireModel]]:
    found: list[type[WireModel]] = []
    pending: list[type[WireModel]] = [WireModel]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if "v" in sub.model_fields or "version" in sub.model_fields:
                found.append(sub)
    return sorted(found, key=lambda m: m.__name__)


@pytest.mark.parametrize("model", _versioned_models(), ids=lambda m: m.__name__)
def test_no_wire_model_reads_true_as_its_format_version(model: type[WireModel]) -> None:
    field = "v" if "v" in model.model_fields else "version"
    with pytest.raises(ValidationError) as caught:
        model.model_validate_json(json.dumps({field: True}))
    assert any(e["loc"] == (field,) for e in caught.value.errors()), caught.value
