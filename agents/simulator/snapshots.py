"""The simulated cluster as the planner sees it: a format-v1 snapshot.

The same contract the streaming controller fills from its tables, filled
here from the simulator's state, so that both run the very same planner.

Pods and jobs are frozen values, built through small caches keyed by every
field: a pod keeps its fields for as long as it runs and a job keeps them
between the decisions of one scheduling cycle, while a trace's decision
holds hundreds of them; validating each anew was a third of gpuyield's run
time on a trace.
"""

from __future__ import annotations

from functools import lru_cache

from gpuyield.agents.simulator.engine import Simulation
from gpuyield.agents.simulator.state import Phase, SimJob
from gpuyield.schemas import Job, JobState, Node, Pod, PodPhase, Snapshot

EPOCH = 1_764_000_000.0
"""Virtual time 0 as epoch seconds (snapshots carry absolute times)."""


def node_name(index: int) -> str:
    return f"node-{index:03d}"


def pod_name(job: SimJob, index: int) -> str:
    return f"{job.name}-{index}"


def snapshot_for(sim: Simulation, preemptor: SimJob) -> Snapshot:
    """Nodes, queues and every job holding GPUs, plus the preemptor with its waiting pods."""
    now = EPOCH + sim.now
    jobs = []
    # Every other active job holds nothing, and would be left out below.
    members = sim.holding_or(preemptor)
    for job in members:
        if job is preemptor:
            jobs.append(_job(sim, job, now, preemptor=True))
        elif job.yielding or job.phase in (Phase.DONE, Phase.FAILED) or job.releasing:
            # On its way out (yielding or terminating): its GPUs are not free yet and it
            # is no candidate, so it appears as a job that may not be preempted.
            held = [p for p in job.holding() if p.node is not None]
            if held:
                jobs.append(
                    Job(
                        name=f"{job.name}~leaving",
                        queue=job.spec.queue,
                        priority=job.spec.priority,
                        state=JobState.RUNNING,
                        preemptable=False,
                        pods=tuple(
                            _pod(
                                f"{pod_name(job, p.index)}~leaving",
                                job.spec.gpus_per_pod,
                                node_name(p.node),
                                PodPhase.RUNNING,
                            )
                            for p in held
                            if p.node is not None
                        ),
                    )
                )
        elif job.holding():
            jobs.append(_job(sim, job, now, preemptor=False))
    # GPUs nominated for another preemptor are not free for this one: they come
    # out of what terminating pods will free first, then out of the free GPUs.
    terminating_gpus: dict[int, int] = {}
    for job in members:
        for p in job.pods:
            if p.releasing_until is not None and p.node is not None:
                terminating_gpus[p.node] = terminating_gpus.get(p.node, 0) + job.spec.gpus_per_pod
    reserved_for_others = {
        node: max(
            0,
            sum(g for j, g in held.items() if j != preemptor.name) - terminating_gpus.get(node, 0),
        )
        for node, held in sim.cluster.reserved.items()
    }
    # Built from the simulator's own state, whose pods sit on its nodes under unique
    # names by construction: the cross-reference check over every pod of the cluster
    # is skipped here (tests/simulator/test_snapshots.py validates every snapshot of
    # a run), as it was a tenth of gpuyield's time at 1,000 nodes. Its jobs and pods
    # are validated models (``_snapshot_job``, ``_pod``).
    return Snapshot.model_construct(
        version=1,
        now=now,
        policy=sim.scenario.policy,
        nodes=tuple(
            Node(
                name=node_name(i),
                gpus=sim.cluster.gpus_per_node - reserved_for_others.get(i, 0),
            )
            for i in range(len(sim.cluster.free))
        ),
        queues=sim.scenario.queues,
        jobs=tuple(jobs),
    )


def _job(sim: Simulation, job: SimJob, now: float, *, preemptor: bool) -> Job:
    spec = job.spec
    if preemptor:
        state = JobState.SUSPENDED if job.phase is Phase.SUSPENDED else JobState.PENDING
        pods = tuple(
            _pod(
                pod_name(job, p.index),
                spec.gpus_per_pod,
                None if p.node is None else node_name(p.node),
                PodPhase.PENDING if p.node is None else PodPhase.RUNNING,
            )
            for p in job.pods
        )
    else:
        state = JobState.RUNNING if job.phase is Phase.RUNNING else JobState.PENDING
        pods = tuple(
            _pod(pod_name(job, p.index), spec.gpus_per_pod, node_name(p.node), PodPhase.RUNNING)
            for p in job.placed()
            if p.node is not None
        )
    return _snapshot_job(
        job.name,
        spec.queue,
        spec.priority,
        state,
        pods,
        min(spec.min_available, len(pods)) if not preemptor else spec.min_available,
        spec.preemptable,
        EPOCH + spec.submit_s,
        None if job.started_at is None else EPOCH + job.started_at,
        job.progress(),
        None if job.last_checkpoint_at is None else EPOCH + job.last_checkpoint_at,
        tuple(EPOCH + t for t in job.evictions),
        None if spec.sla_s is None else EPOCH + spec.submit_s + spec.sla_s,
    )


@lru_cache(maxsize=1 << 16)
def _pod(name: str, gpus: int, node: str | None, phase: PodPhase) -> Pod:
    return Pod(name=name, gpus=gpus, node=node, phase=phase)


@lru_cache(maxsize=1 << 14)
def _snapshot_job(
    name: str,
    queue: str,
    priority: int,
    state: JobState,
    pods: tuple[Pod, ...],
    min_available: int,
    preemptable: bool,
    submitted_at: float,
    started_at: float | None,
    progress: float,
    last_checkpoint_at: float | None,
    evictions: tuple[float, ...],
    sla_deadline: float | None,
) -> Job:
    return Job(
        name=name,
        queue=queue,
        priority=priority,
        state=state,
        pods=pods,
        min_available=min_available,
        preemptable=preemptable,
        submitted_at=submitted_at,
        started_at=started_at,
        progress=progress,
        last_checkpoint_at=last_checkpoint_at,
        evictions=evictions,
        sla_deadline=sla_deadline,
    )
