"""``volcano-evicting``: a scheduler evicting pods beside gpuyield, seen from the watch.

The worker's start-up check reads Volcano's configuration once; this reads
what Volcano *does*. Volcano's scheduler evicts (``preempt``, ``reclaim``,
``shuffle``; the gang forms too) through one function, its cache's
``defaultEvictor.Evict``, which before its plain DELETE writes the victim's
status in one update:

- condition ``Ready`` = ``False``, reason ``Evict``, message ``Pod is evicted,
  because of <action>`` (every Volcano release since 2019);
- condition ``DisruptionTarget`` = ``True``, reason ``PreemptionByScheduler``,
  message ``<scheduler>: preempting to accommodate a higher priority pod``
  (Volcano 1.13 and later, and kube-scheduler's own preemption).

gpuyield never writes either: its node agents evict through the Eviction API
(``DisruptionTarget`` reason ``EvictionByEvictionAPI``) or abort the Volcano
Job (the job controller deletes the pods, unmarked). So a pod carrying one of
these marks was evicted by a scheduler gpuyield did not command; no
correlation with gpuyield's yields (which races the watch) is needed. The
kubelet rewrites ``Ready`` once it stops the containers, so that mark may be
seen only on the one MODIFIED event the watch delivers between the two
writes; ``DisruptionTarget`` stays until the pod is gone. Volcano's ``Evict``
Events are not used: gpuyield does not watch Events, and the API server may
drop or merge them.

``kube_facts.eviction_mark`` reads the marks into ``PodRecord.evicted``. A pod
counts once: when the watch first shows it marked (a DELETED object is looked
at too, in case the MODIFIED one was missed). The first one opens an
incident (alert ``volcano-evicting``, critical); the incident lasts while
more follow and is resolved once none has been seen for
``volcano_evicting_quiet_s`` (``incidents.ended``; the alert's subject is the
incident's start, so an incident that follows a quiet one cannot keep it
open). The evidence is evictions, so their absence for that long is the
condition read backwards: there is no other way to see that someone turned
Volcano's preempt off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuyield.agents.controller.incidents import Finding
from gpuyield.agents.controller.kube_facts import eviction_mark
from gpuyield.agents.controller.records import PodRecord, SchedulerEviction, VolcanoEvictingRecord
from gpuyield.schemas.messages import AlertKind

JOBS_KEPT = 10
"""Jobs an incident names (the first ones): a reclaim storm must not grow the record."""


def on_pod(
    previous: PodRecord | None,
    current: PodRecord | None,
    name: str,
    incident: VolcanoEvictingRecord | None,
    now: float,
    quiet_s: float,
) -> tuple[VolcanoEvictingRecord, Finding | None] | None:
    """What a pod event changes: None unless it is the first to show the pod evicted by a
    scheduler; else the incident's record, and the alert to raise when the eviction opens
    a new incident (none open, or the last one went quiet)."""
    if current is None or current.evicted is None:
        return None
    if previous is not None and previous.evicted is not None:
        return None  # counted when it was first seen marked
    mark = current.evicted
    job = f"{current.namespace}/{current.job or name}"
    if incident is None or now - incident.last_at >= quiet_s:
        opened = VolcanoEvictingRecord(
            since=now,
            last_at=now,
            pods=1,
            jobs=(job,),
            actions=(mark.action,),
            schedulers=(mark.scheduler,),
        )
        return opened, _finding(opened, current, name, mark)
    jobs = incident.jobs
    if job not in jobs and len(jobs) < JOBS_KEPT:
        jobs = (*jobs, job)
    grown = incident.model_copy(
        update={
            "last_at": now,
            "pods": incident.pods + 1,
            "jobs": jobs,
            "actions": _with(incident.actions, mark.action),
            "schedulers": _with(incident.schedulers, mark.scheduler),
        }
    )
    return grown, None


def deleted(previous: PodRecord | None, pod: Mapping[str, Any]) -> PodRecord | None:
    """The pod as its DELETED event shows it: its last record with the object's eviction
    mark (the MODIFIED event that carried it may have been missed); None if never seen."""
    if previous is None or previous.evicted is not None:
        return previous
    mark = eviction_mark(pod)
    if mark is None:
        return previous
    return previous.model_copy(update={"evicted": SchedulerEviction.model_validate(mark)})


def _with(values: tuple[str, ...], value: str) -> tuple[str, ...]:
    return values if value in values else tuple(sorted((*values, value)))


def _finding(
    incident: VolcanoEvictingRecord, pod: PodRecord, name: str, mark: SchedulerEviction
) -> Finding:
    job = incident.jobs[0]
    return Finding(
        base_id_parts=("volcano-evicting", str(incident.since)),
        kind=AlertKind.VOLCANO_EVICTING,
        subject=(str(incident.since),),
        job=job,
        message=(
            f"{mark.scheduler} evicted pod {pod.namespace}/{name} of {job} ({mark.action}) "
            "without gpuyield: no checkpoint was asked for and gpuyield's limits do not "
            "bound it; turn Volcano's preempt and reclaim off"
        ),
        severity="critical",
        details={
            "scheduler": mark.scheduler,
            "action": mark.action,
            "pod": f"{pod.namespace}/{name}",
            "node": pod.node,
            "gpus": pod.gpus,
        },
    )
