"""``gpuyield doctor``: the configuration mistakes of seed 003, found in a cluster dump.

Pure: a list of Kubernetes objects (``kubectl get nodes,pods,queues,podgroups,vcjob
-A -o json``'s items, and optionally Volcano's scheduler ConfigMap) in, findings
out. The objects become the decider's own records (``decider.watched_record``),
so what doctor finds is what the live controller reads, and where a live alert
exists the same function decides both: ``queue_capability.check``
(queue-misconfigured), ``deadlock.resolve`` (gang-deadlock),
``volcano_conf.check_scheduler_conf`` (volcano-preempting) and
``kube_facts.eviction_mark`` (volcano-evicting: a pod caught being evicted).

Each check has a stable id (``CHECKS``), documented in README.md's doctor
section; a finding names the object, what is wrong and how to fix it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuyield.agents.controller import cluster, deadlock, queue_capability, volcano_conf
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import InputRejected, watched_record
from gpuyield.agents.controller.kube_facts import pod_gpus
from gpuyield.agents.controller.records import (
    NODE,
    POD,
    QUEUE,
    NodeRecord,
    Overlay,
    PodRecord,
    QueueRecord,
    Record,
)
from gpuyield.schemas import JobState
from gpuyield.schemas.kube_objects import KINDS, event

Severity = Literal["info", "warning", "critical"]

CHECKS: dict[str, Severity] = {
    "queue-capability-missing-gpu": "critical",
    "queue-guarantee-exceeds-capability": "warning",
    "queue-guarantees-exceed-cluster": "warning",
    "gang-deadlock": "critical",
    "restart-on-eviction": "critical",
    "max-retry-too-low": "warning",
    "scheduler-name-missing": "critical",
    "fragmented-free-gpus": "warning",
    "volcano-preempt-enabled": "critical",
    "grace-too-short": "warning",
    "unreadable-object": "warning",
}
"""Every check id and its severity: the ids are stable (scripts match on them)."""

VOLCANO_JOBS = "batch.volcano.sh/"
SCHEDULER_CONF_KEY = "volcano-scheduler.conf"


class DoctorFinding(BaseModel):
    """One thing wrong: which check, how bad, where, what, and the fix."""

    model_config = ConfigDict(frozen=True)

    check: str
    severity: Severity
    object: str
    message: str
    fix: str


@dataclass(frozen=True, slots=True)
class Dump:
    """The objects of a dump, sorted out, and the decider's records of the watched ones."""

    records: Overlay
    jobs: Mapping[str, cluster.JobView]
    volcano_jobs: tuple[Mapping[str, Any], ...]
    pods: tuple[Mapping[str, Any], ...]
    scheduler_confs: tuple[tuple[str, str], ...]
    unreadable: tuple[DoctorFinding, ...]


def _finding(check: str, obj: str, message: str, fix: str) -> DoctorFinding:
    return DoctorFinding(check=check, severity=CHECKS[check], object=obj, message=message, fix=fix)


def read_dump(objects: Iterable[Mapping[str, Any]], config: ControllerConfig, now: float) -> Dump:
    """Sort ``objects`` out; an object the controller cannot read is a finding, not an error."""
    writes: dict[str, Record] = {}
    volcano_jobs, pods, confs, unreadable = [], [], [], []
    for obj in objects:
        kind = obj.get("kind")
        name = _name(obj)
        if kind == "ConfigMap":
            text = (obj.get("data") or {}).get(SCHEDULER_CONF_KEY)
            if text is not None:
                confs.append((f"ConfigMap/{name}", str(text)))
            continue
        if kind == "Job" and not str(obj.get("apiVersion", "")).startswith(VOLCANO_JOBS):
            continue  # a batch/v1 Job: not Volcano's
        if kind not in KINDS:
            continue
        try:
            key, record = watched_record(event(dict(obj), now), config)
        except (InputRejected, KeyError, TypeError) as exc:
            unreadable.append(
                _finding(
                    "unreadable-object",
                    f"{kind}/{name}",
                    f"gpuyield cannot read it: {exc}",
                    "fix the object (the message names the field); the controller skips it",
                )
            )
            continue
        writes[key] = record.dump()
        if kind == "Job":
            volcano_jobs.append(obj)
        elif kind == "Pod":
            pods.append(obj)
    records = Overlay({}, writes)
    return Dump(
        records=records,
        jobs=cluster.jobs(records, config),
        volcano_jobs=tuple(volcano_jobs),
        pods=tuple(pods),
        scheduler_confs=tuple(confs),
        unreadable=tuple(unreadable),
    )


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def diagnose(
    objects: Iterable[Mapping[str, Any]],
    config: ControllerConfig,
    now: float,
    scheduler_conf: str | None = None,
    scheduler_conf_from: str = "--scheduler-conf",
) -> list[DoctorFinding]:
    """Every finding, most severe first, then by check and object.

    ``scheduler_conf`` is Volcano's scheduler configuration given apart from the
    objects (a file, or the live cluster's ConfigMap), ``scheduler_conf_from``
    where it came from (a finding's object)."""
    dump = read_dump(objects, config, now)
    confs = list(dump.scheduler_confs)
    if scheduler_conf is not None:
        confs.append((scheduler_conf_from, scheduler_conf))
    found = [
        *dump.unreadable,
        *queue_findings(dump, config),
        *gang_findings(dump, config, now),
        *job_policy_findings(dump.volcano_jobs, config),
        *pod_findings(dump.pods, config),
        *fragmentation_findings(dump),
        *scheduler_findings(confs),
        *eviction_findings(dump.records),
    ]
    order = {"critical": 0, "warning": 1, "info": 2}
    return sorted(found, key=lambda f: (order[f.severity], f.check, f.object))


