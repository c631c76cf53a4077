"""Reading a topic's bytes: a message, or one line that says why not."""

from __future__ import annotations

import json

import pytest

from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import Heartbeat, KubeEvent, KubeEventType, KubeKind

HEARTBEAT = {
    "v": 1,
    "job": "research/sweep-17",
    "pod": "sweep-17-worker-0",
    "step": 1200,
    "progress": 0.4,
    "last_checkpoint_step": 1000,
    "last_checkpoint_at": 1_764_460_800.0,
    "sent_at": 1_764_461_000.0,
}


def reason(model: type[Heartbeat], raw: bytes | None) -> str:
    with pytest.raises(MessageError) as caught:
        decode(model, raw)
    return str(caught.value)


def test_a_valid_heartbeat_round_trips_byte_for_byte() -> None:
    beat = decode(Heartbeat, json.dumps(HEARTBEAT).encode())
    assert decode(Heartbeat, encode(beat)) == beat
    assert encode(decode(Heartbeat, encode(beat))) == encode(beat)


def test_a_message_without_a_version_is_read_as_version_1() -> None:
    doc = {k: v for k, v in HEARTBEAT.items() if k != "v"}
    assert decode(Heartbeat, json.dumps(doc).encode()).v == 1


def test_bytes_that_are_not_json_are_named_as_such() -> None:
    assert reason(Heartbeat, b"\x00\xffgarbage").startswith("not JSON")


def test_json_that_is_not_an_object_is_named_as_such() -> None:
    assert reason(Heartbeat, b"[1, 2]") == "not a JSON object (got list)"


def test_an_unknown_version_is_refused_not_guessed() -> None:
    doc = {**HEARTBEAT, "v": 2}
    assert reason(Heartbeat, json.dumps(doc).encode()) == (
        "unknown format version 2 for Heartbeat (this reader knows 1)"
    )


def test_a_field_violation_names_the_field() -> None:
    doc = {**HEARTBEAT, "progress": 1.5}
    assert reason(Heartbeat, json.dumps(doc).encode()).startswith("Heartbeat: progress:")


def test_a_missing_field_names_the_field() -> None:
    doc = {k: v for k, v in HEARTBEAT.items() if k != "step"}
    assert reason(Heartbeat, json.dumps(doc).encode()) == (
        "Heartbeat: step: required field is missing"
    )


def test_a_null_value_is_refused() -> None:
    assert "empty message" in reason(Heartbeat, None)


def test_unknown_fields_from_a_newer_writer_are_ignored() -> None:
    doc = {**HEARTBEAT, "gpu_temperature_c": 71}
    assert decode(Heartbeat, json.dumps(doc).encode()).step == 1200


def test_a_kube_event_is_keyed_by_kind_namespace_and_name() -> None:
    event = KubeEvent(
        type=KubeEventType.ADDED,
        kind=KubeKind.POD,
        namespace="research",
        name="sweep-17-worker-0",
        object={},
        observed_at=0.0,
    )
    cluster_scoped = event.model_copy(update={"kind": KubeKind.NODE, "namespace": None})
    assert event.key == "Pod/research/sweep-17-worker-0"
    assert cluster_scoped.key == "Node/sweep-17-worker-0"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sent_at", 1e308),  # a forged time: would push the decider's clock to infinity
        ("sent_at", 4_200_000_000.0),  # past 2100: a broken clock
        ("sent_at", -1.0),
        ("last_checkpoint_at", 1e300),
        ("step", 10**30),  # past every exact JSON integer
        ("last_checkpoint_step", 2**53),
        ("checkpoint_interval_s", 1e12),
    ],
)
def test_a_number_no_real_trainer_sends_is_refused_with_its_field_named(
    field: str, value: float
) -> None:
    doc = {**HEARTBEAT, field: value}
    assert reason(Heartbeat, json.dumps(doc).encode()).startswith(f"Heartbeat: {field}:")
