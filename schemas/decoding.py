"""Turning a topic's raw bytes into its message, or into a reason it cannot be.

The reason is one line naming what is wrong (``not JSON``, ``unknown format
version 2``, ``step: input should be greater than or equal to 0``), which is
what a dead letter records and an operator reads.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from gpuyield.schemas.errors import explain_validation_error

M = TypeVar("M", bound=BaseModel)

KNOWN_VERSIONS = (1,)


def known_versions(model: type[BaseModel]) -> tuple[int, ...]:
    """The format versions ``model`` reads: its ``v`` field's literals (``Decision``: 1 and 2)."""
    field = model.model_fields.get("v")
    found = get_args(field.annotation) if field is not None else ()
    return tuple(v for v in found if isinstance(v, int) and not isinstance(v, bool)) or (
        KNOWN_VERSIONS
    )


class MessageError(ValueError):
    """A message could not be read; ``str()`` is the one-line reason."""


def decode(model: type[M], raw: bytes | str | None) -> M:
    """Parse and validate one message with exact JSON types, checking its format version first.

    The fast path is pydantic's own JSON parser in strict mode (see
    ``schemas.base``). When it fails, the bytes are read again to say first
    whether they are JSON at all and of a known version; otherwise the reason
    is the strict parser's own error, so it names the field (``gpus: input
    should be a valid integer (got "8")``).
    """
    if raw is None:
        raise MessageError("empty message (a tombstone or a null value)")
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        failure = exc
    try:
        doc: Any = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MessageError(f"not a JSON object (got {type(doc).__name__})")
    version = doc.get("v", 1)
    known = known_versions(model)
    if isinstance(version, bool) or version not in known:
        raise MessageError(
            f"unknown format version {json.dumps(version)[:20]} for {model.__name__} "
            f"(this reader knows {', '.join(map(str, known))})"
        )
    raise MessageError(f"{model.__name__}: {explain_validation_error(failure)}")


def encode(message: BaseModel) -> bytes:
    """The canonical bytes of a message: compact JSON, keys in model order."""
    return message.model_dump_json().encode()
