"""The base every wire model shares.

Models are frozen so a planner or a stream agent can never change what it was
given (Faust only persists reassigned table values, and audits replay inputs
byte for byte). Unknown fields are ignored, as the contract requires, so older
readers accept documents from newer writers.
"""

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    """A frozen, strictly-typed document that ignores unknown fields."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)
