"""The node agent's loop: read commands, record each durably, commit, carry it out once.

Order of things for one command (at-least-once delivery, exactly-once effect):

1. decode; bytes that are no ``YieldCommand`` go to the dead-letter topic
   (and the agent carries on); commands for other nodes are skipped;
2. claim it in the ledger (Redis): new, or the record of an earlier delivery;
3. commit the Kafka offset: the command is durably ours from step 2 on;
4. carry it out in its own task, unless it is done (a redelivery re-publishes
   nothing: its ack went out before the record was marked done, and acks are
   idempotent by command id downstream anyway) or already running here.

Yields of one job run one after another in arrival order (a resume waits for
the yield before it); yields of different jobs run side by side, so one
trainer's two-minute grace period does not delay another job's yield.

On start the agent first takes up the yields it had in flight (found in the
ledger) and only then reads new commands: each recovered yield holds its
job's turn, so a redelivered copy or a later command for the same job waits
behind it. Recovered yields of other jobs run alongside new commands rather
than before them, for the same reason as above.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gpuyield.agents.node.clock import Clock, Sleep, system_clock, system_sleep
from gpuyield.agents.node.executor import YieldExecutor
from gpuyield.agents.node.ledger import Ledger
from gpuyield.agents.node.records import Phase, YieldRecord
from gpuyield.schemas.messages import DeadLetter, YieldCommand
from gpuyield.streams.dead_letters import RecordLike, decode_or_dead_letter

log = logging.getLogger(__name__)

DeadLetterSink = Callable[[DeadLetter], Awaitable[Any]]


class NodeAgent:
    """Turns consumed command records into executed, acknowledged yields for one node."""

    def __init__(
        self,
        node: str,
        *,
        ledger: Ledger,
        executor: YieldExecutor,
        dead_letters: DeadLetterSink,
        clock: Clock = system_clock,
        sleep: Sleep = system_sleep,
        retry_s: float = 1.0,
    ) -> None:
        self.node = node
        self._ledger = ledger
        self._executor = executor
        self._dead_letters = dead_letters
        self._clock = clock
        self._sleep = sleep
        self._retry_s = retry_s
        self._tasks: dict[str, asyncio.Task[YieldRecord]] = {}
        self._job_turns: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, YieldRecord] = {}  # started, not finished (job turns' users)
        self.finished: list[YieldRecord] = []  # records this process took to done (for tests)

    @property
    def running(self) -> frozenset[str]:
        return frozenset(self._tasks)

    async def recover(self) -> list[YieldRecord]:
        """Take up every yield left in flight by an earlier process; returns their records."""
        records = await self._ledger.in_flight()
        for record in records:
            log.warning(
                "command %s (%s, %s) was in flight at %s: taking it up",
                record.command_id,
                record.command.job,
                record.command.action.value,
                record.phase.value,
            )
            self._start(record)
        return records

    async def handle(self, message: RecordLike) -> None:
        """One consumed record, made durable (claimed or dead-lettered) before this returns.

        Raises only when Redis or the broker fails; the caller must then not
        commit the offset (and should read the record again).
        """
        decoded = decode_or_dead_letter(YieldCommand, message, self._clock())
        if isinstance(decoded, DeadLetter):
            await self._dead_letters(decoded)
            return
        if decoded.node != self.node:
            log.debug("command %s is for node %s: skipped", decoded.command_id, decoded.node)
            return
        await self.accept(decoded)

    async def accept(self, command: YieldCommand) -> YieldRecord:
        """Claim ``command`` and start it unless it is done or already running."""
        record, new = await self._ledger.claim(command, self._clock())
        if new:
            log.info(
                "command %s: %s %s on %s (deadline in %.0f s)",
                command.command_id,
                command.action.value,
                command.job,
                command.node,
                command.deadline - self._clock(),
            )
        elif record.phase is Phase.DONE:
            log.info("command %s redelivered: already done, nothing to do", command.command_id)
            return record
        elif command.command_id in self._tasks:
            log.info("command %s redelivered: already running", command.command_id)
            return record
        else:
            log.warning(
                "command %s redelivered at %s and not running: taking it up",
                command.command_id,
                record.phase.value,
            )
        self._start(record)
        return record

    def _start(self, record: YieldRecord) -> None:
        if record.command_id in self._tasks:
            return
        turn = self._job_turns.setdefault(record.command.job, asyncio.Lock())
        task = asyncio.create_task(
            self._run(record, turn), name=f"gpuyield-yield-{record.command_id}"
        )
        self._tasks[record.command_id] = task
        self._queued[record.command_id] = record

    async def _run(self, record: YieldRecord, turn: asyncio.Lock) -> YieldRecord:
        try:
            async with turn:
                final = await self._executor.run(record)
            self.finished.append(final)
            return final
        except asyncio.CancelledError:
            log.info("command %s: stopped at shutdown; a restart takes it up", record.command_id)
            raise
        except Exception:
            log.exception(
                "command %s failed unexpectedly; it stays in flight for the next start",
                record.command_id,
            )
            raise
        finally:
            self._tasks.pop(record.command_id, None)
            self._queued.pop(record.command_id, None)
            job = record.command.job
            if job not in {r.command.job for r in self._queued.values()}:
                self._job_turns.pop(job, None)  # nobody waits for this job's turn

    async def wait_idle(self) -> None:
        """Until no command is running (tests, and a graceful drain)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop the running yields; their records stay in flight for the next start."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
