"""What the node agent writes down about one command, so it runs once and survives a crash.

One record per command id, stored as JSON in Redis (see ``ledger``). The
phases, in order::

    received    claimed: the command is durably ours (its Kafka offset may now be committed)
    signalling  about to signal: the signal time and the checkpoint baseline are fixed here,
                before any signal is sent, so a restart that re-signals still judges the
                checkpoint against the first signal
    signalled   the signaller accepted the signal; now waiting for a checkpoint or an exit
    releasing   the outcome is known and the ack is built; suspending the job, then acking
    done        the ack is on the topic; nothing left to do

A restart resumes each record from its phase: ``received``/``signalling``
signal (again), ``signalled`` waits out what is left of the deadline,
``releasing`` suspends (idempotently) and publishes the stored ack.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuyield.schemas.messages import YieldAck, YieldCommand


class Phase(StrEnum):
    RECEIVED = "received"
    SIGNALLING = "signalling"
    SIGNALLED = "signalled"
    RELEASING = "releasing"
    DONE = "done"


class YieldRecord(BaseModel):
    """One command's progress through the agent; frozen, replaced at each phase."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = 1
    command: YieldCommand
    phase: Phase = Phase.RECEIVED
    received_at: float
    signalled_at: float | None = None
    baseline_checkpoint_step: int | None = Field(
        None, description="The job's last checkpoint step known just before the signal."
    )
    gpus: int = Field(0, ge=0, description="GPUs the signalled pods hold (for the lost work).")
    ack: YieldAck | None = None

    @property
    def command_id(self) -> str:
        return self.command.command_id

    @property
    def in_flight(self) -> bool:
        return self.phase is not Phase.DONE

    def to(self, phase: Phase, **changes: object) -> YieldRecord:
        """This record moved on to ``phase`` (with other fields changed too)."""
        return self.model_copy(update={"phase": phase, **changes})
