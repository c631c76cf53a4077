"""``gpuyield schemas``: the JSON Schema of every wire model, for other languages' clients."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuyield.cli_io import fail
from gpuyield.schemas.export import write_schemas


def schemas_command(
    out: Annotated[Path, typer.Option(help="Directory to write the JSON Schemas into.")],
) -> None:
    """Write the JSON Schema of every wire model (snapshot, plan, ...)."""
    try:
        written = write_schemas(out)
    except OSError as exc:
        fail(f"{out}: cannot write schemas: {exc}")
    for path in written:
        typer.echo(str(path))
