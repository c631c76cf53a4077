"""Every kind of record in the decider's table survives the table: model -> JSON -> model.

The table stores JSON and a step reads it back through the record's model, so
a field a model did not declare, or one its JSON form cannot carry, would be
lost between two steps (as the demand ledger's failure count once was). The
strategy for each model is derived from its declared fields, so a field added
later is covered without touching this test.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Literal, Union

import annotated_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from gpuyield.agents.controller.records import (
    CLOCK,
    KINDS,
    POD,
    YIELD,
    DemandRecord,
    RecordModel,
    load,
    model_of,
)


def _number_bounds(info: FieldInfo | None) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    for rule in info.metadata if info is not None else ():
        if isinstance(rule, annotated_types.Ge):
            bounds["min_value"] = rule.ge
        elif isinstance(rule, annotated_types.Le):
            bounds["max_value"] = rule.le
    return bounds


def strategy_for(annotation: Any, info: FieldInfo | None = None) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return st.one_of(*(strategy_for(a, info) for a in args))
    if annotation is type(None):
        return st.none()
    if origin is Literal:
        return st.sampled_from(args)
    if origin is tuple:
        return st.lists(strategy_for(args[0]), max_size=4).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), strategy_for(args[1]), max_size=4)
    if isinstance(annotation, type) and issubclass(annotation, RecordModel):
        return model_strategy(annotation)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(**{"min_value": -(2**53), "max_value": 2**53, **_number_bounds(info)})
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False, **_number_bounds(info))
    if annotation is str:
        return st.text(max_size=16)
    raise TypeError(f"no strategy for {annotation!r}: extend strategy_for")


def model_strategy(model: type[RecordModel]) -> st.SearchStrategy[RecordModel]:
    fields = {
        name: strategy_for(info.annotation, info) for name, info in model.model_fields.items()
    }
    return st.fixed_dictionaries(fields).map(lambda values: model(**values))


@pytest.mark.parametrize("prefix", sorted(KINDS), ids=lambda p: p.rstrip("/"))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_kind_of_record_comes_back_from_the_table_as_it_went_in(
    prefix: str, data: st.DataObject
) -> None:
    model = KINDS[prefix]
    record = data.draw(model_strategy(model))
    stored = json.loads(json.dumps(record.dump()))
    key = prefix if not prefix.endswith("/") else prefix + "ns/job"
    back = load(key, stored)
    assert back == record
    assert back.dump() == record.dump()


def test_a_field_no_model_declares_is_refused_not_dropped() -> None:
    raw = DemandRecord(last_round=10.0, failures=3).dump()
    with pytest.raises(ValidationError, match="retries"):
        DemandRecord.model_validate({**raw, "retries": 2})


def test_each_key_is_read_by_the_model_of_its_prefix() -> None:
    assert model_of(POD + "prod/ft-worker-0") is KINDS[POD]
    assert model_of(YIELD + "research/sweep/d-1") is KINDS[YIELD]
    assert model_of(CLOCK) is KINDS[CLOCK]
    with pytest.raises(KeyError):
        model_of("leaving/research/sweep")
