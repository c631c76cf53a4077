"""Seeded synthetic GPU clusters for the planner benchmark (not a test).

``make_cluster(nodes, seed)`` builds one :class:`~gpuyield.schemas.Snapshot`: ``nodes`` nodes of
8 GPUs in racks of 8 (each node its own NVLink domain, about 2% cordoned but still running
their pods), three queues sized from the cluster, about three jobs per node packed to 85-100%
of the GPUs, and one pending production gang, the preemptor, that does not fit without
evictions (it is the pending job with the highest priority; its name is
:data:`PREEMPTOR`).

Queues (guarantee and capability in GPUs, scaled with the cluster)::

    production-core   weight 80  guarantee 40%  capability 60%  not reclaimable
    research-elastic  weight 20  guarantee 15%  capability 50%  reclaimable
    shared            weight 10  guarantee 10%                   reclaimable

In about a quarter of the clusters ``shared`` is a parent queue with two children
(``shared-vision``, ``shared-nlp``, 5% each), which exercises the hierarchy rules
(contract reading 6). Each queue's share of the used GPUs is drawn per cluster, so that
production sometimes sits under its guarantee (reclaim allowed) and sometimes over it (only
preemption inside the queue).

Job shapes follow the Philly trace in spirit (most jobs are 1 GPU, a few big gangs hold a
large share of the GPUs): 1-, 2-, 4- and 8-GPU pods, gangs of 1-16 pods (8-GPU pods for gangs
of more than 4 pods), elastic ``min_available`` for about a third of the multi-pod jobs. Times
are whole seconds, so every lost-work figure is an exact integer (see ``exact.py``). The mix
makes some jobs ineligible (cooldown, eviction limit, ``preemptable: false``) and some
reclaim candidates protected (high priority plus long runs or near-finished progress).

Everything is drawn from ``random.Random(seed)``: the same arguments give the same snapshot.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from gpuyield.agents.simulator.allocate import place
from gpuyield.schemas import Job, Node, Pod, Policy, Queue, Snapshot
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit, JobState, PodPhase, Topology

NOW = 1_764_000_000.0
GPUS_PER_NODE = 8
NODES_PER_RACK = 8
PREEMPTOR = "urgent-gang"

HOUR = 3600


@dataclass
class _QueueSpec:
    name: str
    short: str
    weight: float
    guarantee: float  # fraction of the cluster's GPUs
    capability: float | None
    reclaimable: bool
    priority: tuple[int, int]
    parent: str | None = None
    holds_jobs: bool = True


@dataclass
class _Placer:
    """Free GPUs per node and the packing target."""

    free: list[int]
    racks: list[int]
    target_used: int
    used: int = 0

    def place(self, rng: random.Random, pod_gpus: list[int]) -> list[int] | None:
        """Nodes for ``pod_gpus`` (best fit, gangs of full nodes rack-local), or None."""
        chosen: list[int] = []
        free = list(self.free)
        whole = [g for g in pod_gpus if g == GPUS_PER_NODE]
        if len(whole) > 1:
            # A big gang of 8-GPU pods: fill the rack with the most empty nodes first.
            by_rack: dict[int, list[int]] = {}
            for n, f in enumerate(free):
                if f == GPUS_PER_NODE:
                    by_rack.setdefault(self.racks[n], []).append(n)
            order = sorted(by_rack.values(), key=lambda ns: (-len(ns), rng.random()))
            empty = [n for ns in order for n in ns]
            if len(empty) < len(whole):
                return None
        for g in pod_gpus:
            fits = [n for n, f in enumerate(free) if f >= g]
            if not fits:
                return None
            if g == GPUS_PER_NODE and len(whole) > 1:
                node = next(n for n in empty if free[n] == GPUS_PER_NODE)
            elif rng.random() < 0.75:
                best = min(free[n] for n in fits)
                node = rng.choice([n for n in fits if free[n] == best])
            else:
                node = rng.choice(fits)
            free[node] -= g
            chosen.append(node)
        self.free = free
        self.used += sum(pod_gpus)
        return chosen


@dataclass
class _Shape:
    pod_gpus: int
    pods: int
    min_available: int | None = None
    kind: str = "train"
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.pod_gpus * self.pods


def _draw_shape(rng: random.Random, max_gpus: int) -> _Shape:
    """One job shape: mostly small, a few big 8-GPU gangs."""
    r = rng.random()
    if r < 0.03:
        pods = rng.choice([2, 3, 4, 6, 8, 12, 16])
        shape = _Shape(8, pods, kind="pretrain")
    elif r < 0.09:
        shape = _Shape(8, rng.choice([1, 1, 2]), kind="train")
    elif r < 0.19:
        shape = _Shape(4, rng.choice([1, 1, 2, 4]), kind="finetune")
    elif r < 0.40:
        shape = _Shape(2, rng.choice([1, 1, 2, 4]), kind="eval")
    else:
        shape = _Shape(1, rng.choice([1, 1, 1, 2, 4]), kind=rng.choice(["nb", "sweep", "infer"]))
    while shape.gpus > max_gpus and shape.pods > 1:
        shape.pods //= 2
    while shape.gpus > max_gpus and shape.pod_gpus > 1:
        shape.pod_gpus //= 2
    if shape.pods > 1 and rng.random() < 0.35:
        shape.min_available = rng.randint(1, shape.pods - 1)
    return shape


def _queues(rng: random.Random, total: int, hierarchical: bool) -> list[_QueueSpec]:
    specs = [
        _QueueSpec("production-core", "prod", 80, 0.40, 0.60, False, (400, 1500)),
        _QueueSpec("research-elastic", "res", 20, 0.15, 0.50, True, (100, 1200)),
        _QueueSpec("shared", "shr", 10, 0.10, None, True, (0, 500)),
    ]
    if hierarchical:
        specs[2].holds_jobs = rng.random() < 0.5
        specs += [
            _QueueSpec("shared-vision", "vis", 5, 0.05, None, True, (0, 600), parent="shared"),
            _QueueSpec("shared-nlp", "nlp", 5, 0.05, None, True, (0, 600), parent="shared"),
        ]
    return specs


def _to_queue(spec: _QueueSpec, total: int) -> Queue:
    cap = None if spec.capability is None else max(1, round(spec.capability * total))
    guarantee = round(spec.guarantee * total)
    if cap is not None:
        guarantee = min(guarantee, cap)
    return Queue(
        name=spec.name,
        weight=spec.weight,
        guarantee=GpuAmount(gpu=guarantee),
        capability=GpuLimit(gpu=cap),
        reclaimable=spec.reclaimable,
        parent=spec.parent,
    )


def _times(rng: random.Random, policy: Policy) -> dict[str, object]:
    """started_at, last_checkpoint_at, progress, evictions, submitted_at of a running job."""
    if rng.random() < 0.08:
        ran = rng.randint(0, int(policy.cooldown_s) - 1)  # in its cooldown
    else:
        ran = int(math.exp(rng.uniform(math.log(policy.cooldown_s), math.log(14 * 24 * HOUR))))
    started = NOW - ran
    u = rng.random()
    if u < 0.15:
        checkpoint: float | None = None
    elif u < 0.18:
        checkpoint = NOW  # just checkpointed: evicting it loses nothing
    else:
        checkpoint = NOW - rng.randint(0, min(ran, 4 * HOUR))
    progress = rng.uniform(0.9, 0.995) if rng.random() < 0.10 else rng.uniform(0.0, 0.9)
    v = rng.random()
    window = int(policy.eviction_window_s)
    if v < 0.70:
        evictions: list[float] = []
    elif v < 0.76:  # at the eviction limit
        evictions = sorted(NOW - rng.randint(0, window) for _ in range(policy.max_evictions))
    else:
        evictions = sorted(
            NOW - rng.randint(0, 3 * window) for _ in range(rng.randint(1, policy.max_evictions))
        )
    return {
        "started_at": started,
        "last_checkpoint_at": checkpoint,
        "progress": round(progress, 4),
        "evictions": tuple(evictions),
        "submitted_at": started - rng.randint(10, 3600),
    }


def _pod_names(job: str, count: int) -> list[str]:
    return [f"{job}-worker-{i}" for i in range(count)]


def _preemptor_shape(rng: random.Random, nodes: int) -> _Shape:
    """A gang of 1-8 whole-node pods (60%) or 1-4 smaller pods, scaled down on tiny clusters."""
    if rng.random() < (0.6 if nodes >= 8 else 0.4):
        big = max(1, min(8, nodes // 4))
        return _Shape(8, rng.randint(1, big), kind="urgent")
    return _Shape(rng.choice([1, 2, 4]), rng.randint(1, 4 if nodes >= 8 else 2), kind="urgent")


def _fits_without_evictions(free: list[int], schedulable: list[bool], pod_gpus: list[int]) -> bool:
    """Whether Volcano's allocate (the one model) places the whole gang on the free GPUs."""
    if not pod_gpus:
        return True
    room = [f if s else 0 for f, s in zip(free, schedulable, strict=True)]
    return place(room, sorted(pod_gpus, reverse=True), min_count=len(pod_gpus)) is not None


