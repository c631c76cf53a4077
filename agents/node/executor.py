"""Carries one command from its record to its ack: signal, wait, kill if needed, release, ack.

The decisions come from ``handling`` (pure); this module only observes, acts
and writes the record down before each step that must not be repeated
blindly after a crash (see ``records`` for the phases). It runs the same code
for a fresh command and for a record found in flight after a restart, since
each step starts from the record's phase.

Outside calls that can fail for a while (the API server, Redis, the broker)
are retried with backoff: until the deadline for the signal, for
``release_timeout_s`` for a suspension or resume, and for as long as it takes
for the record and the ack (giving up there would lose the yield's outcome).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gpuyield.agents.node import handling
from gpuyield.agents.node.clock import Clock, Sleep, system_clock, system_sleep
from gpuyield.agents.node.gpus import GpuCounter
from gpuyield.agents.node.ledger import Ledger
from gpuyield.agents.node.pods import PodRef, pod_refs
from gpuyield.agents.node.progress import ProgressBoard
from gpuyield.agents.node.records import Phase, YieldRecord
from gpuyield.agents.node.signalling import Signaller
from gpuyield.agents.node.suspenders import JobGone, JobSuspender
from gpuyield.schemas.config import NodeAgentKnobs
from gpuyield.schemas.messages import CommandAction, YieldAck, YieldOutcome

log = logging.getLogger(__name__)

T = TypeVar("T")

FOREVER = float("inf")


class JobFeed(Protocol):
    """Where the board's heartbeats come from: read per job, only while it is yielded."""

    async def follow(self, job: str, since: float) -> None:
        """Read ``job``'s heartbeats from before ``since``; return once caught up."""
        ...

    def unfollow(self, job: str) -> None:
        """``job``'s heartbeats are no longer needed here."""
        ...


class AckSink(Protocol):
    async def publish(self, ack: YieldAck) -> None:
        """Put the ack on its topic and return once the broker has it."""
        ...


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    stale_after_s: float = 60.0  # commands received later than this past their deadline are refused
    exit_grace_s: float = 10.0  # after a checkpoint is seen, for the pods to exit
    settle_s: float = 2.0  # after the pods are gone, for a checkpoint heartbeat in flight
    poll_s: float = 0.5  # how often pod liveness is checked while waiting
    kill_timeout_s: float = 30.0  # after a kill, for the pods to be gone
    release_timeout_s: float = 60.0  # retrying a suspension or a resume
    backoff_s: float = 0.5  # first retry delay (doubled up to backoff_max_s)
    backoff_max_s: float = 5.0
    # Suspend the job before signalling instead of after the pods are gone. On Kubernetes
    # this keeps Volcano's PodEvicted/TaskCompleted policies (RestartJob, CompleteJob) from
    # acting on the yield's own evictions and exits, but Volcano's AbortJob deletes the pods
    # with their own terminationGracePeriodSeconds, which then caps the grace.
    suspend_first: bool = False

    @classmethod
    def from_knobs(cls, knobs: NodeAgentKnobs, *, suspend_first: bool = False) -> ExecutorSettings:
        """The waits an operator set (``GPUYIELD_NODE_*``, ``Settings.node_agent``)."""
        return cls(
            stale_after_s=knobs.node_stale_after_s,
            exit_grace_s=knobs.node_exit_grace_s,
            settle_s=knobs.node_settle_s,
            poll_s=knobs.node_poll_s,
            kill_timeout_s=knobs.node_kill_timeout_s,
            release_timeout_s=knobs.node_release_timeout_s,
            suspend_first=suspend_first,
        )


@dataclass(frozen=True, slots=True)
class _Ending:
    outcome: YieldOutcome
    stopped_at: float
    checkpoint_step: int | None
    note: str = ""


