"""When the worker rebuilds its live view: often on a small cluster, never most of its time.

The live view (``gpuyield status``, the demo's and drill's progress) is
rebuilt from the whole decider table: a few milliseconds at 64 nodes, about
0.4 s of CPU at 10,000 nodes. Rebuilt every 0.5 s while inputs flow and after
every decision, that was most of a 10,000-node worker's time, taken from the
decider it describes. So a rebuild is due only once the last one is
``1 / max_share`` of its own cost in the past (a tenth of the worker's time
at most), as well as ``every_s`` (0.5 s): on a small cluster the first bound
is a few tens of milliseconds and nothing changes; at 10,000 nodes the view
is about 4 s old at worst.

A decision wants its view at once, but pays the cost bound like any other
rebuild: it is remembered as pending and published on the first input once
the rebuild is due (the worker's ticks keep inputs coming).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ViewPacer:
    """Decides, from the clock the caller passes in, whether the live view is due."""

    every_s: float = 0.5
    """The view is rebuilt at most this often without a decision."""

    max_share: float = 0.1
    """The most of the worker's time rebuilding the view may take."""

    last_at: float | None = None
    last_cost_s: float = 0.0
    pending: bool = False
    """A decision was made since the last rebuild: rebuild as soon as the cost allows."""

    def due(self, now: float, *, decided: bool) -> bool:
        """Whether to rebuild now; a decision not served now stays pending."""
        self.pending = self.pending or decided
        if self.last_at is None:
            return True
        since = now - self.last_at
        if since < self.last_cost_s / self.max_share:
            return False
        return self.pending or since >= self.every_s

    def built(self, at: float, cost_s: float) -> None:
        """A rebuild started at ``at`` took ``cost_s`` seconds."""
        self.last_at = at
        self.last_cost_s = max(0.0, cost_s)
        self.pending = False
