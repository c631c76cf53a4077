"""A decision record's bytes, its snapshot joined from the JSON its nodes and jobs were given.

A decision record carries the planner's whole snapshot: 14 MB of JSON at
10,000 nodes, encoded again for every decision the worker sends (92 ms
there). The decider builds each snapshot from the last one's ``Node`` and
``Job`` models wherever nothing they are built from changed
(``agents.controller.snapshot_parts``), so between two decisions all but a
few hundred of 40,000 models are the very same objects. ``KeptJson`` keeps
each model's JSON while the model lives and encodes only the new ones: the
snapshot's bytes are then a join (23 ms at 10,000 nodes). The bytes are
exactly ``encode(decision)``'s, which the tests hold it to: each model's
part is its own serializer's output, as pydantic writes it inside the
whole.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import SchemaSerializer

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Decision
from gpuyield.schemas.snapshot import Job, Node, Snapshot

M = TypeVar("M", bound=BaseModel)


class _Kept(weakref.ref[BaseModel]):
    """A model's JSON, kept by a weak reference to the model that leaves with it."""

    __slots__ = ("data", "key")

    key: int
    data: bytes


class KeptJson:
    """The JSON of frozen models, kept per object while the object lives.

    Entries are keyed by identity, not equality (hashing a job walks all of
    it), and leave with their model, so the kept bytes never outgrow the
    models someone still holds: the decider's last snapshot, 20.7 MiB
    with its entries at 10,000 nodes. An entry is its weak reference, with
    one callback for all: a closure per entry made the cyclic collector walk
    the whole snapshot again and again while 40,000 of them were made.
    """

    def __init__(self) -> None:
        self._kept: dict[int, _Kept] = {}
        kept = self._kept

        def gone(ref: weakref.ref[BaseModel]) -> None:
            assert isinstance(ref, _Kept)
            # Its model is gone, before its id can be another object's.
            if kept.get(ref.key) is ref:
                del kept[ref.key]

        self._gone = gone

    def __len__(self) -> int:
        return len(self._kept)

    def of_all(self, models: Sequence[M], serializer: SchemaSerializer) -> list[bytes]:
        """Each model's JSON, in order: the kept bytes, the rest encoded now and kept."""
        out: list[bytes] = []
        kept, gone, to_json = self._kept, self._gone, serializer.to_json
        for model in models:
            entry = kept.get(id(model))
            if entry is not None and entry() is model:
                out.append(entry.data)
                continue
            data = to_json(model)
            ref = _Kept(model, gone)
            ref.key, ref.data = id(model), data
            kept[ref.key] = ref
            out.append(data)
        return out


def snapshot_json(snapshot: Snapshot, kept: KeptJson) -> bytes:
    """``snapshot.model_dump_json()`` as bytes, its nodes' and jobs' JSON taken from ``kept``."""
    return _spliced(
        snapshot,
        {
            "nodes": lambda nodes: _array(kept.of_all(nodes, Node.__pydantic_serializer__)),
            "jobs": lambda jobs: _array(kept.of_all(jobs, Job.__pydantic_serializer__)),
        },
    )


def encode_decision(decision: Decision, kept: KeptJson) -> bytes:
    """``encode(decision)``, its snapshot joined from the JSON ``kept`` has of its models."""
    if decision.snapshot is None:
        return encode(decision)
    return _spliced(decision, {"snapshot": lambda snapshot: snapshot_json(snapshot, kept)})


def _array(items: list[bytes]) -> bytes:
    return b"[" + b",".join(items) + b"]"


def _spliced(model: BaseModel, written: Mapping[str, Callable[[Any], bytes]]) -> bytes:
    """``model.model_dump_json()`` as bytes, the fields in ``written`` written by their function.

    The other fields are dumped by pydantic, each run of them between two
    written ones in one call, so the object's fields keep the model's order.
    """
    pieces: list[bytes] = []
    run: set[str] = set()
    for name in type(model).model_fields:
        write = written.get(name)
        if write is None:
            run.add(name)
            continue
        if run:
            pieces.append(model.model_dump_json(include=run).encode()[1:-1])
            run = set()
        pieces.append(b'"' + name.encode() + b'":' + write(getattr(model, name)))
    if run:
        pieces.append(model.model_dump_json(include=run).encode()[1:-1])
    return b"{" + b",".join(pieces) + b"}"