# -- queues ---------------------------------------------------------------------------


def _queues(records: Overlay) -> dict[str, QueueRecord]:
    return dict(records.typed_prefix(QUEUE, QueueRecord))


def cluster_gpus(records: Overlay) -> int:
    return sum(node.gpus for _, node in records.typed_prefix(NODE, NodeRecord))


def queue_findings(dump: Dump, config: ControllerConfig) -> Iterator[DoctorFinding]:
    records = dump.records
    for found in queue_capability.check(records, dump.jobs.values(), config):
        yield _finding(
            "queue-capability-missing-gpu",
            f"Queue/{found.queue}",
            found.message.split(" Fix: ")[0],
            f"add nvidia.com/gpu to spec.capability: kubectl patch queue {found.queue} "
            '--type merge -p \'{"spec":{"capability":{"nvidia.com/gpu":"<GPUs>"}}}\'',
        )
    queues = _queues(records)
    for name, queue in sorted(queues.items()):
        if queue.capability is not None and queue.guarantee > queue.capability:
            yield _finding(
                "queue-guarantee-exceeds-capability",
                f"Queue/{name}",
                f"guarantees {queue.guarantee} GPUs but its capability is {queue.capability}: "
                "Volcano never gives it what it guarantees",
                "lower spec.guarantee.resource's nvidia.com/gpu to at most the capability",
            )
    total = cluster_gpus(records)
    guaranteed = sum(q.guarantee for q in queues.values())
    if queues and guaranteed > total:
        yield _finding(
            "queue-guarantees-exceed-cluster",
            "Queues",
            f"the queues guarantee {guaranteed} GPUs together, the cluster has {total}: "
            "reclaim can never satisfy them all, and jobs are evicted back and forth",
            "lower the guarantees until they add up to at most the cluster's GPUs",
        )


# -- gangs ----------------------------------------------------------------------------


def _free_by_node(dump: Dump) -> dict[str, int]:
    free = {name: node.gpus for name, node in dump.records.typed_prefix(NODE, NodeRecord)}
    for view in dump.jobs.values():
        for pod in (*view.pods, *view.leaving):
            if pod.node in free:
                free[pod.node] -= pod.gpus
    return {node: max(0, gpus) for node, gpus in free.items()}


def _gang_need(view: cluster.JobView) -> int:
    gang_min = len(view.pods) if view.min_available is None else view.min_available
    sizes = sorted((p.gpus for p in view.pods), reverse=True)
    return sum(sizes[:gang_min])


def gang_findings(dump: Dump, config: ControllerConfig, now: float) -> Iterator[DoctorFinding]:
    held = deadlock.resolve(dump.records, dump.jobs, now, config)
    if held is not None:
        gangs = ", ".join(held.deadlock.gangs)
        yield _finding(
            "gang-deadlock",
            "Jobs " + gangs,
            f"gangs hold part of their minimum and block each other: {held.deadlock.describe()}",
            "delete (or suspend) one of them; gpuyield's worker makes the cheapest one yield",
        )
    free = sum(_free_by_node(dump).values())
    pending = sorted(
        (
            v
            for v in dump.jobs.values()
            if v.state is JobState.PENDING and v.placed == 0 and (v.min_available or 0) > 1
        ),
        key=lambda v: v.name,
    )
    risky = [v for v in pending if 0 < _gang_need(v) <= free]
    if len(risky) >= 2 and sum(_gang_need(v) for v in risky) > free:
        needs = ", ".join(f"{v.name} ({_gang_need(v)})" for v in risky)
        yield _finding(
            "gang-deadlock",
            "Jobs " + ", ".join(v.name for v in risky),
            f"pending gangs each fit in the {free} free GPUs but not together: {needs}; "
            "allocated pod by pod, each can take part of the GPUs and none reach its minimum",
            "keep Volcano's gang plugin and enqueue action on (they admit whole gangs), "
            "or submit the gangs one after the other",
        )


# -- Volcano Jobs' policies -----------------------------------------------------------


def _policies(job: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    spec = job.get("spec") or {}
    yield from spec.get("policies") or ()
    for task in spec.get("tasks") or ():
        yield from task.get("policies") or ()


def _preemptable_job(job: Mapping[str, Any]) -> bool:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get("volcano.sh/preemptable", "true")).lower() != "false"


