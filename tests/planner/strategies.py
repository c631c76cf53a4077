"""Small, valid, realistic cluster snapshots: hypothesis strategies and seeded cases.

A generated case is a snapshot plus the name of its preemptor, a Pending job
called ``pre`` with 1-3 unplaced pods (sometimes half placed already). Around
it: 1-6 nodes of 2, 4 or 8 GPUs (some unschedulable), 1-3 queues (sometimes a
parent and its children) and up to 7 other jobs holding GPUs, with values on
the contract's edges: started exactly ``cooldown_s`` ago, checkpointed exactly
at ``now`` (or after it: clock skew), evictions exactly ``eviction_window_s``
ago, one eviction short of the limit, elastic ``min_available`` (0 included),
non-preemptable jobs, finished pods still bound to a node, half-placed Pending
gangs, guarantees and capabilities one GPU either side of the usage.

The generator is written once against :class:`Pick`, so that hypothesis (which
shrinks) and a seeded ``random.Random`` (which draws larger, more uniform
clusters) make the same kind of case. Nodes are filled pod by pod from what is
left on them, so no node is over-committed and every snapshot is valid. Times
are whole seconds, so lost work (GPUs times seconds) is exact and ties are real.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from builders import NOW, a_job, a_node, a_pod, a_queue, a_snapshot
from hypothesis import settings
from hypothesis import strategies as st

from gpuyield.schemas import Job, JobState, Node, Pod, PodPhase, Policy, Queue, Snapshot

PREEMPTOR = "pre"

T = TypeVar("T")


def examples(count: int) -> int:
    """``count`` scaled by the active profile (``dev`` runs five times as many)."""
    return max(1, count * settings().max_examples // 100)


@dataclass(frozen=True)
class Case:
    """A snapshot and the job to plan for."""

    snapshot: Snapshot
    preemptor: str


class Pick(Protocol):
    """Where the generator's choices come from."""

    def one(self, options: Sequence[T]) -> T: ...

    def integer(self, low: int, high: int) -> int: ...


class _HypothesisPick:
    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def one(self, options: Sequence[T]) -> T:
        return self._draw(st.sampled_from(options))

    def integer(self, low: int, high: int) -> int:
        return self._draw(st.integers(low, high))


class _RandomPick:
    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def one(self, options: Sequence[T]) -> T:
        return self._rng.choice(options)

    def integer(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)


# --------------------------------------------------------------------------- parts


def pick_policy(pick: Pick) -> Policy:
    """Policy knobs around the defaults of reading 1, small enough to matter here."""
    return Policy(
        alpha=pick.one([150.0, 0.0, 300.0]),
        beta=pick.one([800.0, 0.0]),
        cooldown_s=pick.one([600.0, 0.0, 1800.0]),
        max_evictions=pick.one([3, 1, 2]),
        eviction_window_s=pick.one([86400.0, 3600.0]),
        grace_s=120.0,
    )


def pick_nodes(pick: Pick, low: int, high: int) -> list[Node]:
    return [
        a_node(
            f"n{i}",
            gpus=pick.one([8, 4, 8, 2]),
            rack=f"r{i % 2}",
            schedulable=pick.one([True] * 4 + [False]),
        )
        for i in range(pick.integer(low, high))
    ]


def pick_queue_shape(pick: Pick, at_least: int) -> dict[str, str | None]:
    """1-3 queue names and their parents; a later queue sometimes has an earlier parent."""
    count = pick.one([n for n in (1, 2, 2, 3, 3) if n >= at_least])
    names = [f"q{i}" for i in range(count)]
    return {
        name: pick.one([None, None, None, *names[:i]]) if i else None
        for i, name in enumerate(names)
    }


def pick_queues(
    pick: Pick,
    shape: dict[str, str | None],
    usage: dict[str, int],
    need: dict[str, int],
    *,
    lean_to_reclaim: bool,
) -> list[Queue]:
    """Queues whose guarantees and capabilities sit where rules 3 and 5 change their
    verdict: exactly used, one GPU either side, room for the preemptor or not.

    ``usage`` is each queue's usage (descendants included), ``need`` the GPUs the
    preemptor would add to it (0 off its branch). ``lean_to_reclaim`` gives the
    preemptor's branch room under its guarantee and the others use above theirs."""
    queues = []
    for name, parent in shape.items():
        used, after = usage[name], usage[name] + need[name]
        options = [0, 0, used - 1, used, used + 1, after - 1, after, after + 4, 32]
        if lean_to_reclaim:
            options = [after, after + 4, 32] if need[name] else [0, used - 1, used - 2]
        guarantee = max(pick.one(options), 0)
        capability = pick.one([None, None, None, after - 1, after, after + 8])
        queues.append(
            a_queue(
                name,
                guarantee=guarantee,
                capability=None if capability is None else max(capability, guarantee),
                reclaimable=pick.one([True] * 4 + [False]),
                parent=parent,
            )
        )
    return queues


