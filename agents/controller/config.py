"""The decider's knobs: ``ControllerConfig``, defined with the others in ``schemas/config.py``.

It moved there so the edge's settings model (``gpuyield.streams.settings``,
which may not import ``gpuyield.agents``) can compose it and read each knob
from ``GPUYIELD_<NAME>``. This import path stays for the controller's code;
add a new knob in ``schemas/config.py`` (its module docstring says how).
"""

from __future__ import annotations

from gpuyield.schemas.config import ControllerConfig

__all__ = ["ControllerConfig"]
