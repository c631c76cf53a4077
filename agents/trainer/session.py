"""A training loop that yields gracefully, in a few lines of the training script.

The loop asks ``step_done(step)`` after every step. That one call is where all
the work happens, because a step boundary is the only place where the model,
the optimizer and the data position are consistent and saving is safe:

- a yield request (SIGTERM, SIGUSR1, ``request_yield``) recorded since the last
  boundary is agreed across ranks; if any rank has one, every rank saves the
  emergency checkpoint (rank 0 writes), and ``step_done`` returns True so the
  loop breaks after the *same* step everywhere;
- otherwise a periodic checkpoint is saved when one is due, so a hard kill
  loses at most one interval (the controller picks victims by that loss, which
  is why the interval and the last checkpoint ride on every heartbeat);
- a heartbeat is queued when one is due, never waiting for the broker.

Resuming is the mirror image: ``resume`` loads the newest checkpoint that
verifies, restores every tracked object and the generators, and returns the
step to start from, so the resumed run computes exactly what the uninterrupted
one would have.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist

from gpuyield.agents.trainer import distributed
from gpuyield.agents.trainer.checkpoint import CheckpointError, CheckpointStore, LoadedCheckpoint
from gpuyield.agents.trainer.heartbeats import (
    HeartbeatPublisher,
    HeartbeatSink,
    NullSink,
    PublisherStats,
)
from gpuyield.agents.trainer.signals import DEFAULT_SIGNALS, REQUESTED, YieldSignals, describe
from gpuyield.agents.trainer.state import Stateful, capture_rng, restore_rng, unwrap
from gpuyield.schemas.messages import Heartbeat

logger = logging.getLogger(__name__)

CHECKPOINT_FAILED_EXIT_CODE = 1
"""A yield whose emergency checkpoint could not be saved: it must not look like a clean yield."""


class GracefulTrainer:
    """One training process's yield handling, checkpoints and heartbeats.

    Construct it early (its signal handlers catch a SIGTERM that arrives while
    the model loads), call ``resume`` once, ``step_done`` after every step and
    ``finish`` at the end; or use it as a context manager, which closes it on
    the way out of an exception too. In a DDP job every rank does the same
    calls in the same order: ``resume``, ``step_done`` and ``checkpoint`` are
    collectives.

    The knobs, and why one would turn them:

    - ``checkpoint_every_steps`` / ``checkpoint_interval_s``: periodic
      checkpoints bound what a hard kill (or a crash) loses; either or both.
      Heartbeats report the interval in seconds (estimated from the step time
      when only steps are given): the controller prefers victims that lose little.
    - ``keep_checkpoints``: two by default, so a newest file damaged by the
      storage still leaves one to resume from.
    - ``heartbeat_interval_s`` / ``heartbeat_every_steps``: how often progress is
      reported; ``heartbeat_buffer`` how many may wait for a slow sink.
    - ``sync_every_steps``: how often DDP ranks agree on a yield (see
      ``distributed``).
    - ``yield_exit_code``: 0 by default; a cluster that restarts pods on any
      exit code can be given another.
    - ``flush_timeout_s``: the most ``finish`` waits for the sink; it comes out
      of the grace period.
    - ``clock`` / ``monotonic``: wall time for timestamps, monotonic time for
      intervals; injected by tests.
    """

    def __init__(
        self,
        checkpoint_dir: str | os.PathLike[str],
        *,
        job: str,
        pod: str | None = None,
        heartbeat: HeartbeatSink | None = None,
        total_steps: int | None = None,
        checkpoint_every_steps: int | None = None,
        checkpoint_interval_s: float | None = None,
        keep_checkpoints: int = 2,
        heartbeat_interval_s: float | None = 10.0,
        heartbeat_every_steps: int | None = None,
        heartbeat_buffer: int = 64,
        sync_every_steps: int = 1,
        yield_signals: Iterable[signal.Signals] = DEFAULT_SIGNALS,
        yield_exit_code: int = 0,
        flush_timeout_s: float = 5.0,
        process_group: dist.ProcessGroup | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        _positive("total_steps", total_steps)
        _positive("checkpoint_every_steps", checkpoint_every_steps)
        _positive("checkpoint_interval_s", checkpoint_interval_s)
        _positive("heartbeat_interval_s", heartbeat_interval_s)
        _positive("heartbeat_every_steps", heartbeat_every_steps)
        _positive("sync_every_steps", sync_every_steps)
        if not job:
            raise ValueError("job must name the Volcano job, as namespace/name")
        self.job = job
        self.pod = pod or os.environ.get("POD_NAME") or socket.gethostname()
        self.total_steps = total_steps
        self._every_steps = checkpoint_every_steps
        self._interval_s = checkpoint_interval_s
        self._heartbeat_interval_s = heartbeat_interval_s
        self._heartbeat_every_steps = heartbeat_every_steps
        self._sync_every_steps = sync_every_steps
        self._yield_exit_code = yield_exit_code
        self._flush_timeout_s = flush_timeout_s
        self._group = process_group
        self._clock = clock
        self._monotonic = monotonic

        self._store = CheckpointStore(checkpoint_dir, keep=keep_checkpoints)
        self._signals = YieldSignals(yield_signals)
        self._publisher = HeartbeatPublisher(heartbeat or NullSink(), buffer=heartbeat_buffer)
        self._signals.install()

        self._collective: distributed.Collective = distributed.SingleProcess()
        self._model: torch.nn.Module | None = None
        self._tracked: dict[str, Stateful] = {}
        self._data: Stateful | None = None
        self._step = 0
        self._step_mono = monotonic()
        self._step_seconds: float | None = None
        self._last_checkpoint_step: int | None = None
        self._last_checkpoint_at: float | None = None
        self._last_checkpoint_mono = self._step_mono
        self._last_heartbeat_step = 0
        self._last_heartbeat: tuple[int, int | None] | None = None
        self._last_heartbeat_mono = self._step_mono
        self._yield_reason: str | None = None
        self._yield_saved = False
        self._closed = False

    # -- the training script's calls ---------------------------------------------------------

    def resume(
        self,
        *,
        model: torch.nn.Module,
        optimizer: Stateful | None = None,
        scheduler: Stateful | None = None,
        data: Stateful | None = None,
        **extra: Stateful,
    ) -> int:
        """Track these objects, restore them from the newest valid checkpoint; the step to start at.

        ``model`` may be wrapped in DDP or compiled: the inner module is saved.
        ``optimizer``, ``scheduler`` and ``extra`` objects are saved from rank 0
        (they are replicated in DDP). ``data`` is the data position (epoch and
        index, a sampler's or generator's state) and is saved per rank, like
        the generators, since shards may differ; it should be small.
        """
        if self._model is not None:
            raise RuntimeError("resume() was already called")
        reserved = {"model", "optimizer", "scheduler", "data", "rng", "format", "step", "metadata"}
        clash = sorted(reserved & extra.keys())
        if clash:
            raise ValueError(f"reserved checkpoint keys: {', '.join(clash)}")
        self._model = model
        self._tracked = {
            name: obj
            for name, obj in {"optimizer": optimizer, "scheduler": scheduler, **extra}.items()
            if obj is not None
        }
        self._data = data
        self._collective = distributed.current(self._group)

        loaded = self._load_agreed()
        start = 0
        if loaded is not None:
            self._restore(loaded)
            start = loaded.info.step
            self._last_checkpoint_step = start
            self._last_checkpoint_at = loaded.info.saved_at
            logger.info(
                "resumed %s from step %d (%s checkpoint)",
                self.job,
                start,
                loaded.info.metadata.get("reason", "?"),
            )
        else:
            logger.info("no checkpoint in %s: %s starts at step 0", self._store.directory, self.job)
        now = self._monotonic()
        self._step = start
        self._step_mono = now
        self._last_checkpoint_mono = now
        self._heartbeat(start, now)
        return start

    def step_done(self, step: int) -> bool:
        """Record that ``step`` steps are complete; True when the loop must stop (a yield).

        When it returns True the emergency checkpoint is already saved (or its
        failure logged, see ``exit_code``), on every rank at the same step.
        """
        if self._model is None:
            raise RuntimeError("call resume() before step_done()")
        if self._yield_reason is not None:
            return True
        now = self._monotonic()
        self._observe(step, now)
        time_due = (
            self._interval_s is not None and now - self._last_checkpoint_mono >= self._interval_s
        )
        code, time_due = self._agree(step, self._signals.code, time_due)
        if code:
            self._yield(step, describe(code))
            return True
        if (self._every_steps is not None and step % self._every_steps == 0) or time_due:
            self._save(step, "periodic")
            self._heartbeat(step, now)
        elif self._heartbeat_due(step, now):
            self._heartbeat(step, now)
        return False

    def request_yield(self) -> None:
        """Ask for a yield from code (a watcher thread, a callback); honoured at the next step."""
        self._signals.request(REQUESTED)

    def checkpoint(self, reason: str = "manual") -> bool:
        """Save now, at the current step (a collective in DDP); True when saved."""
        if self._model is None:
            raise RuntimeError("call resume() before checkpoint()")
        saved = self._save(self._step, reason)
        self._heartbeat(self._step, self._monotonic())
        return saved

    def finish(self) -> int:
        """Send the last heartbeat, release the signals; the exit code for ``sys.exit``.

        0 after a completed run and after a yield whose checkpoint was saved
        (the pod's job is done: it resumes later from that checkpoint).
        """
        if (
            not self._closed
            and self._model is not None
            and self._last_heartbeat
            != (
                self._step,
                self._last_checkpoint_step,
            )
        ):
            self._heartbeat(self._step, self._monotonic())
        self.close()
        return self.exit_code

    def close(self) -> None:
        """Restore the previous signal handlers and stop the heartbeat thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._signals.restore()
        self._publisher.close(self._flush_timeout_s)

    def __enter__(self) -> GracefulTrainer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- what the script (and tests) may read --------------------------------------------------

    @property
    def step(self) -> int:
        return self._step

    @property
    def rank(self) -> int:
        return self._collective.rank

    @property
    def yielded(self) -> bool:
        return self._yield_reason is not None

    @property
    def yield_reason(self) -> str | None:
        """``SIGTERM``, ``SIGUSR1`` or ``requested`` once a yield was agreed."""
        return self._yield_reason

    @property
    def exit_code(self) -> int:
        if self._yield_reason is None:
            return 0
        return self._yield_exit_code if self._yield_saved else CHECKPOINT_FAILED_EXIT_CODE

    @property
    def last_checkpoint_step(self) -> int | None:
        return self._last_checkpoint_step

    @property
    def checkpoint_dir(self) -> Path:
        return self._store.directory

    @property
    def heartbeat_stats(self) -> PublisherStats:
        return self._publisher.stats

    # -- internals -----------------------------------------------------------------------------

    def _agree(self, step: int, code: int, time_due: bool) -> tuple[int, bool]:
        """The yield code and the time-based checkpoint decision, the same on every rank.

        Step-based checkpoints need no agreement (every rank sees the same step);
        clocks and signals differ per rank. With ``sync_every_steps`` > 1 both
        wait for the next agreement step (and the last step).
        """
        if self._collective.world_size == 1:
            return code, time_due
        last = self.total_steps is not None and step >= self.total_steps
        if step % self._sync_every_steps and not last:
            return 0, False
        agreed_code, agreed_time = self._collective.max_ints([code, int(time_due)])
        return agreed_code, bool(agreed_time)

    def _yield(self, step: int, reason: str) -> None:
        started = self._monotonic()
        logger.warning(
            "yield requested (%s): saving an emergency checkpoint at step %d", reason, step
        )
        self._yield_reason = reason
        self._yield_saved = self._save(step, reason)
        if self._yield_saved:
            logger.warning(
                "yielded at step %d: checkpoint saved in %.2f s",
                step,
                self._monotonic() - started,
            )
        self._heartbeat(step, self._monotonic())

    def _save(self, step: int, reason: str) -> bool:
        """Save the tracked state at ``step`` (rank 0 writes); True on every rank once saved."""
        if step == self._last_checkpoint_step:
            return True  # this very boundary is already on disk
        model = self._model
        assert model is not None
        started = self._monotonic()
        local = {
            "rng": capture_rng(),
            "data": self._data.state_dict() if self._data is not None else None,
        }
        gathered = self._collective.gather(local)
        failed = 0
        if gathered is not None:
            try:
                info = self._store.save(step, self._state(model, gathered), self._metadata(reason))
            except Exception:
                # Caught, not raised: the other ranks wait for this rank's verdict below.
                logger.exception("checkpoint at step %d (%s) failed", step, reason)
                failed = 1
            else:
                logger.info(
                    "checkpoint at step %d (%s): %s, %.1f MB in %.2f s",
                    step,
                    reason,
                    info.path.name,
                    info.size / 1e6,
                    self._monotonic() - started,
                )
        # Also the barrier: no rank goes on (or exits) before rank 0's file is committed.
        if self._collective.max_ints([failed])[0]:
            return False
        self._last_checkpoint_step = step
        self._last_checkpoint_at = self._clock()
        self._last_checkpoint_mono = self._monotonic()
        return True

    def _state(self, model: torch.nn.Module, gathered: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "model": unwrap(model).state_dict(),
            **{name: obj.state_dict() for name, obj in self._tracked.items()},
            "rng": [entry["rng"] for entry in gathered],
            "data": [entry["data"] for entry in gathered] if self._data is not None else None,
        }

    def _metadata(self, reason: str) -> dict[str, Any]:
        """Plain types only: the node agent reads them from the manifest, without torch."""
        return {
            "job": self.job,
            "pod": self.pod,
            "saved_at": self._clock(),
            "reason": reason,
            "world_size": self._collective.world_size,
            "torch": str(torch.__version__),
        }

    def _load_agreed(self) -> LoadedCheckpoint | None:
        """Rank 0 picks the newest valid checkpoint; every rank loads that one, or all fail."""
        loaded: LoadedCheckpoint | None = None
        if self._collective.rank == 0:
            self._store.prepare()
            loaded = self._store.load_latest(quarantine=True)
        step = self._collective.broadcast_int(loaded.info.step if loaded else -1)
        failure: CheckpointError | None = None
        if step >= 0 and loaded is None:
            try:
                loaded = self._store.load(step)
            except CheckpointError as exc:
                failure = exc
        if self._collective.max_ints([int(failure is not None)])[0]:
            raise CheckpointError(
                f"rank {self.rank}: cannot resume from step {step}: "
                f"{failure or 'another rank could not read the checkpoint'}"
            )
        return loaded

    def _restore(self, loaded: LoadedCheckpoint) -> None:
        state = loaded.state
        model = self._model
        assert model is not None
        unwrap(model).load_state_dict(state["model"])
        for name, obj in self._tracked.items():
            if state.get(name) is None:
                logger.warning("checkpoint has no %s state: %s starts fresh", name, name)
                continue
            obj.load_state_dict(state[name])
        if self._data is not None:
            own = self._own_entry(state.get("data"), "data position")
            if own is not None:
                self._data.load_state_dict(own)
        rng = self._own_entry(state.get("rng"), "RNG state")
        if rng is not None:
            restore_rng(rng)

    def _own_entry(self, per_rank: list[Any] | None, what: str) -> Any:
        """This rank's entry of a per-rank list; rank 0's (with a warning) if the world changed."""
        if not per_rank:
            logger.warning("checkpoint has no %s", what)
            return None
        world = self._collective.world_size
        if len(per_rank) != world:
            logger.warning(
                "checkpoint was saved by %d ranks, this job has %d: every rank takes rank 0's %s",
                len(per_rank),
                world,
                what,
            )
            return per_rank[0]
        return per_rank[self.rank]

    def _observe(self, step: int, now: float) -> None:
        """Track the step time: it turns a step-based interval into the seconds heartbeats carry."""
        done = step - self._step
        if done > 0:
            seconds = (now - self._step_mono) / done
            self._step_seconds = (
                seconds if self._step_seconds is None else 0.9 * self._step_seconds + 0.1 * seconds
            )
        self._step = step
        self._step_mono = now

    def _heartbeat_due(self, step: int, now: float) -> bool:
        every = self._heartbeat_every_steps
        interval = self._heartbeat_interval_s
        return (every is not None and step - self._last_heartbeat_step >= every) or (
            interval is not None and now - self._last_heartbeat_mono >= interval
        )

    def _checkpoint_interval_s(self) -> float | None:
        if self._interval_s is not None:
            return self._interval_s
        if self._every_steps is not None and self._step_seconds:
            return self._every_steps * self._step_seconds
        return None

    def _heartbeat(self, step: int, now: float) -> None:
        self._last_heartbeat_step = step
        self._last_heartbeat_mono = now
        self._last_heartbeat = (step, self._last_checkpoint_step)
        total = self.total_steps
        self._publisher.publish(
            Heartbeat(
                job=self.job,
                pod=self.pod,
                rank=self._collective.rank,
                step=step,
                total_steps=total,
                progress=min(1.0, step / total) if total else 0.0,
                last_checkpoint_step=self._last_checkpoint_step,
                last_checkpoint_at=self._last_checkpoint_at,
                checkpoint_interval_s=self._checkpoint_interval_s(),
                sent_at=self._clock(),
            )
        )


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
