"""One yield's life as one value: issued, acknowledged (or expired), pods gone, forgotten.

A yield is one victim's eviction for one decision: one command per node it
holds pods on. Its record (``records.YieldRecord``) moves only through the
transitions below, each a pure function from the old value (and the time)
to the new one, so the decider never edits a yield's fields by hand:

- ``issue``: the commands went out; its pods count as *leaving*: they hold
  their GPUs, may not be evicted again, and its preemptor waits for them;
- ``acknowledge``: a node agent reported on one command. Applied whenever it
  comes, also after the command expired (a *late* ack: the agent was slow or
  partitioned, not gone), so a job that did yield is recorded as suspended
  and resumes later; a redelivered ack changes nothing;
- ``expire``: commands not acknowledged ``slack`` after their deadline are
  presumed lost (the agent hard-kills at the deadline; only a lost agent
  stays silent), which the decider reports;
- once every command is acknowledged or expired the yield is *settled*;
  ``observe_pods`` makes a settled yield *done* when the watch shows its pods
  gone (the ack and the deletion travel on different topics, in either
  order), or when ``leaving_limit_s`` has passed since it settled (the watch
  may have missed a deletion; a relist corrects the records either way);
- ``forgettable``: a done yield is kept ``retention_s`` more, to recognise
  redelivered and late acks, then deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpuyield.agents.controller.records import CommandRecord, YieldRecord
from gpuyield.schemas.messages import YieldCommand, YieldOutcome


class YieldPhase(StrEnum):
    ISSUED = "issued"  # some command not yet acknowledged nor expired
    SETTLED = "settled"  # every command ended; pods may still be on their nodes
    DONE = "done"  # pods gone (or presumed gone): the preemptor stops waiting


@dataclass(frozen=True, slots=True)
class Acked:
    """What one acknowledgement did."""

    value: YieldRecord
    command: CommandRecord
    late: bool  # the command had expired before the ack came


def issue(
    commands: Iterable[YieldCommand], *, preemptor: str | None, whole_job: bool
) -> YieldRecord:
    """The yield of one victim, made of its commands (one decision, one job, one per node)."""
    ordered = sorted(commands, key=lambda c: c.node)
    if not ordered:
        raise ValueError("a yield needs at least one command")
    first = ordered[0]
    return YieldRecord(
        decision=first.decision_id,
        preemptor=preemptor,
        job=first.job,
        whole_job=whole_job,
        grace_s=first.grace_s,
        issued_at=first.issued_at,
        deadline=max(c.deadline for c in ordered),
        commands=tuple(
            CommandRecord(command_id=c.command_id, node=c.node, pods=tuple(c.pods)) for c in ordered
        ),
    )


def phase(y: YieldRecord) -> YieldPhase:
    if y.done_at is not None:
        return YieldPhase.DONE
    if y.settled_at is not None:
        return YieldPhase.SETTLED
    return YieldPhase.ISSUED


def leaving_pods(y: YieldRecord) -> frozenset[str]:
    """Pods that still count as on their way out (every pod until the yield is done)."""
    if y.done_at is not None:
        return frozenset()
    return frozenset(p for c in y.commands for p in c.pods)


def _settle(y: YieldRecord, now: float) -> YieldRecord:
    if y.settled_at is None and all(c.status != "issued" for c in y.commands):
        return y.model_copy(update={"settled_at": now})
    return y


def acknowledge(y: YieldRecord, command_id: str, outcome: YieldOutcome, now: float) -> Acked | None:
    """Apply a node agent's report on ``command_id``; None when it changes nothing."""
    commands = list(y.commands)
    for i, command in enumerate(commands):
        if command.command_id != command_id:
            continue
        if command.status == "acked":
            return None  # redelivered: nothing changes twice
        acked = command.model_copy(
            update={"status": "acked", "outcome": outcome.value, "acked_at": now}
        )
        commands[i] = acked
        value = _settle(y.model_copy(update={"commands": tuple(commands)}), now)
        return Acked(value, acked, late=command.status == "expired")
    return None


def expire(
    y: YieldRecord, now: float, slack_s: float
) -> tuple[YieldRecord, tuple[CommandRecord, ...]]:
    """Commands unacknowledged ``slack_s`` past the yield's deadline become expired."""
    if now <= y.deadline + slack_s:
        return y, ()
    expired = tuple(c for c in y.commands if c.status == "issued")
    if not expired:
        return y, ()
    commands = tuple(
        c.model_copy(update={"status": "expired"}) if c.status == "issued" else c
        for c in y.commands
    )
    return _settle(y.model_copy(update={"commands": commands}), now), expired


def awaits_pods(y: YieldRecord) -> bool:
    """Whether the watch can end ``y`` (``observe_pods``): settled, and not done yet."""
    return y.settled_at is not None and y.done_at is None


def observe_pods(
    y: YieldRecord, pods_gone: bool, now: float, leaving_limit_s: float
) -> YieldRecord:
    """A settled yield is done once its pods are gone, or ``leaving_limit_s`` after it settled.

    ``y`` itself when nothing changes (so callers can tell by identity).
    """
    if y.settled_at is None or y.done_at is not None:  # not ``awaits_pods(y)``
        return y
    if pods_gone or now - y.settled_at > leaving_limit_s:
        return y.model_copy(update={"done_at": now})
    return y


def forgettable(y: YieldRecord, now: float, retention_s: float) -> bool:
    """A done yield older than ``retention_s`` is needed by no later decision."""
    return y.done_at is not None and now - y.done_at > retention_s


def nodes(y: YieldRecord) -> tuple[str, ...]:
    return tuple(sorted({c.node for c in y.commands}))