class YieldExecutor:
    """Runs yield and resume commands for one node."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        signaller: Signaller,
        suspender: JobSuspender,
        gpus: GpuCounter,
        board: ProgressBoard,
        acks: AckSink,
        settings: ExecutorSettings | None = None,
        clock: Clock = system_clock,
        sleep: Sleep = system_sleep,
        feed: JobFeed | None = None,
    ) -> None:
        self._ledger = ledger
        self._feed = feed
        self._signaller = signaller
        self._suspender = suspender
        self._gpus = gpus
        self._board = board
        self._acks = acks
        self._settings = settings or ExecutorSettings()
        self._clock = clock
        self._sleep = sleep

    async def run(self, record: YieldRecord) -> YieldRecord:
        """Take the record from its phase to ``done``; returns the final record."""
        if record.phase is Phase.DONE:
            return record
        if record.phase is not Phase.RELEASING:
            if record.command.action is CommandAction.RESUME:
                record = await self._resume(record)
            else:
                record = await self._yield(record)
        return await self._release(record)

    # --- resume ------------------------------------------------------------------------

    async def _resume(self, record: YieldRecord) -> YieldRecord:
        command = record.command
        if handling.is_stale(command, record.received_at, self._settings.stale_after_s):
            return await self._refuse_stale(record)
        try:
            await self._retry(
                lambda: self._suspender.resume(command.job, command_id=command.command_id),
                until=self._clock() + self._settings.release_timeout_s,
                what=f"resume {command.job}",
            )
        except Exception as exc:
            log.error("command %s: resume of %s failed: %s", command.command_id, command.job, exc)
            outcome, detail = YieldOutcome.FAILED, f"resume failed: {exc}"
        else:
            outcome, detail = YieldOutcome.RESUMED, ""
        ack = handling.make_ack(
            command, outcome, now=self._clock(), received_at=record.received_at, detail=detail
        )
        return await self._save(record.to(Phase.RELEASING, ack=ack))

    # --- yield -------------------------------------------------------------------------

    async def _yield(self, record: YieldRecord) -> YieldRecord:
        """Phase 1 and 2 of a yield, with the job's heartbeats read meanwhile (``feed``)."""
        if self._feed is None:
            return await self._yield_followed(record)
        job = record.command.job
        await self._feed.follow(job, record.received_at)
        try:
            return await self._yield_followed(record)
        finally:
            self._feed.unfollow(job)

    async def _yield_followed(self, record: YieldRecord) -> YieldRecord:
        command = record.command
        pods = pod_refs(command)
        if record.phase is Phase.RECEIVED:
            if handling.is_stale(command, record.received_at, self._settings.stale_after_s):
                return await self._refuse_stale(record)
            record = await self._save(await self._prepare(record, pods))
        suspend_note = ""
        if record.phase is Phase.SIGNALLING:
            if self._settings.suspend_first:
                suspend_note = await self._suspend(record)
            await self._signal(record, pods)
            record = await self._save(record.to(Phase.SIGNALLED))
        ending = await self._watch(record, pods)
        assert record.signalled_at is not None
        lost, note = handling.lost_gpu_seconds(
            ending.outcome,
            self._board.get(command.job),
            stopped_at=ending.stopped_at,
            signalled_at=record.signalled_at,
            gpus=record.gpus,
        )
        detail = "; ".join(part for part in (ending.note, note, suspend_note) if part)
        ack = handling.make_ack(
            command,
            ending.outcome,
            now=self._clock(),
            received_at=record.received_at,
            checkpoint_step=ending.checkpoint_step,
            gpu_seconds_lost=lost,
            detail=detail,
        )
        log.info(
            "command %s: %s %s (checkpoint step %s, %.0f GPU-s lost)",
            command.command_id,
            command.job,
            ack.outcome.value,
            ack.checkpoint_step,
            ack.gpu_seconds_lost,
        )
        return await self._save(record.to(Phase.RELEASING, ack=ack))

    async def _prepare(self, record: YieldRecord, pods: tuple[PodRef, ...]) -> YieldRecord:
        """Fix the signal time, the checkpoint baseline and the GPU count before signalling."""
        if record.command.gpus:
            gpus = record.command.gpus  # the controller counted them from its snapshot
        else:
            try:
                gpus = await self._gpus.gpus(pods)
            except Exception as exc:
                log.warning("command %s: GPU count unknown (%s)", record.command_id, exc)
                gpus = 0
        seen = self._board.get(record.command.job)
        return record.to(
            Phase.SIGNALLING,
            signalled_at=self._clock(),
            baseline_checkpoint_step=None if seen is None else seen.last_checkpoint_step,
            gpus=gpus,
        )

    async def _signal(self, record: YieldRecord, pods: tuple[PodRef, ...]) -> None:
        command = record.command
        grace = handling.signal_grace_s(command, self._clock())
        if grace <= 0:
            log.warning("command %s: deadline passed before the signal", command.command_id)
            return
        try:
            await self._retry(
                lambda: self._signaller.signal(pods, grace),
                until=command.deadline,
                what=f"signal {command.job}",
            )
        except Exception as exc:
            # The wait below still kills at the deadline; the ack will say hard_killed.
            log.error("command %s: could not signal %s: %s", command.command_id, command.job, exc)

    async def _watch(self, record: YieldRecord, pods: tuple[PodRef, ...]) -> _Ending:
        """Phase 2: until a checkpoint, an exit or the deadline; kill when the rules say so."""
        command = record.command
        assert record.signalled_at is not None
        timing = handling.Timing(
            command.deadline, self._settings.exit_grace_s, self._settings.settle_s
        )
        watch = handling.Watch()
        while True:
            now = self._clock()
            alive = await self._alive(pods)
            now = self._clock()
            watch, move = handling.step(
                watch,
                now=now,
                alive=alive,
                seen=self._board.get(command.job),
                signalled_at=record.signalled_at,
                baseline_step=record.baseline_checkpoint_step,
                timing=timing,
            )
            if isinstance(move, handling.Finish):
                return _Ending(
                    move.outcome, move.stopped_at, self._checkpoint_step(command.job, watch)
                )
            if isinstance(move, handling.Kill):
                return await self._kill(command.job, pods, move.outcome, watch)
            await self._pause(command.job, min(move.until - now, self._settings.poll_s))

    async def _kill(
        self, job: str, pods: tuple[PodRef, ...], outcome: YieldOutcome, watch: handling.Watch
    ) -> _Ending:
        killed_at = self._clock()
        gone_by = killed_at + self._settings.kill_timeout_s
        try:
            await self._retry(lambda: self._signaller.kill(pods), until=gone_by, what=f"kill {job}")
        except Exception as exc:
            return _Ending(
                YieldOutcome.FAILED,
                self._clock(),
                self._checkpoint_step(job, watch),
                f"could not kill the pods: {exc}",
            )
        while self._clock() < gone_by:
            if not await self._alive(pods):
                return _Ending(outcome, killed_at, self._checkpoint_step(job, watch))
            await self._sleep(min(self._settings.poll_s, max(0.0, gone_by - self._clock())))
        return _Ending(
            outcome,
            killed_at,
            self._checkpoint_step(job, watch),
            f"pods still running {self._settings.kill_timeout_s:.0f} s after the kill",
        )

    def _checkpoint_step(self, job: str, watch: handling.Watch) -> int | None:
        """The step the job resumes from: the newest checkpoint reported."""
        seen = self._board.get(job)
        reported = None if seen is None else seen.last_checkpoint_step
        steps = [s for s in (watch.checkpoint_step, reported) if s is not None]
        return max(steps) if steps else None

    async def _alive(self, pods: tuple[PodRef, ...]) -> bool:
        try:
            return await self._signaller.alive(pods)
        except Exception as exc:
            # Unknown counts as running: the deadline then ends the wait with a kill.
            log.warning("cannot tell whether %s run: %s", ", ".join(map(str, pods)), exc)
            return True

    async def _pause(self, job: str, seconds: float) -> None:
        """Sleep ``seconds``, or less if the job's next heartbeat comes first."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        news = asyncio.ensure_future(self._board.wait_for_news(job))
        nap = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait({news, nap}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            news.cancel()
            nap.cancel()

    # --- release and ack ---------------------------------------------------------------

    async def _refuse_stale(self, record: YieldRecord) -> YieldRecord:
        command = record.command
        late = record.received_at - command.deadline
        log.warning(
            "command %s: received %.0f s after its deadline; not carried out",
            command.command_id,
            late,
        )
        ack = handling.make_ack(
            command,
            YieldOutcome.FAILED,
            now=self._clock(),
            received_at=record.received_at,
            detail=f"received {late:.0f} s after its deadline: not carried out",
        )
        return await self._save(record.to(Phase.RELEASING, ack=ack))

    async def _release(self, record: YieldRecord) -> YieldRecord:
        """Suspend a yielded job, then publish the ack and close the record."""
        ack = record.ack
        assert ack is not None, "a releasing record holds its ack"
        command = record.command
        detail = ack.detail
        if (
            command.action is CommandAction.YIELD
            and ack.outcome is not YieldOutcome.FAILED
            and not self._settings.suspend_first
        ):
            note = await self._suspend(record)
            detail = "; ".join(part for part in (detail, note) if part)
        now = self._clock()
        final = ack.model_copy(
            update={
                "acked_at": now,
                "seconds_taken": max(0.0, now - record.received_at),
                "detail": detail,
            }
        )
        await self._retry(lambda: self._acks.publish(final), until=FOREVER, what="publish ack")
        return await self._save(record.to(Phase.DONE, ack=final))

    async def _suspend(self, record: YieldRecord) -> str:
        """Suspend the command's job; "" when done, else a note for the ack."""
        command = record.command
        if not command.whole_job:
            # Surplus pods of an elastic job: the job runs on without them.
            return "surplus pods of an elastic job: the job keeps running"
        try:
            await self._retry(
                lambda: self._suspender.suspend(
                    command.job,
                    command_id=command.command_id,
                    reason=command.reason or f"yield {command.decision_id}",
                ),
                until=self._clock() + self._settings.release_timeout_s,
                what=f"suspend {command.job}",
            )
        except Exception as exc:
            log.error("command %s: suspend of %s failed: %s", command.command_id, command.job, exc)
            return f"suspend failed: {exc}"
        return ""

    async def _save(self, record: YieldRecord) -> YieldRecord:
        await self._retry(lambda: self._ledger.save(record), until=FOREVER, what="record")
        return record

    async def _retry(self, call: Callable[[], Awaitable[T]], *, until: float, what: str) -> T:
        """``call()`` until it succeeds; after ``until`` the last error is raised.

        ``JobGone`` is final: a missing job does not come back by retrying.
        """
        delay = self._settings.backoff_s
        while True:
            try:
                return await call()
            except JobGone:
                raise
            except Exception as exc:
                if self._clock() + delay > until:
                    raise
                log.warning("%s failed (%s); retrying in %.1f s", what, exc, delay)
                await self._sleep(delay)
                delay = min(delay * 2, self._settings.backoff_max_s)
