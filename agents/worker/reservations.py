"""The decider's holds, made true on the cluster by the worker that owns the decider.

``enforce_reservations`` runs after each step of the decider, before its
messages are published: the holds of the step go to the API server first, so
a preemptor's nodes are tainted before any yield command frees their GPUs.
The first call after a start (the table is recovered by then: faust hands
the agent events only after recovery) and then one every
``reservation_reconcile_s`` reconcile the whole cluster with the table's
``reservation/`` records instead, which tolerates the pods Volcano created
since and removes the taints of holds nobody holds any more, such as those
an owner that crashed left behind.

A failed call is logged and becomes a ``reservation-failed`` alert, and the
step's commands are published all the same. Withholding them would not make
the hold any safer (the next reconcile retries it) but would stall every
decision while the API server is down; and the hold is still honoured inside
gpuyield, whose later plans treat the GPUs as taken. The worst case is the
one before enforcement existed: another pending job may take the GPUs first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuyield.agents.controller.decider import derive_id
from gpuyield.agents.controller.records import RESERVATION, KeyIndex
from gpuyield.schemas.messages import Alert, AlertKind, Reservation
from gpuyield.streams.kube_reservations import Hold, ReservationEnforcer, ReservationError

log = logging.getLogger(__name__)


@dataclass
class ReservationSync:
    """One worker's enforcer and when it last reconciled (None: not since it started)."""

    enforcer: ReservationEnforcer | None
    reconcile_every_s: float = 30.0
    last_reconcile: float | None = None


def holds_of(records: Mapping[str, Any], index: KeyIndex | None = None) -> list[Hold]:
    """The active holds in the decider's table (``reservation/<job>`` records).

    With the decider's ``index`` of the table, only the reservation keys are
    read (from its sorted keys); without it, every record is walked: at
    10,000 nodes some 200,000, on each reconcile, while the decider waits.
    """
    holds: list[Hold] = []
    if index is None:
        found: Iterable[tuple[str, Any]] = records.items()
    else:
        found = ((key, records.get(key)) for key in index.sorted_keys(RESERVATION))
    for key, record in found:
        if not key.startswith(RESERVATION) or not isinstance(record, Mapping):
            continue
        try:
            holds.append(
                Hold(key[len(RESERVATION) :], frozenset(record["nodes"]), float(record["until"]))
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("skipping unreadable reservation record %s: %s", key, exc)
    return holds


async def enforce_reservations(
    sync: ReservationSync,
    records: Mapping[str, Any],
    reservations: Sequence[Reservation],
    now: float,
    index: KeyIndex | None = None,
) -> list[Alert]:
    """Apply one step's holds (or reconcile, when due); alerts for what failed.

    ``index``: the decider's index of ``records``, with this step's writes applied.
    """
    enforcer = sync.enforcer
    if enforcer is None:
        return []
    if sync.last_reconcile is None or now - sync.last_reconcile >= sync.reconcile_every_s:
        first = sync.last_reconcile is None
        sync.last_reconcile = now
        holds = holds_of(records, index)  # already holds this step's writes
        try:
            # The first reconcile after a start lists every node, not just the labelled
            # ones: a taint with our key but no label (written by hand) is found too.
            await asyncio.to_thread(enforcer.reconcile, holds, every_node=first)
        except ReservationError as exc:
            log.error("could not reconcile the reservations: %s", exc)
            bucket = str(int(now // sync.reconcile_every_s))
            return [
                Alert(
                    alert_id=derive_id("reservation-reconcile-failed", bucket),
                    kind=AlertKind.RESERVATION_FAILED,
                    message=f"could not reconcile the reservations on the cluster: {exc}",
                    raised_at=now,
                    details={"holds": sorted(h.job for h in holds), "error": str(exc)},
                )
            ]
        return []
    alerts: list[Alert] = []
    for reservation in reservations:
        try:
            await asyncio.to_thread(enforcer.enforce, reservation)
        except ReservationError as exc:
            log.error("could not %s %s: %s", _verb(reservation), reservation.job, exc)
            alerts.append(
                Alert(
                    alert_id=derive_id(
                        "reservation-failed",
                        reservation.job,
                        reservation.state.value,
                        reservation.decision_id,
                        repr(reservation.at),
                    ),
                    kind=AlertKind.RESERVATION_FAILED,
                    job=reservation.job,
                    message=(
                        f"could not {_verb(reservation)} {reservation.job} on "
                        f"{', '.join(sorted(reservation.nodes)) or 'its nodes'}: {exc}; "
                        "retried at the next reconcile"
                    ),
                    raised_at=now,
                    details={
                        "state": reservation.state.value,
                        "nodes": dict(reservation.nodes),
                        "decision_id": reservation.decision_id,
                        "error": str(exc),
                    },
                )
            )
    return alerts


def _verb(reservation: Reservation) -> str:
    return "hold the GPUs for" if reservation.state.value == "held" else "release the hold of"
