"""Shared test configuration.

Hypothesis profiles, chosen by the ``HYPOTHESIS_PROFILE`` environment variable:

- ``ci`` (the default): derandomized, so every run tries the same examples and
  a red build can be replayed; no deadline (CI machines are slow and noisy).
- ``dev``: random examples, more of them, to look for new counterexamples
  locally: ``HYPOTHESIS_PROFILE=dev pytest tests/planner``.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