def job_policy_findings(
    jobs: Sequence[Mapping[str, Any]], config: ControllerConfig
) -> Iterator[DoctorFinding]:
    yields = config.policy.max_evictions
    for job in jobs:
        if not _preemptable_job(job):
            continue
        name = f"Job/{_name(job)}"
        for policy in _policies(job):
            events = policy.get("events") or [policy.get("event")]
            if policy.get("action") == "RestartJob" and ("PodEvicted" in events or "*" in events):
                yield _finding(
                    "restart-on-eviction",
                    name,
                    "PodEvicted -> RestartJob: a yield's eviction restarts the whole job from "
                    "scratch instead of letting gpuyield suspend and resume it",
                    "remove the PodEvicted policy (or use action AbortJob) on preemptable jobs",
                )
                break
        retries = (job.get("spec") or {}).get("maxRetry", 3)
        if isinstance(retries, int) and retries <= yields:
            yield _finding(
                "max-retry-too-low",
                name,
                f"maxRetry {retries}: gpuyield may make it yield up to {yields} times in its "
                "eviction window, and each restart counts; Volcano fails the job past it",
                f"set spec.maxRetry above GPUYIELD_MAX_EVICTIONS ({yields}), e.g. {yields + 7}",
            )


# -- pods -----------------------------------------------------------------------------


def pod_findings(
    pods: Sequence[Mapping[str, Any]], config: ControllerConfig
) -> Iterator[DoctorFinding]:
    grace = config.policy.grace_s
    for pod in pods:
        if pod_gpus(pod) == 0:
            continue
        spec = pod.get("spec") or {}
        name = f"Pod/{_name(pod)}"
        scheduler = spec.get("schedulerName") or "default-scheduler"
        if scheduler != "volcano":
            yield _finding(
                "scheduler-name-missing",
                name,
                f"a GPU pod scheduled by {scheduler}: it bypasses Volcano's queues and gangs, "
                "and gpuyield cannot make room for it",
                "set schedulerName: volcano in the pod template (or the Volcano Job's)",
            )
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if str(annotations.get("volcano.sh/preemptable", "true")).lower() == "false":
            continue
        pod_grace = spec.get("terminationGracePeriodSeconds", 30)
        if isinstance(pod_grace, int | float) and pod_grace < grace:
            yield _finding(
                "grace-too-short",
                name,
                f"terminationGracePeriodSeconds {pod_grace:g} is shorter than the "
                f"{grace:g} s gpuyield gives a checkpoint (GPUYIELD_GRACE_S): the kubelet "
                "kills the trainer before its checkpoint is written",
                f"set terminationGracePeriodSeconds to at least {grace:g} plus a margin",
            )


# -- fragmentation --------------------------------------------------------------------


def fragmentation_findings(dump: Dump) -> Iterator[DoctorFinding]:
    free = _free_by_node(dump)
    if not free:
        return
    total, largest = sum(free.values()), max(free.values())
    for view in sorted(dump.jobs.values(), key=lambda v: v.name):
        if view.state is not JobState.PENDING:
            continue
        waiting = [p.gpus for p in view.pods if p.node is None]
        if not waiting:
            continue
        biggest = max(waiting)
        if total >= sum(waiting) and biggest > largest:
            spread = "/".join(str(free[n]) for n in sorted(free))
            yield _finding(
                "fragmented-free-gpus",
                f"Job/{view.name}",
                f"{total} GPUs are free but spread {spread} over the nodes: none fits its "
                f"{biggest}-GPU pods",
                "let gpuyield consolidate (it evicts to make whole nodes free), or drain the "
                "most fragmented nodes; size pods to the free slots if the job allows",
            )


# -- Volcano's scheduler --------------------------------------------------------------


def scheduler_findings(confs: Sequence[tuple[str, str]]) -> Iterator[DoctorFinding]:
    for where, text in confs:
        try:
            conf = volcano_conf.parse_scheduler_conf(text)
        except volcano_conf.SchedulerConfError as exc:
            yield _finding(
                "volcano-preempt-enabled",
                where,
                f"the scheduler configuration cannot be read: {exc}",
                "fix it (deploy/volcano/volcano-scheduler.conf is a working one)",
            )
            continue
        for found in volcano_conf.check_scheduler_conf(conf):
            if found.kind is volcano_conf.FindingKind.EVICTING_ACTIONS:
                yield _finding(
                    "volcano-preempt-enabled",
                    where,
                    found.message,
                    f"remove {', '.join(found.names)} from actions and restart the scheduler",
                )


def eviction_findings(records: Overlay) -> Iterator[DoctorFinding]:
    """Pods caught being evicted by a scheduler: the evidence the live ``volcano-evicting``
    alert reads (``kube_facts.eviction_mark``), seen in the dump before their deletion."""
    for name, pod in records.typed_prefix(POD, PodRecord):
        if pod.evicted is None:
            continue
        yield _finding(
            "volcano-preempt-enabled",
            f"Pod/{name}",
            f"{pod.evicted.scheduler} is evicting it ({pod.evicted.action}) beside gpuyield: "
            "no checkpoint was asked for",
            "turn preempt and reclaim off in Volcano's scheduler configuration"
            if pod.evicted.scheduler == "volcano"
            else f"schedule GPU pods with volcano, not {pod.evicted.scheduler}",
        )
