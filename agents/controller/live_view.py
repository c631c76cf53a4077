"""The live view: what an operator asks of the controller right now.

A projection of the decider's records (jobs with their effective weights and
cooldowns, pending demands, yields in flight, nominations, recent alerts) as
one JSON document. The worker stores it in Redis for ``gpuyield status`` and
dashboards; being derived, it can always be rebuilt from the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuyield.agents.controller import aborted, cluster
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import (
    ALERT,
    DEMAND,
    EVICTIONS,
    PROGRESS,
    RESERVATION,
    SUSPENDED,
    YIELD,
    AlertRecord,
    DemandRecord,
    EvictionsRecord,
    Overlay,
    ProgressRecord,
    Record,
    ReservationRecord,
    YieldRecord,
)
from gpuyield.agents.planner import effective_weight
from gpuyield.schemas import Job, JobState

RECENT_ALERTS = 20


def live_view(
    records: Mapping[str, Record],
    config: ControllerConfig,
    now: float,
    *,
    index: RecordIndex | None = None,
) -> dict[str, Any]:
    """The live view of ``records``; with their ``index`` (the worker's), its job views
    and sorted keys are read instead of rebuilt."""
    view = Overlay(records, {}, index)
    policy = config.policy
    jobs = []
    views = index.views() if index is not None else cluster.jobs(view, config)
    for job in views.values():
        record = view.typed(PROGRESS + job.name, ProgressRecord)
        progress = record.dump() if record else {}
        evicted = view.typed(EVICTIONS + job.name, EvictionsRecord)
        evictions = [
            e for e in (evicted.at if evicted else ()) if 0 <= now - e <= policy.eviction_window_s
        ]
        model = Job(
            name=job.name,
            queue=job.queue,
            priority=job.priority,
            state=job.state,
            pods=job.pods,
            started_at=job.started_at,
            progress=progress.get("progress", 0.0),
        )
        cooldown_until = (
            job.started_at + policy.cooldown_s
            if job.started_at is not None and job.state is JobState.RUNNING
            else None
        )
        jobs.append(
            {
                "job": job.name,
                "queue": job.queue,
                "state": job.state.value,
                "priority": job.priority,
                "w_eff": round(effective_weight(model, now, policy), 3),
                "gpus": sum(p.gpus for p in job.pods if p.node is not None),
                "wanted_gpus": sum(p.gpus for p in job.pods),
                "progress": progress.get("progress", 0.0),
                "step": progress.get("step"),
                "step_rate": progress.get("step_rate"),
                "last_checkpoint_at": progress.get("last_checkpoint_at"),
                "checkpoint_interval_s": progress.get("checkpoint_interval_s"),
                "evictions": len(evictions),
                "cooldown_until": cooldown_until
                if cooldown_until is not None and cooldown_until > now
                else None,
                "suspended": SUSPENDED + job.name in view,
                "leaving_gpus": sum(p.gpus for p in job.leaving),
            }
        )
    demands = [
        {"job": job, **record.dump()} for job, record in view.typed_prefix(DEMAND, DemandRecord)
    ]
    yields = [
        {
            "command_id": command.command_id,
            "decision_id": y.decision,
            "preemptor": y.preemptor,
            "job": y.job,
            "node": command.node,
            "pods": list(command.pods),
            "whole_job": y.whole_job,
            "grace_s": y.grace_s,
            "deadline": y.deadline,
            "status": command.status,
        }
        for _, y in view.typed_prefix(YIELD, YieldRecord)
        for command in y.commands
        if command.status == "issued"
    ]
    reservations = [
        {"job": job, **record.dump()}
        for job, record in view.typed_prefix(RESERVATION, ReservationRecord)
        if record.until > now
    ]
    alerts = sorted(
        (
            {"alert_id": alert_id, **record.dump()}
            for alert_id, record in view.typed_prefix(ALERT, AlertRecord)
        ),
        key=lambda a: a["raised_at"],
    )[-RECENT_ALERTS:]
    aborted_outside = [  # issue 9: aborted by someone else (adopted: gpuyield will resume it)
        {"job": j.name, "phase": j.phase, "queue": j.queue, "adopted": j.adopted}
        for j in aborted.outside_gpuyield(view)
    ]
    return {
        "updated_at": now,
        "jobs": jobs,
        "demands": demands,
        "yields_in_flight": yields,
        "reservations": reservations,
        "recent_alerts": alerts,
        "aborted_outside": aborted_outside,
    }
