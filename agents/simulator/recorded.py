"""The simulator's workload from a recorded run: ``gpuyield simulate --from-archive DIR``.

Replay (``gpuyield replay --policy``) is open-loop: the recorded inputs stay as
they were, whatever a changed policy would have done. The closed loop is the
simulator, run on the jobs the record shows: this module turns a run's watch
events and job progress (the archive's ``gpuyield.kube-events`` and
``gpuyield.job-progress``) into the simulator's cluster and ``JobSpec``s, so
recorded history can be re-run under every policy.

What is taken from the record, per Volcano Job: its queue, pods and GPUs per
pod (its tasks), ``minAvailable``, preemptability, its submission
(``creationTimestamp``), and its work: the seconds it ran (its phase
``Running``) when it completed, else the seconds it ran divided by its last
reported progress; a job the record never saw run gets the median duration
of its queue's workload class, and an estimate is capped at the class's
longest duration. A queue no class names is judged production or research
by its name, else shared. The checkpoint interval is the one its
trainer reported, else the middle of its class's range. Priority is the
highest its pods carried. The cluster: the nodes seen (their count, and the
most GPUs one has) and the queues (weight, guarantee, capability,
reclaimable). The measured window runs from the first submission to the
last event, without warm-up. Pure: messages in, a workload out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuyield.agents.controller import kube_facts
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.schemas.messages import JobProgress, KubeEvent, KubeEventType, KubeKind
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit, Queue

RUNNING = "Running"
FINISHED = frozenset({"Completed", "Failed", "Terminated"})
DEFAULT_DURATION_S = 6 * 3600.0
DEFAULT_CHECKPOINT_S = 30 * 60.0
DEFAULT_DURATION_MAX_H = 72.0


class NothingRecorded(ValueError):
    """The record holds no Volcano Job or no node: there is no workload to simulate."""


@dataclass
class _Job:
    record: dict[str, object]
    submitted: float
    phase: str = "Pending"
    running_since: float | None = None
    ran_s: float = 0.0
    completed: bool = False
    priority: int = 0
    progress: float = 0.0
    checkpoint_s: float | None = None


@dataclass(frozen=True)
class RecordedWorkload:
    """The cluster and the jobs of a record, ready for ``run_policy``."""

    scenario: Scenario
    jobs: list[JobSpec]
    estimated: list[str] = field(default_factory=list)
    """Jobs whose work is an estimate (never seen complete)."""


def _phase(job: _Job, phase: str, at: float) -> None:
    if job.running_since is not None and phase != RUNNING:
        job.ran_s += max(0.0, at - job.running_since)
        job.running_since = None
    if phase == RUNNING and job.running_since is None:
        job.running_since = at
    if phase == "Completed":
        job.completed = True
    job.phase = phase


def recorded_workload(
    events: Iterable[KubeEvent], progress: Iterable[JobProgress], base: Scenario
) -> RecordedWorkload:
    """The workload of the recorded run; ``base`` gives the workload classes and the rest."""
    jobs: dict[str, _Job] = {}
    nodes: dict[str, int] = {}
    queues: dict[str, Queue] = {}
    priorities: dict[str, int] = {}
    last = 0.0
    ordered = sorted(events, key=lambda e: e.observed_at)
    for event in ordered:
        last = max(last, event.observed_at)
        if event.type is KubeEventType.DELETED:
            continue
        try:
            if event.kind is KubeKind.JOB:
                _job_event(jobs, event)
            elif event.kind is KubeKind.NODE:
                record = kube_facts.node_record(event.object, rack_label="", nvlink_label="")
                nodes[event.name] = int(record["gpus"])
            elif event.kind is KubeKind.QUEUE:
                q = kube_facts.queue_record(event.object)
                queues[event.name] = Queue(
                    name=event.name,
                    weight=q["weight"],
                    guarantee=GpuAmount(gpu=q["guarantee"]),
                    capability=GpuLimit(gpu=q["capability"]),
                    reclaimable=q["reclaimable"],
                )
            elif event.kind is KubeKind.POD:
                pod = kube_facts.pod_record(event.object)
                if pod["job"] and pod["priority"] is not None:
                    name = f"{pod['namespace']}/{pod['job']}"
                    priorities[name] = max(priorities.get(name, 0), int(pod["priority"]))
        except (kube_facts.FactError, TypeError, ValueError, KeyError):
            continue  # an object the controller could not read either
    for beat in progress:
        found = jobs.get(beat.job)
        if found is not None:
            found.progress = max(found.progress, beat.progress)
            if beat.checkpoint_interval_s is not None:
                found.checkpoint_s = beat.checkpoint_interval_s
    if not jobs or not nodes:
        raise NothingRecorded(
            "the record holds no Volcano Job or no node (gpuyield.kube-events): nothing to simulate"
        )
    start = min(j.submitted for j in jobs.values())
    for name, job in jobs.items():
        if job.running_since is not None:  # still running when the record ends
            job.ran_s += max(0.0, last - job.running_since)
            job.running_since = None
        job.priority = priorities.get(name, 0)
    classes = {mix.queue: mix for mix in base.workload}
    specs: list[JobSpec] = []
    estimated: list[str] = []
    for name, job in sorted(jobs.items(), key=lambda nj: (nj[1].submitted, nj[0])):
        record = job.record
        tasks = list(record["tasks"])  # type: ignore[call-overload]
        pods = sum(int(t["replicas"]) for t in tasks) or 1
        gpus_per_pod = max((int(t["gpus_per_pod"]) for t in tasks), default=0)
        mix = classes.get(str(record["queue"]))
        if job.completed:
            duration = job.ran_s
        elif job.ran_s > 0 and job.progress > 0:
            ceiling = (mix.duration_h_max if mix else DEFAULT_DURATION_MAX_H) * 3600.0
            duration = min(job.ran_s / job.progress, ceiling)  # a sliver of progress says little
            estimated.append(name)
        else:
            duration = (mix.duration_h_median * 3600.0) if mix else DEFAULT_DURATION_S
            estimated.append(name)
        if mix is not None:
            low, high = mix.checkpoint_interval_min
            default_checkpoint = (low + high) / 2 * 60.0
        else:
            default_checkpoint = DEFAULT_CHECKPOINT_S
        minimum = record["min_available"]
        specs.append(
            JobSpec(
                name=name,
                queue=str(record["queue"]),
                kind=JobKind(mix.kind) if mix is not None else kind_of(str(record["queue"])),
                submit_s=job.submitted - start,
                pods=pods,
                gpus_per_pod=gpus_per_pod,
                min_available=min(pods, int(minimum)) if isinstance(minimum, int) else pods,
                duration_s=max(duration, 1.0),
                checkpoint_interval_s=job.checkpoint_s or default_checkpoint,
                priority=job.priority,
                preemptable=bool(record["preemptable"]),
            )
        )
    scenario = base.model_copy(
        update={
            "nodes": len(nodes),
            "gpus_per_node": max(nodes.values()),
            "queues": tuple(queues.values()) or base.queues,
            "workload": tuple(m for m in base.workload if m.queue in queues) or (),
            "days": max((last - start) / 86400.0, 0.01),
            "warmup_h": 0.0,
        }
    )
    return RecordedWorkload(Scenario.model_validate(scenario.model_dump()), specs, estimated)


def kind_of(queue: str) -> JobKind:
    """A queue no workload class names: production or research by its name, else shared."""
    lowered = queue.lower()
    if "prod" in lowered:
        return JobKind.PRODUCTION
    if "research" in lowered:
        return JobKind.RESEARCH
    return JobKind.SHARED


def _job_event(jobs: dict[str, _Job], event: KubeEvent) -> None:
    record = kube_facts.volcano_job_record(event.object)
    name = f"{record['namespace']}/{event.name}"
    found = jobs.get(name)
    if found is None:
        created = record["created_at"]
        submitted = created if isinstance(created, float) else event.observed_at
        found = jobs[name] = _Job(record=record, submitted=submitted)
    found.record = record
    phase = str(record["phase"])
    if phase != found.phase:
        _phase(found, phase, event.observed_at)
