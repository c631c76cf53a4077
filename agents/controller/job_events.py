"""Kubernetes' own record of a decision: ``events.k8s.io/v1`` Events on the Volcano Jobs.

``kubectl describe vcjob NAME`` shows the events whose ``regarding`` is the
job (by namespace, name and uid), the way Kueue's ``Preempted`` condition
says why a workload was evicted. For each decision that acted, this builds:

- ``GracefulYield`` on each victim, naming the preemptor and the rule that
  chose it (its reason, W_eff and the work it loses);
- ``Spared`` on each candidate the plan weighed and kept, with the rule (or
  that a cheaper plan existed);
- ``Resumed`` on a job that resumes, and the node it was sent to.

Pure: decisions in, Event objects out; ``uid_of`` reads the job's uid where
the caller keeps it (the decider's records). Names derive from the decision
and the job, so a decision processed twice makes the same Events, and the
second create is a harmless 409 AlreadyExists. Notes are cut to the API's
1 kB. The worker writes them (``agents/worker/job_events.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from gpuyield.agents.controller.audit import considered
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
    decisions: Iterable[Decision], uid_of: Callable[[str], str | None], instance: str
) -> list[Object]:
    """The Events of the decisions that acted (a yield or a resume); other rounds make none."""
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
        seen = {decision.demand}
        for candidate in decision.plan.candidates:
            job = candidate.job
            found = considered(decision, job)
            if found is None or job in seen or found.role not in ("victim", "spared"):
                continue
            seen.add(job)
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
            events.append(
                job_event(
                    decision,
                    job,
                    reason,
                    action,
                    note,
                    uid_of=uid_of,
                    instance=instance,
                    related=decision.demand,
                )
            )
        for victim in decision.plan.victims:  # a victim that was no candidate (never, but safe)
            if victim.job not in seen:
                seen.add(victim.job)
                events.append(
                    job_event(
                        decision,
                        victim.job,
                        GRACEFUL_YIELD,
                        "Preempt",
                        f"yields to {decision.demand} (preemptor); rule: {victim.reason}; "
                        f"W_eff {victim.w_eff:.3f}, {victim.lost_gpu_seconds:.0f} GPU-seconds "
                        f"lost (decision {decision.decision_id})",
                        uid_of=uid_of,
                        instance=instance,
                        related=decision.demand,
                    )
                )
    return events
