"""The worker's long-lived heap, kept out of Python's full garbage collections.

At 10,000 nodes the decider's table, its index and the snapshot models are
some 1.3 million objects that live as long as the worker. Python's cyclic
collector walks every tracked object on each full collection: 0.7 to 0.9 s
of CPU there, about once every 20,000 inputs, landing in whichever step runs
(a 768 ms step once matched a 768 ms collection), and a third of the CPU of
the inputs that decide nothing (``bench/bench_decider_scale.py``).

``gc.freeze()`` moves every object alive into a permanent generation that no
collection walks. Reference counting still frees a frozen object the moment
the last reference to it goes, which is how the decider lets go of a replaced
record or view; only garbage in reference cycles among frozen objects waits,
since no collection looks at it. So the heap is frozen again every
``refreeze_s`` (let go, one full collection, frozen again), which bounds what
such cycles can hold to what one interval makes (a 20,000-input run at
10,000 nodes made none), and let go whenever the index itself is dropped.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


class FrozenHeap:
    """Freezes the process's heap once the decider's index is built, and again every
    ``refreeze_s`` after; ``release`` lets it go (the index is dropped)."""

    def __init__(self, refreeze_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not refreeze_s > 0:
            raise ValueError(f"refreeze_s must be positive, not {refreeze_s!r}")
        self.refreeze_s = refreeze_s
        self.clock = clock
        self.frozen_at: float | None = None

    def freeze(self) -> None:
        """Collect what is garbage now, then freeze what is left: nothing dead is kept."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.frozen_at = self.clock()

    def refresh(self) -> None:
        """Freeze again once ``refreeze_s`` has passed since the last freeze; else nothing."""
        if self.frozen_at is not None and self.clock() - self.frozen_at >= self.refreeze_s:
            self.freeze()

    def release(self) -> None:
        """Let every frozen object go back to the collector (until the next ``freeze``)."""
        gc.unfreeze()
        self.frozen_at = None