def _place(pick: Pick, free: dict[str, int], gpus: int) -> str | None:
    """A node (schedulable or not) with ``gpus`` free, now taken; None when none has."""
    fitting = sorted(n for n, left in free.items() if left >= gpus)
    if not fitting:
        return None
    node = pick.one(fitting)
    free[node] -= gpus
    return node


def pick_holder(
    pick: Pick, name: str, queues: list[str], free: dict[str, int], policy: Policy
) -> Job | None:
    """A job holding GPUs: usually Running, sometimes a half-placed Pending gang
    (decision 1) or a Suspended job still bound to nodes; None if nothing fits."""
    now = NOW
    kind = pick.one(["running"] * 8 + ["half-placed", "suspended-holding"])
    pods: list[Pod] = []
    for i in range(pick.integer(1, 4)):
        gpus = pick.one([1, 2, 4, 8])
        pod_name = f"{name}-{i}"
        if kind == "half-placed" and i > 0 and pick.one([False, True]):
            pods.append(a_pod(pod_name, gpus))
            continue
        if kind == "running" and i > 0 and pick.one([False] * 9 + [True]):
            # A finished pod still bound to a node holds nothing (reading 8).
            phase = pick.one([PodPhase.SUCCEEDED, PodPhase.FAILED])
            pods.append(a_pod(pod_name, gpus, sorted(free)[0], phase))
            continue
        node = _place(pick, free, gpus)
        if node is None:
            break
        pods.append(a_pod(pod_name, gpus, node))
    if not any(_holds(p) for p in pods):
        return None  # nothing placed, so nothing was taken from ``free``

    builder = (
        a_job(name)
        .in_queue(pick.one(queues))
        .priority(pick.one([0, 10, 100, 500, 1000, 2000]))
        .with_pods(*pods)
        .progress(pick.one([0.0, 0.1, 0.5, 0.9, 1.0]))
        .min_available(pick.one([None, *range(len(pods) + 1)]))
    )
    if kind == "half-placed":
        return builder.in_state(JobState.PENDING).submitted(now - 50).build()

    cooldown = policy.cooldown_s
    ran = pick.one(
        [3600.0, 7200.0, 36000.0, 360000.0] * 2 + [0.0, 60.0, cooldown - 1, cooldown, cooldown + 1]
    )
    started: float | None = now - max(ran, 0.0)
    if pick.one([False] * 15 + [True]):
        started = None  # never started (decision 2)
    elif pick.one([False] * 15 + [True]):
        started = now + 30  # clock skew (decision 2)
    checkpoint: float | None = None
    choice = pick.one(["none", "now", "start", "middle", "skew"])
    if choice == "now":
        checkpoint = now
    elif choice == "skew":
        checkpoint = now + 5
    elif started is not None and choice == "start":
        checkpoint = started
    elif started is not None and choice == "middle":
        checkpoint = float(int(started + (now - started) / 3))

    window = policy.eviction_window_s
    ages = [2 * window, 0.0, 100.0, window - 1, window, window + 1, -10.0]
    limit = policy.max_evictions
    count = max(pick.one([0, 0, 0, 0, 0, 1, limit - 1, limit, limit + 1]), 0)
    evictions = sorted(now - pick.one(ages) for _ in range(count))
    state = JobState.SUSPENDED if kind == "suspended-holding" else JobState.RUNNING
    builder = (
        builder.in_state(state)
        .started(started)
        .checkpointed(checkpoint)
        .submitted(now - 400000)
        .evicted_at(*evictions)
    )
    if pick.one([True] * 9 + [False]) is False:
        builder = builder.not_preemptable()
    return builder.build()


def _holds(pod: Pod) -> bool:
    return pod.node is not None and pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED)


# --------------------------------------------------------------------------- cases