def make_cluster(
    nodes: int,
    seed: int,
    *,
    max_jobs: int | None = None,
    jobs_per_node: float = 3.0,
    hierarchical: bool | None = None,
) -> Snapshot:
    """A valid, seeded snapshot of ``nodes`` 8-GPU nodes with one pending preemptor.

    ``max_jobs`` caps the number of running jobs (the small buckets of the optimality
    benchmark use it; the jobs then get bigger so the nodes still fill). ``hierarchical``
    forces the two-level ``shared`` queue on or off (default: a quarter of the seeds).
    """
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    rng = random.Random(seed)
    policy = Policy()
    total = nodes * GPUS_PER_NODE
    if hierarchical is None:
        hierarchical = rng.random() < 0.25
    specs = _queues(rng, total, hierarchical)

    schedulable = [rng.random() >= 0.02 for _ in range(nodes)]
    if not any(schedulable):
        schedulable[0] = True
    node_models = tuple(
        Node(
            name=f"node-{i:04d}",
            gpus=GPUS_PER_NODE,
            topology=Topology(
                nvlink_domain=f"node-{i:04d}", rack=f"rack-{i // NODES_PER_RACK:03d}"
            ),
            schedulable=schedulable[i],
        )
        for i in range(nodes)
    )
    # Every node is packed to 85-100%: it keeps a reserve of 0-2 GPUs that no job takes.
    idle = GPUS_PER_NODE * (1.0 - rng.uniform(0.85, 1.0))
    reserve = [int(idle) + (rng.random() < idle - int(idle)) for _ in range(nodes)]
    placer = _Placer(
        free=[GPUS_PER_NODE - r for r in reserve],
        racks=[i // NODES_PER_RACK for i in range(nodes)],
        target_used=total - sum(reserve),
    )
    job_specs = [s for s in specs if s.holds_jobs]
    # Each queue's share of the used GPUs, drawn per cluster.
    prod = rng.uniform(0.25, 0.48)
    res = rng.uniform(0.18, 0.36)
    shares = {"production-core": prod, "research-elastic": res}
    rest = [s.name for s in job_specs if s.name not in shares]
    for name in rest:
        shares[name] = max(0.04, 1.0 - prod - res) / len(rest)
    target = {name: share * placer.target_used for name, share in shares.items()}
    usage = dict.fromkeys(target, 0)

    preemptor = _preemptor_shape(rng, nodes)
    # Mostly production; sometimes another queue's urgent job (same-queue preemption in a
    # reclaimable queue, reclaim up a hierarchy).
    preemptor_queue = "production-core"
    if rng.random() < 0.15:
        preemptor_queue = rng.choice([s.name for s in job_specs if s.name != preemptor_queue])
    top = rng.randint(1000, 2000)  # the preemptor's priority, the highest of the pending jobs
    # Occasionally the preemptor already runs part of its gang (contract decision 5).
    pre_placed: list[int] = []
    if preemptor.pods > 1 and rng.random() < 0.08:
        k = rng.randint(1, preemptor.pods - 1)
        got = placer.place(rng, [preemptor.pod_gpus] * k)
        if got is not None:
            pre_placed = got

    jobs: list[Job] = []
    counters: dict[str, int] = {}
    target_jobs = max(1, round(jobs_per_node * nodes))
    if max_jobs is not None:
        target_jobs = min(target_jobs, max_jobs)
    failures = 0
    while placer.used < placer.target_used and len(jobs) < target_jobs and failures < 60:
        remaining = placer.target_used - placer.used
        desired = remaining / max(1, target_jobs - len(jobs))
        # Three candidate shapes, keep the one closest (in log scale) to the desired size.
        shapes = [_draw_shape(rng, min(remaining, total // 2 or 1)) for _ in range(3)]
        shape = min(shapes, key=lambda s: abs(math.log(s.gpus / max(desired, 1.0))))
        weights = [max(0.01, target[s.name] - usage[s.name]) for s in job_specs]
        spec = rng.choices(job_specs, weights=weights)[0]
        half_placed = shape.pods > 1 and rng.random() < 0.02
        placed_pods = rng.randint(1, shape.pods - 1) if half_placed else shape.pods
        where = placer.place(rng, [shape.pod_gpus] * placed_pods)
        if where is None:
            failures += 1
            continue
        failures = 0
        idx = counters.get(spec.short, 0) + 1
        counters[spec.short] = idx
        name = f"{spec.short}-{shape.kind}-{idx:04d}"
        names = _pod_names(name, shape.pods)
        succeeded = shape.pods > 1 and not half_placed and rng.random() < 0.03
        pods = []
        for i, pod_name in enumerate(names):
            node = node_models[where[i]].name if i < placed_pods else None
            phase = PodPhase.RUNNING if node is not None else PodPhase.PENDING
            if succeeded and i == shape.pods - 1:
                phase = PodPhase.SUCCEEDED  # finished worker: on its node, holding nothing
                placer.free[where[i]] += shape.pod_gpus
                placer.used -= shape.pod_gpus
            pods.append(Pod(name=pod_name, gpus=shape.pod_gpus, node=node, phase=phase))
        usage[spec.name] += placed_pods * shape.pod_gpus
        times = _times(rng, policy)
        lo, hi = spec.priority
        priority = rng.randint(lo, hi)
        if half_placed:
            priority = min(priority, top - 1)  # the preemptor stays the top pending job
        state = JobState.RUNNING
        if half_placed:
            state = JobState.PENDING
            times.update(started_at=None, last_checkpoint_at=None, progress=0.0, evictions=())
        jobs.append(
            Job.model_validate(
                {
                    "name": name,
                    "queue": spec.name,
                    "priority": priority,
                    "state": state,
                    "pods": pods,
                    "min_available": shape.min_available,
                    "preemptable": rng.random() >= 0.05,
                    **times,
                }
            )
        )

    # Pending jobs that hold nothing (they only matter for picking the preemptor).
    for i in range(rng.randint(0, 3)):
        spec = rng.choice(job_specs)
        shape = _draw_shape(rng, total)
        name = f"{spec.short}-queued-{i:04d}"
        jobs.append(
            Job(
                name=name,
                queue=spec.name,
                priority=min(rng.randint(*spec.priority), top - 1),
                state=JobState.PENDING,
                pods=tuple(
                    Pod(name=n, gpus=shape.pod_gpus, node=None, phase=PodPhase.PENDING)
                    for n in _pod_names(name, shape.pods)
                ),
                submitted_at=NOW - rng.randint(1, 3600),
            )
        )

    # The preemptor: grow it until it no longer fits in the free GPUs as they are.
    to_place = preemptor.pods - len(pre_placed)
    free = [f + r for f, r in zip(placer.free, reserve, strict=True)]
    for _ in range(8):
        big = preemptor.pod_gpus == GPUS_PER_NODE and preemptor.pods >= 8
        if big or not _fits_without_evictions(free, schedulable, [preemptor.pod_gpus] * to_place):
            break
        if preemptor.pod_gpus < GPUS_PER_NODE and not pre_placed:
            preemptor.pod_gpus *= 2
        else:
            preemptor.pods += 1
            to_place += 1
    pods = [
        Pod(
            name=pod_name,
            gpus=preemptor.pod_gpus,
            node=node_models[pre_placed[i]].name if i < len(pre_placed) else None,
            phase=PodPhase.RUNNING if i < len(pre_placed) else PodPhase.PENDING,
        )
        for i, pod_name in enumerate(_pod_names(PREEMPTOR, preemptor.pods))
    ]
    jobs.append(
        Job(
            name=PREEMPTOR,
            queue=preemptor_queue,
            priority=top,
            state=JobState.PENDING,
            pods=tuple(pods),
            submitted_at=NOW - rng.randint(1, 600),
        )
    )
    return Snapshot(
        version=1,
        now=NOW,
        policy=policy,
        nodes=node_models,
        queues=tuple(_to_queue(s, total) for s in specs),
        jobs=tuple(jobs),
    )


def describe(snap: Snapshot) -> dict[str, float]:
    """A few shape statistics of a snapshot (for the benchmark report)."""
    total = sum(n.gpus for n in snap.nodes)
    held = sum(p.gpus for j in snap.jobs for p in j.pods if p.holds_gpus)
    running = [j for j in snap.jobs if any(p.holds_gpus for p in j.pods)]
    return {
        "nodes": len(snap.nodes),
        "jobs": len(running),
        "jobs_per_node": len(running) / max(1, len(snap.nodes)),
        "pods": sum(1 for j in running for p in j.pods if p.holds_gpus),
        "fill": held / max(1, total),
    }
