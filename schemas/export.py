"""JSON Schema export: the contract of every document, for other languages and tools."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from gpuyield.schemas.messages import (
    Alert,
    DeadLetter,
    Decision,
    Heartbeat,
    JobProgress,
    JobProgressBatch,
    KubeEvent,
    Tick,
    YieldAck,
    YieldCommand,
)
from gpuyield.schemas.plan import Plan
from gpuyield.schemas.snapshot import Snapshot

EXPORTED: dict[str, type[BaseModel]] = {
    "snapshot.v1": Snapshot,
    "plan.v1": Plan,
    "kube-event.v1": KubeEvent,
    "heartbeat.v1": Heartbeat,
    "job-progress.v1": JobProgress,
    "job-progress-batch.v1": JobProgressBatch,
    "tick.v1": Tick,
    "decision.v1": Decision,
    "yield-command.v1": YieldCommand,
    "yield-ack.v1": YieldAck,
    "alert.v1": Alert,
    "dead-letter.v1": DeadLetter,
}


def schema_documents() -> dict[str, str]:
    """File name -> JSON Schema text, stable byte for byte."""
    return {
        f"{name}.schema.json": json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        + "\n"
        for name, model in EXPORTED.items()
    }


def write_schemas(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_documents().items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
