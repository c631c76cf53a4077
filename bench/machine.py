"""The machine line every benchmark prints, so figures name where they were measured."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine() -> str:
    """``MODEL, N cores, Python X.Y.Z``."""
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
