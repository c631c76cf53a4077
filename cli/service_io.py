"""What every long-running command does first: read the settings, set up logging.

One place, so every command reports a bad setting the same way (exit 2, one
line naming the variable) and logs in the same format.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gpuyield.cli_io import fail
from gpuyield.streams.settings import Settings, SettingsError, load_settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def settings_or_fail(config: Path | None = None) -> Settings:
    """The settings from the environment and ``config``, or exit 2 naming what is wrong."""
    try:
        return load_settings(config)
    except SettingsError as exc:
        fail(str(exc))


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
