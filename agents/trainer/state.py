"""What a checkpoint must hold besides the weights for a resumed run to be bit-identical.

A run resumed from step ``s`` matches an uninterrupted run only if every source of
randomness continues where it stopped: Python's ``random``, NumPy's global
generator, torch's CPU generator and every CUDA device's. Everything is stored
as plain types (ints, lists, dicts, tensors) because checkpoints are read with
``torch.load(weights_only=True)``, which refuses arbitrary pickles.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

logger = logging.getLogger(__name__)


@runtime_checkable
class Stateful(Protocol):
    """Anything a checkpoint can carry: torch modules, optimizers, schedulers, data positions."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> Any: ...


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose state dict has no ``module.`` / ``_orig_mod.`` prefixes.

    Saving the inner module keeps checkpoints portable between a DDP run, a
    compiled run and a plain one (a job may resume on a different world size).
    """
    while True:
        inner = getattr(model, "module", None)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel) and isinstance(
            inner, torch.nn.Module
        ):
            model = inner
            continue
        original = getattr(model, "_orig_mod", None)
        if isinstance(original, torch.nn.Module):
            model = original
            continue
        return model


def capture_rng() -> dict[str, Any]:
    """This process's generator states, as plain types."""
    numpy_state = np.random.get_state(legacy=False)
    version, internal, gauss = random.getstate()
    return {
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
        "numpy": {
            "bit_generator": str(numpy_state["bit_generator"]),
            "key": [int(k) for k in numpy_state["state"]["key"]],
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Put every generator back where ``capture_rng`` found it."""
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"]), python["gauss"]))
    numpy = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": numpy["bit_generator"],
            "state": {"key": np.asarray(numpy["key"], dtype=np.uint32), "pos": numpy["pos"]},
            "has_gauss": numpy["has_gauss"],
            "gauss": numpy["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    cuda: list[torch.Tensor] = state.get("cuda", [])
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            logger.warning(
                "checkpoint has CUDA RNG states for %d devices, this process sees %d: "
                "CUDA generators not restored (the resumed run will not be bit-identical)",
                len(cuda),
                torch.cuda.device_count(),
            )
