"""Reading documents from outside: every failure becomes one line that names what is wrong.

Error tree::

    InputError            a document could not be read; str() is the one-line message
      (raised for: missing file, empty file, not JSON, not an object, schema violation)

The message names the path of the bad field the way a user would write it,
``jobs[3].pods[0].node: unknown node 'n9'``, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from gpuyield.schemas.snapshot import Snapshot


class InputError(Exception):
    """A document from outside could not be read; the message says where and why."""


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as ``jobs[3].pods[0].node``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def describe(error: ErrorDetails) -> str:
    """One readable line for one pydantic error."""
    path = field_path(tuple(error["loc"]))
    if error["type"] == "missing":
        what = "required field is missing"
    elif error["type"] == "reference":
        return error["msg"]
    else:
        msg = error["msg"]
        what = msg[0].lower() + msg[1:] if msg else "invalid value"
        what = f"{what} (got {json.dumps(error.get('input'), default=str)[:60]})"
    return f"{path}: {what}" if path else what


def explain_validation_error(exc: ValidationError) -> str:
    """The first error of ``exc`` as one line, with a count of the others."""
    errors = exc.errors()
    first = describe(errors[0])
    if len(errors) > 1:
        first += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return first


def parse_json_object(text: str, source: str) -> dict[str, Any]:
    """Parse ``text`` as a JSON object, or raise InputError naming ``source``."""
    if not text.strip():
        raise InputError(f"{source}: the file is empty, expected a JSON snapshot")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a JSON object, got {type(data).__name__}")
    return data


def load_snapshot(text: str, source: str = "snapshot") -> Snapshot:
    """Parse and validate a v1 snapshot with exact JSON types, or raise InputError.

    A valid document is parsed once, by pydantic: a 10,000-node snapshot is
    14 MB, and parsing it with ``json`` first only to look at its shape cost
    a third of the validation again. The shape checks (empty, not JSON, not
    an object, another version) run only when validation fails, so a broken
    document still gets the one-line message that names its real fault.
    """
    try:
        # exact JSON types (strict mode, see schemas.base): "gpus": "8" is an error
        return Snapshot.model_validate_json(text, strict=True)
    except ValidationError as exc:
        data = parse_json_object(text, source)
        version = data.get("version")
        if "version" in data and (isinstance(version, bool) or version != 1):
            raise InputError(
                f"version: unsupported snapshot version {json.dumps(version)}; this planner reads 1"
            ) from None
        raise InputError(explain_validation_error(exc)) from None
