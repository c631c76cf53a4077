"""The base every wire model shares.

Models are frozen so a planner or a stream agent can never change what it was
given (Faust only persists reassigned table values, and audits replay inputs
byte for byte). Unknown fields are ignored, as the contract requires, so older
readers accept documents from newer writers.

JSON types are exact (the contract: "a wrong type is an error"). Reading JSON
validates in pydantic's strict mode, so ``"gpus": "8"``, ``"gpus": 8.0``,
``"schedulable": 1``, ``"v": true`` and ``"progress": "0.5"`` are errors that
name the field, not values quietly converted. Two readings follow the
contract rather than the letter of "exact":

- an integer is a valid number where a float is expected (``"cooldown_s":
  600`` and ``"priority": 1000`` are in the contract's own example; JSON has
  one number type), but a boolean never is;
- an enum or a tuple is read from its JSON form (a string value, an array).

Models built in Python (the controller from its records, the simulator from
its state) keep pydantic's default mode: their inputs are typed by mypy, and
``Job(state="Running")`` or a list for a tuple stays convenient there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError


def _not_a_boolean(value: Any) -> Any:
    # JSON ``true`` equals 1 for a Literal[1], even in strict mode: say no here.
    if isinstance(value, bool):
        raise PydanticCustomError("literal_error", "Input should be the number 1, not a boolean")
    return value


FormatVersion = Annotated[Literal[1], BeforeValidator(_not_a_boolean)]
"""A document's format version: the number 1 (never ``true``)."""

FormatVersion1or2 = Annotated[Literal[1, 2], BeforeValidator(_not_a_boolean)]
"""The version of a document with a second format (``Decision``): 1 or 2, never ``true``."""


class WireModel(BaseModel):
    """A frozen, strictly-typed document that ignores unknown fields."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    @classmethod
    def model_validate_json(
        cls, json_data: str | bytes | bytearray, *, strict: bool | None = None, **kwargs: Any
    ) -> Self:
        """Read a JSON document with exact types (strict mode) unless told otherwise."""
        return super().model_validate_json(
            json_data, strict=True if strict is None else strict, **kwargs
        )
