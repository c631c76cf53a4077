"""Options several commands share, declared once so that their flags and help agree.

Each is a type to annotate a command's parameter with (``config: SettingsFile =
None``); typer reads the option from the annotation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SettingsFile = Annotated[
    Path | None, typer.Option("--config", help="Settings file (GPUYIELD_NAME=value lines).")
]
"""The settings file every service and reader command takes (``settings_or_fail``)."""

ArchiveSource = Annotated[
    str | None, typer.Option("--archive", help="Read the archive at DIR (or URL).")
]
"""Where a reader of the event history reads it: an archive (else ``KafkaSource``)."""

KafkaSource = Annotated[
    str | None, typer.Option("--bootstrap", help="Read Kafka at host:port[,host:port].")
]
"""Where a reader of the event history reads it: the live topics."""
