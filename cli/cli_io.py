"""The CLI's edge to files and the terminal: reading documents, failing in one line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer

from gpuyield.schemas import InputError, Snapshot, load_snapshot


def fail(message: str) -> NoReturn:
    """Exit 2 with one line on stderr and nothing on stdout."""
    sys.stderr.write(f"gpuyield: {message}\n")
    raise typer.Exit(2)


def read_source(source: str, expected: str) -> tuple[str, str]:
    """The text of file ``source`` (``-``: stdin) and its name; exit 2 if it cannot be read."""
    if source == "-":
        try:
            return sys.stdin.read(), "<stdin>"
        except UnicodeDecodeError as exc:
            fail(f"<stdin>: cannot be read: {exc}")
    path = Path(source)
    if not path.exists():
        fail(f"{source}: no such file")
    if path.is_dir():
        fail(f"{source}: is a directory, expected {expected}")
    try:
        return path.read_text(encoding="utf-8"), source
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{source}: cannot be read: {exc}")


def read_snapshot(source: str) -> Snapshot:
    text, name = read_source(source, "a JSON snapshot")
    try:
        return load_snapshot(text, name)
    except InputError as exc:
        fail(str(exc))
