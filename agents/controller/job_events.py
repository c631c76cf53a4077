"""Kubernetes' own record of a decision: ``events.k8s.io/v1`` Events on the Volcano Jobs.

``kubectl describe vcjob NAME`` shows the events whose ``regarding`` is the
job (by namespace, name and uid), the way Kueue's ``Preempted`` condition
says why a workload was evicted. For each decision that acted, this builds:

- ``GracefulYield`` on each victim, naming the preemptor and the rule that
  chose it (its reason, W_eff and the work it loses);
- ``Spared`` on the candidates the plan weighed and kept that it came
  closest to taking (at most ``spared_limit``, by default ``SPARED_EVENTS``),
  with the rule (or that a cheaper plan existed);
- ``Resumed`` on a job that resumes, and the node it was sent to.

Pure: decisions in, Event objects out; ``uid_of`` reads the job's uid where
the caller keeps it (the decider's records). Names derive from the decision
and the job, so a decision processed twice makes the same Events, and the
second create is a harmless 409 AlreadyExists. Notes are cut to the API's
1 kB. The worker writes them (``agents/worker/job_events.py``).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from gpuyield.agents.controller.audit import (
    Considered,
    candidate_considered,
    victim_considered,
)
from gpuyield.schemas.config import SPARED_EVENTS
from gpuyield.schemas.messages import Decision, RoundOutcome

Object = dict[str, Any]

REPORTING_CONTROLLER = "gpuyield.io/worker"
GRACEFUL_YIELD = "GracefulYield"
SPARED = "Spared"
RESUMED = "Resumed"
NOTE_LIMIT = 1024
VOLCANO_JOBS = "batch.volcano.sh/v1alpha1"


def micro_time(at: float) -> str:
    """A ``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _note(text: str) -> str:
    raw = text.encode()
    if len(raw) <= NOTE_LIMIT:
        return text
    return raw[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."


def _reference(job: str, uid: str | None) -> Object:
    namespace, _, name = job.partition("/")
    reference: Object = {
        "apiVersion": VOLCANO_JOBS,
        "kind": "Job",
        "namespace": namespace,
        "name": name,
    }
    if uid:
        reference["uid"] = uid
    return reference


def job_event(
    decision: Decision,
    job: str,
    reason: str,
    action: str,
    note: str,
    *,
    uid_of: Callable[[str], str | None],
    instance: str,
    related: str | None = None,
) -> Object:
    """One Event on ``job``'s Volcano Job about ``decision``."""
    namespace, _, name = job.partition("/")
    digest = hashlib.sha256(f"{decision.decision_id}/{job}/{reason}".encode()).hexdigest()[:16]
    event: Object = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name[:200]}.{digest}", "namespace": namespace},
        "eventTime": micro_time(decision.decided_at),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": action,
        "reason": reason,
        "type": "Normal",
        "note": _note(note),
        "regarding": _reference(job, uid_of(job)),
    }
    if related is not None:
        event["related"] = _reference(related, uid_of(related))
    return event


def decision_events(
    decisions: Iterable[Decision],
    uid_of: Callable[[str], str | None],
    instance: str,
    *,
    spared_limit: int = SPARED_EVENTS,
) -> list[Object]:
    """The Events of the decisions that acted (a yield or a resume); other rounds make none.

    Each victim gets its ``GracefulYield``; of the candidates the plan weighed
    and kept, only the ``spared_limit`` it came closest to taking get a
    ``Spared`` (``closest_spared``): a plan at 1,000 nodes keeps some 2,000
    eligible jobs, and an Event on each was as many API calls per decision,
    made while the decider waited. The decision record keeps every
    candidate's verdicts, and ``gpuyield audit JOB`` reads any job's from it.
    One pass over the candidates, in the plan's order (by job name).
    """
    events: list[Object] = []
    for decision in decisions:
        if decision.plan is None or not decision.commands:
            continue
        if decision.outcome is RoundOutcome.RESUME or (
            decision.outcome is None and not decision.plan.victims
        ):
            node = min(decision.plan.placement.values(), default="?")
            events.append(
                job_event(
                    decision,
                    decision.demand,
                    RESUMED,
                    "Resume",
                    f"resumed by gpuyield from its last checkpoint (on {node}): "
                    f"{decision.reason or 'it fits again without evicting anyone'} "
                    f"(decision {decision.decision_id})",
                    uid_of=uid_of,
                    instance=instance,
                )
            )
            continue
        victims = {v.job: v for v in decision.plan.victims}
        spared = closest_spared(decision, spared_limit)
        seen = {decision.demand}
        for candidate in decision.plan.candidates:
            job = candidate.job
            if job in seen:
                continue
            victim = victims.get(job)
            if victim is not None:
                found = victim_considered(decision, victim)
            elif job in spared:
                found = candidate_considered(decision, candidate)
            else:
                continue
            seen.add(job)
            events.append(_considered_event(decision, job, found, uid_of, instance))
        for victim in decision.plan.victims:  # a victim that was no candidate (never, but safe)
            if victim.job not in seen:
                seen.add(victim.job)
                found = victim_considered(decision, victim)
                events.append(_considered_event(decision, victim.job, found, uid_of, instance))
    return events


def closest_spared(decision: Decision, limit: int) -> frozenset[str]:
    """The ``limit`` spared candidates the plan came closest to taking.

    Spared: eligible, not taken, not the demand. Closest by the planner's
    own objective: unprotected before protected, then the least work the
    whole job would lose, then the name (so the choice is deterministic).
    """
    plan = decision.plan
    if plan is None or limit <= 0:
        return frozenset()
    taken = {v.job for v in plan.victims}
    kept = (
        c
        for c in plan.candidates
        if c.outcome != "ineligible" and c.job not in taken and c.job != decision.demand
    )
    closest = heapq.nsmallest(limit, kept, key=lambda c: (c.protected, c.lost_gpu_seconds, c.job))
    return frozenset(c.job for c in closest)


def _considered_event(
    decision: Decision,
    job: str,
    found: Considered,
    uid_of: Callable[[str], str | None],
    instance: str,
) -> Object:
    lost = found.lost_gpu_seconds or 0.0
    w_eff = found.w_eff if found.w_eff is not None else 0.0
    if found.role == "victim":
        reason, action = GRACEFUL_YIELD, "Preempt"
        note = (
            f"yields to {decision.demand} (preemptor); rule: {found.rule}; "
            f"W_eff {w_eff:.3f}, {lost:.0f} GPU-seconds lost; it checkpoints, is "
            f"suspended and resumes later (decision {decision.decision_id})"
        )
    else:
        reason, action = SPARED, "Spare"
        note = (
            f"spared when {decision.demand} (preemptor) needed GPUs; rule: "
            f"{found.rule}; W_eff {w_eff:.3f}, {lost:.0f} GPU-seconds it would have "
            f"lost (decision {decision.decision_id})"
        )
    return job_event(
        decision,
        job,
        reason,
        action,
        note,
        uid_of=uid_of,
        instance=instance,
        related=decision.demand,
    )