def make_case(
    pick: Pick,
    *,
    nodes: tuple[int, int] = (1, 6),
    jobs: tuple[int, int] = (0, 7),
    reclaim: bool | None = None,
) -> Case:
    """A valid snapshot with a Pending preemptor ``pre`` and some jobs holding GPUs.

    ``reclaim=True`` leans to cross-queue plans: two or three queues, the
    preemptor in a quieter one, its branch under its guarantee, the others
    above theirs."""
    lean = pick.one([False, True]) if reclaim is None else reclaim
    policy = pick_policy(pick)
    node_list = pick_nodes(pick, *nodes)
    shape = pick_queue_shape(pick, at_least=2 if reclaim else 1)
    queue_names = list(shape)
    free = {n.name: n.gpus for n in node_list}
    low, high = jobs
    job_list: list[Job] = []
    count = pick.integer(pick.one([low, (low + high + 1) // 2]), high)
    for i in range(count):
        job = pick_holder(pick, f"j{i}", queue_names, free, policy)
        if job is not None:
            job_list.append(job)

    # The preemptor: often a gang that only fits after evictions, mostly one the
    # empty cluster could hold.
    schedulable = [n for n in node_list if n.schedulable]
    largest = max((n.gpus for n in schedulable), default=8)
    largest_free = max((free[n.name] for n in schedulable), default=0)
    too_big = min(largest_free + 1, largest)
    gang_size = pick.one([1, 2, 2, 4, 8, largest, too_big, too_big, too_big])
    pod_count = pick.integer(1, 3)
    if pick.integer(0, 5):
        slots = sum(n.gpus // max(gang_size, 1) for n in schedulable)
        pod_count = max(1, min(pod_count, slots))
    pre_pods: list[Pod] = []
    for i in range(pod_count):
        gpus = gang_size if pick.integer(0, 4) else pick.one([1, 2, 4, 8])
        node = None
        if i > 0 and pick.one([False] * 7 + [True]):
            node = _place(pick, free, gpus)  # a half-placed preemptor (decision 5)
        pre_pods.append(a_pod(f"{PREEMPTOR}-{i}", gpus, node))
    busiest = max(queue_names, key=lambda q: sum(j.queue == q for j in job_list))
    quieter = [q for q in queue_names if q != busiest] or queue_names
    pre_queue = pick.one(quieter if reclaim else queue_names + quieter)
    preemptor = (
        a_job(PREEMPTOR)
        .in_queue(pre_queue)
        .priority(pick.one([0, 500, 1000, 2000, 3000, 5000, 5000]))
        .with_pods(*pre_pods)
        .in_state(JobState.PENDING)
        .submitted(NOW - 30)
        .build()
    )
    if pick.one([False, True]):  # another Pending job, not the one we plan for
        job_list.append(
            a_job("waiting")
            .in_queue(pick.one(queue_names))
            .priority(pick.one([0, 1000, 3000]))
            .pending(pods=1, gpus=pick.one([1, 8]), submitted_at=NOW - 60)
            .build()
        )
    job_list.insert(pick.integer(0, len(job_list)), preemptor)

    own = dict.fromkeys(queue_names, 0)
    for job in job_list:
        own[job.queue] += sum(p.gpus for p in job.pods if _holds(p))
    usage = dict.fromkeys(queue_names, 0)
    need = dict.fromkeys(queue_names, 0)
    to_place = sum(p.gpus for p in pre_pods if p.node is None)
    for name in queue_names:
        cursor: str | None = name
        while cursor is not None:
            usage[cursor] += own[name]
            if name == pre_queue:
                need[cursor] += to_place
            cursor = shape[cursor]
    queues = pick_queues(pick, shape, usage, need, lean_to_reclaim=lean)
    snapshot = a_snapshot(now=NOW, nodes=node_list, queues=queues, jobs=job_list, policy=policy)
    return Case(snapshot, PREEMPTOR)


@st.composite
def cases(
    draw: st.DrawFn, max_nodes: int = 6, max_jobs: int = 7, *, reclaim: bool | None = None
) -> Case:
    """Hypothesis strategy for :func:`make_case` (it shrinks to small clusters)."""
    return make_case(
        _HypothesisPick(draw), nodes=(1, max_nodes), jobs=(0, max_jobs), reclaim=reclaim
    )


def any_cases() -> st.SearchStrategy[Case]:
    """Cases of every kind, a third of them leaning to reclaim."""
    return st.one_of(cases(), cases(), cases(reclaim=True))


def seeded_case(seed: int) -> Case:
    """A fixed case from ``seed``: fuller clusters (2-6 nodes, 3-7 other jobs)."""
    pick = _RandomPick(seed)
    return make_case(pick, nodes=(2, 6), jobs=(3, 7), reclaim=pick.one([None, True]))


def random_case(seed: int) -> Case:
    """A fixed case of every kind from ``seed``, as ``any_cases`` draws them, for sweeps."""
    pick = _RandomPick(seed)
    return make_case(pick, reclaim=pick.one([None, None, True]))


def packed_case(seed: int) -> Case:
    """A fixed, full cluster from ``seed`` whose preemptor has 2-4 identical pods.

    6-12 nodes of 8 GPUs packed with gangs of 1-4 pods spread across nodes,
    elastic or not, some evicted lately (protected by cooldowns or eviction
    limits), a few not preemptable; two queues with room to reclaim. Too big
    for the brute-force reference, small enough for the search to complete:
    these are the searches whose identical pods take nodes in one order,
    which the first-node bound (``first_charges``) is about.
    """
    pick = _RandomPick(seed)
    policy = pick_policy(pick)
    nodes = [a_node(f"n{i:02d}", gpus=8, rack=f"r{i % 3}") for i in range(pick.integer(8, 14))]
    free = {n.name: n.gpus for n in nodes}
    jobs: list[Job] = []
    for j in range(60):
        if not any(free.values()):
            break
        pods = []
        for i in range(pick.integer(1, 4)):
            gpus = pick.one([1, 2, 4, 4, 8, 8])
            node = _place(pick, free, gpus)
            if node is not None:
                pods.append(a_pod(f"j{j:02d}-{i}", gpus, node))
        if not pods:
            continue
        count = len(pods)
        jobs.append(
            _packed_job(pick, policy, f"j{j:02d}", pods, [None, None, 1, count], (1 / 2, 1.0))
        )
    each = pick.one([8, 8, 4])
    sizes = [each] * pick.integer(2, 6)
    return _with_preemptor(pick, policy, nodes, jobs, sizes, sla=(False, True, True))


def varied_case(seed: int) -> Case:
    """A fixed, full cluster from ``seed`` with more kinds in it than ``packed_case``.

    6-16 nodes of 4, 8 or 16 GPUs (some cordoned), sometimes a few GPUs left
    free, gangs of up to 7 pods with every kind of ``min_available``, and a
    preemptor whose pods come in groups of identical sizes ([8, 8, 8, 4, 4,
    4], [16, 4, 4, 4], [4, 4, 4, 2, 2, 2, 1, 1], ...): each group takes its
    own nodes in rank order while the others' are placed around them.
    """
    pick = _RandomPick(seed)
    policy = pick_policy(pick)
    nodes = [
        a_node(
            f"n{i:02d}",
            gpus=pick.one([16, 8, 16, 4]),
            rack=f"r{i % 4}",
            schedulable=pick.one([True] * 7 + [False]),
        )
        for i in range(pick.integer(6, 16))
    ]
    free = {n.name: n.gpus for n in nodes}
    slack = pick.one([0, 0, 1, 3, 6, 12])
    jobs: list[Job] = []
    for j in range(80):
        if sum(free.values()) <= slack:
            break
        pods = []
        for i in range(pick.integer(1, 7)):
            node = _place(pick, free, gpus := pick.one([1, 2, 2, 4, 4, 8]))
            if node is not None:
                pods.append(a_pod(f"j{j:02d}-{i}", gpus, node))
        if not pods:
            continue
        count = len(pods)
        min_available = [None, 0, 1, count, max(1, count - 1), max(1, count // 2)]
        jobs.append(
            _packed_job(pick, policy, f"j{j:02d}", pods, min_available, (1 / 2, 1.0, 3 / 4))
        )
    sizes = pick.one(
        [
            [4] * 5,
            [8, 8, 8, 4, 4, 4],
            [2] * 6,
            [8] * 5,
            [16, 4, 4, 4],
            [8, 8, 2, 2, 2, 2],
            [4, 4, 4, 2, 2, 2, 1, 1],
        ]
    )
    return _with_preemptor(pick, policy, nodes, jobs, sizes, sla=(False, True))


def _packed_job(
    pick: Pick,
    policy: Policy,
    name: str,
    pods: list[Pod],
    min_available: Sequence[int | None],
    checkpointed_after: Sequence[float],
) -> Job:
    """A running job of the packed clusters: evicted lately (so protected) two times in
    three, not preemptable one in twenty, its checkpoint none or at one of
    ``checkpointed_after`` (shares of its run)."""
    ran = pick.one([600.0, 3600.0, 7200.0, 36000.0])
    recent = NOW - pick.one([100.0, policy.cooldown_s + 60, 2 * policy.eviction_window_s])
    builder = (
        a_job(name)
        .in_queue(pick.one(["research", "research", "prod"]))
        .priority(pick.one([0, 10, 100, 500, 1000]))
        .with_pods(*pods)
        .progress(pick.one([0.0, 0.1, 0.5, 0.9]))
        .min_available(pick.one(min_available))
        .started(NOW - ran)
        .checkpointed(pick.one([None, *(NOW - ran + share * ran for share in checkpointed_after)]))
        .submitted(NOW - ran - 60)
        .evicted_at(*([recent] if pick.one([False, True, True]) else []))
    )
    if pick.one([False] * 19 + [True]):
        builder = builder.not_preemptable()
    return builder.build()


def _with_preemptor(
    pick: Pick,
    policy: Policy,
    nodes: list[Node],
    jobs: list[Job],
    sizes: list[int],
    *,
    sla: Sequence[bool],
) -> Case:
    """The packed clusters' case: a Pending production preemptor with pods of ``sizes``,
    with an SLA as ``sla`` picks (protected victims are then taken last), and two
    queues, production's guarantee half the cluster."""
    preemptor = (
        a_job(PREEMPTOR)
        .in_queue("prod")
        .priority(pick.one([2000, 5000]))
        .with_pods(*(a_pod(f"{PREEMPTOR}-{i}", gpus) for i, gpus in enumerate(sizes)))
        .in_state(JobState.PENDING)
        .submitted(NOW - 30)
        .due_by(NOW + 3600 if pick.one(sla) else None)
        .build()
    )
    total = sum(n.gpus for n in nodes)
    queues = [
        a_queue("prod", guarantee=total // 2, weight=4.0),
        a_queue("research", guarantee=pick.one([0, total // 8])),
    ]
    return Case(
        a_snapshot(now=NOW, nodes=nodes, queues=queues, jobs=[*jobs, preemptor], policy=policy),
        PREEMPTOR,
    )


def tied_repair_case(seed: int, *, small: bool = False) -> Case:
    """A fixed, full cluster from ``seed`` whose plan must also evict from the preemptor's
    own queue, where many jobs lose nothing: the plans tie on lost work, and the
    number of victims and their weight decide.

    Production is over what the queue rules allow once the preemptor is placed:
    over its capability, or over its guarantee while it reclaims from research.
    Evicting more of production's own jobs repairs that, and two in three of them
    checkpointed just now. Jobs of 1-3 pods of 1-4 GPUs and several priorities give
    many repairs of equal lost work and different counts and weights. ``small``
    keeps the cluster within the brute-force reference's reach (2-3 nodes).
    """
    pick = _RandomPick(seed)
    policy = pick_policy(pick)
    count = pick.integer(2, 3) if small else pick.integer(6, 14)
    nodes = [a_node(f"n{i:02d}", gpus=8, rack=f"r{i % 2}") for i in range(count)]
    free = {n.name: n.gpus for n in nodes}
    jobs: list[Job] = []
    held = dict.fromkeys(("prod", "research"), 0)
    for j in range(80):
        if not any(free.values()):
            break
        pods = []
        for i in range(pick.integer(1, 2 if small else 3)):
            node = _place(pick, free, gpus := pick.one([1, 1, 2, 2, 4]))
            if node is not None:
                pods.append(a_pod(f"j{j:02d}-{i}", gpus, node))
        if not pods:
            continue
        queue = pick.one(["prod", "prod", "research"])
        ran = pick.one([3600.0, 7200.0, 36000.0])
        fresh = queue == "prod" and pick.one([True, False])
        checkpoint = NOW if fresh else pick.one([None, NOW - ran / 2])
        jobs.append(
            a_job(f"j{j:02d}")
            .in_queue(queue)
            .priority(pick.one([0, 10, 100, 500, 1000]))
            .with_pods(*pods)
            .progress(pick.one([0.0, 0.1, 0.5, 0.9]))
            .min_available(pick.one([None, 1, len(pods)]))
            .started(NOW - ran)
            .checkpointed(checkpoint)
            .submitted(NOW - ran - 60)
            .build()
        )
        held[queue] += sum(p.gpus for p in pods)
    sizes = [pick.one([8, 4])] * pick.integer(1, 2)
    over = pick.integer(1, 16)
    after = held["prod"] + sum(sizes)
    if pick.one([False, True]):
        prod = a_queue("prod", guarantee=0, capability=max(after - over, 0), weight=4.0)
    else:
        prod = a_queue("prod", guarantee=max(after - over, 0), weight=4.0)
    preemptor = (
        a_job(PREEMPTOR)
        .in_queue("prod")
        .priority(5000)
        .with_pods(*(a_pod(f"{PREEMPTOR}-{i}", gpus) for i, gpus in enumerate(sizes)))
        .in_state(JobState.PENDING)
        .submitted(NOW - 30)
        .build()
    )
    queues = [prod, a_queue("research", guarantee=0)]
    return Case(
        a_snapshot(now=NOW, nodes=nodes, queues=queues, jobs=[*jobs, preemptor], policy=policy),
        PREEMPTOR,
    )
