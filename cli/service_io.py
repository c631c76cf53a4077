"""What every command that reads the settings does first: read them, set up logging.

One place, so every command reports a bad setting the same way (exit 2, one
line naming the variable) and logs in the same format.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gpuyield.cli_io import fail
from gpuyield.streams.settings import (
    LoadedSettings,
    Settings,
    SettingsError,
    load_settings_traced,
)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def settings_or_fail(config: Path | None = None) -> Settings:
    """The settings from the environment and ``config``, or exit 2 naming what is wrong."""
    return traced_settings_or_fail(config).settings


def traced_settings_or_fail(config: Path | None = None) -> LoadedSettings:
    """``settings_or_fail``, with where each value came from (``gpuyield config``, simulate)."""
    try:
        return load_settings_traced(config)
    except SettingsError as exc:
        fail(str(exc))


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
