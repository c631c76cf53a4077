"""Hypothesis strategies for small, valid, realistic cluster snapshots.

A generated case is a snapshot plus the name of its preemptor, a Pending job
called ``pre`` with 1-3 unplaced pods (sometimes half placed already). Around
it: 1-6 nodes of 2, 4 or 8 GPUs (some unschedulable), 1-3 queues (sometimes a
parent and its children) and up to 7 other jobs holding GPUs, with the values
that sit on the contract's edges: started exactly ``cooldown_s`` ago,
checkpointed exactly at ``now``, evictions exactly ``eviction_window_s`` ago,
at the eviction limit, elastic ``min_available`` (0 included), non-preemptable
jobs, finished pods still bound to a node, half-placed Pending gangs.

Nodes are filled pod by pod from what is left on them, so a node is never
over-committed and every snapshot passes validation. Times are whole seconds,
so lost work (GPUs times seconds) is exact and ties are real ties.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from gpuyield.schemas import Job, JobState, Node, Pod, PodPhase, Policy, Queue, Snapshot

from builders import NOW, a_job, a_node, a_pod, a_queue, a_snapshot

PREEMPTOR = "pre"


@dataclass(frozen=True)
class Case:
    """A snapshot and the job to plan for."""

    snapshot: Snapshot
    preemptor: str


def policies() -> st.SearchStrategy[Policy]:
    """Policy knobs around the defaults of reading 1, small enough to matter here."""
    return st.builds(
        Policy,
        alpha=st.sampled_from([0.0, 150.0, 300.0]),
        beta=st.sampled_from([0.0, 800.0]),
        cooldown_s=st.sampled_from([0.0, 600.0, 1800.0]),
        max_evictions=st.sampled_from([1, 2, 3]),
        eviction_window_s=st.sampled_from([3600.0, 86400.0]),
        grace_s=st.just(120.0),
    )


@st.composite
def node_lists(draw: st.DrawFn, max_nodes: int = 6) -> list[Node]:
    count = draw(st.integers(1, max_nodes))
    return [
        a_node(
            f"n{i}",
            gpus=draw(st.sampled_from([2, 4, 8, 8])),
            rack=f"r{i % 2}",
            schedulable=draw(st.sampled_from([True] * 4 + [False])),
        )
        for i in range(count)
    ]


@st.composite
def queue_shapes(draw: st.DrawFn) -> dict[str, str | None]:
    """1-3 queue names and their parents; a later queue sometimes has an earlier parent."""
    names = [f"q{i}" for i in range(draw(st.sampled_from([1, 2, 2, 3, 3])))]
    return {
        name: draw(st.sampled_from([None, None, None, *names[:i]])) if i else None
        for i, name in enumerate(names)
    }


@st.composite
def queues_around(
    draw: st.DrawFn,
    shape: dict[str, str | None],
    usage: dict[str, int],
    need: dict[str, int],
    *,
    lean_to_reclaim: bool = False,
) -> list[Queue]:
    """Queues whose guarantees and capabilities sit near their usage, where rules 3 and 5
    change their verdict: exactly used, one GPU either side, room for the preemptor or not.

    ``usage`` is each queue's usage (descendants included), ``need`` the GPUs the
    preemptor would add to it (0 off its branch). ``lean_to_reclaim`` gives the
    preemptor's branch room under its guarantee and the others use above theirs."""
    queues = []
    for name, parent in shape.items():
        used, after = usage[name], usage[name] + need[name]
        options = [0, 0, used - 1, used, used + 1, after - 1, after, after + 4, 32]
        if lean_to_reclaim:
            options = [after, after + 4, 32] if need[name] else [0, used - 1, used - 2]
        guarantee = draw(st.sampled_from(options))
        guarantee = max(guarantee, 0)
        capability = draw(st.sampled_from([None, None, None, after - 1, after, after + 8]))
        if capability is not None:
            capability = max(capability, guarantee)
        queues.append(
            a_queue(
                name,
                guarantee=guarantee,
                capability=capability,
                reclaimable=draw(st.sampled_from([True] * 4 + [False])),
                parent=parent,
            )
        )
    return queues


def _place(draw: st.DrawFn, free: dict[str, int], gpus: int) -> str | None:
    """A node with ``gpus`` free GPUs (any node, schedulable or not), taken, or None."""
    fitting = sorted(n for n, left in free.items() if left >= gpus)
    if not fitting:
        return None
    node = draw(st.sampled_from(fitting))
    free[node] -= gpus
    return node


@st.composite
def running_job(
    draw: st.DrawFn, name: str, queues: list[str], free: dict[str, int], policy: Policy
) -> Job | None:
    """A job holding GPUs (usually Running, sometimes a half-placed Pending gang)."""
    now = NOW
    kind = draw(st.sampled_from(["running"] * 8 + ["half-placed", "suspended-holding"]))
    pods: list[Pod] = []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        pod_name = f"{name}-{i}"
        if kind == "half-placed" and i > 0 and draw(st.booleans()):
            pods.append(a_pod(pod_name, gpus))
            continue
        if kind == "running" and i > 0 and draw(st.sampled_from([False] * 9 + [True])):
            # A finished pod still bound to a node holds nothing (reading 8).
            phase = draw(st.sampled_from([PodPhase.SUCCEEDED, PodPhase.FAILED]))
            pods.append(a_pod(pod_name, gpus, sorted(free)[0], phase))
            continue
        node = _place(draw, free, gpus)
        if node is None:
            break
        pods.append(a_pod(pod_name, gpus, node))
    if not any(p.node is not None and p.phase == PodPhase.RUNNING for p in pods):
        return None  # nothing placed, so nothing was taken from ``free``

    builder = (
        a_job(name)
        .in_queue(draw(st.sampled_from(queues)))
        .priority(draw(st.sampled_from([0, 10, 100, 500, 1000, 2000])))
        .with_pods(*pods)
        .progress(draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0])))
        .min_available(draw(st.one_of(st.none(), st.integers(0, len(pods)))))
    )
    if kind == "half-placed":
        return builder.in_state(JobState.PENDING).submitted(now - 50).build()

    cooldown = policy.cooldown_s
    ran = draw(
        st.sampled_from(
            [0.0, 60.0, cooldown - 1, cooldown, cooldown + 1]
            + [3600.0, 7200.0, 36000.0, 360000.0] * 2
        )
    )
    started: float | None = now - max(ran, 0.0)
    if draw(st.sampled_from([False] * 15 + [True])):
        started = None  # never started (decision 2)
    elif draw(st.sampled_from([False] * 15 + [True])):
        started = now + 30  # clock skew (decision 2)
    checkpoint_choice = draw(st.sampled_from(["none", "now", "start", "middle", "skew"]))
    checkpoint: float | None = None
    if checkpoint_choice == "now":
        checkpoint = now
    elif checkpoint_choice == "skew":
        checkpoint = now + 5
    elif started is not None and checkpoint_choice == "start":
        checkpoint = started
    elif started is not None and checkpoint_choice == "middle":
        checkpoint = float(int(started + (now - started) / 3))

    window = policy.eviction_window_s
    ages = st.sampled_from([0.0, 100.0, window - 1, window, window + 1, 2 * window, -10.0])
    limit = policy.max_evictions
    count = draw(st.sampled_from([0, 0, 0, 0, 0, 1, limit - 1, limit, limit + 1]))
    evictions = [now - draw(ages) for _ in range(max(count, 0))]
    state = JobState.SUSPENDED if kind == "suspended-holding" else JobState.RUNNING
    builder = (
        builder.in_state(state)
        .started(started)
        .checkpointed(checkpoint)
        .submitted(now - 400000)
        .evicted_at(*sorted(evictions))
    )
    if draw(st.sampled_from([True] * 9 + [False])) is False:
        builder = builder.not_preemptable()
    return builder.build()


@st.composite
def cases(draw: st.DrawFn, max_nodes: int = 6, max_jobs: int = 7) -> Case:
    """A valid snapshot with a Pending preemptor ``pre`` and up to ``max_jobs`` others."""
    policy = draw(policies())
    nodes = draw(node_lists(max_nodes))
    shape = draw(queue_shapes())
    queue_names = list(shape)
    free = {n.name: n.gpus for n in nodes}
    jobs: list[Job] = []
    count = draw(st.one_of(st.integers(0, max_jobs), st.integers(max_jobs // 2, max_jobs)))
    for i in range(count):
        job = draw(running_job(f"j{i}", queue_names, free, policy))
        if job is not None:
            jobs.append(job)

    largest_free = max((free[n.name] for n in nodes if n.schedulable), default=0)
    too_big = min(largest_free + 1, 8)  # a pod that only fits after evictions, if any
    gang_size = draw(st.sampled_from([1, 2, 2, 4, 8, too_big, too_big]))
    pre_pods: list[Pod] = []
    for i in range(draw(st.integers(1, 3))):
        gpus = gang_size if draw(st.integers(0, 4)) else draw(st.sampled_from([1, 2, 4, 8]))
        node = None
        if i > 0 and draw(st.sampled_from([False] * 7 + [True])):
            node = _place(draw, free, gpus)  # a half-placed preemptor (decision 5)
        pre_pods.append(a_pod(f"{PREEMPTOR}-{i}", gpus, node))
    busiest = max(queue_names, key=lambda q: sum(j.queue == q for j in jobs))
    others = [q for q in queue_names if q != busiest] or queue_names
    pre_queue = draw(st.sampled_from(queue_names + others))
    preemptor = (
        a_job(PREEMPTOR)
        .in_queue(pre_queue)
        .priority(draw(st.sampled_from([0, 500, 1000, 2000, 3000, 5000, 5000])))
        .with_pods(*pre_pods)
        .in_state(JobState.PENDING)
        .submitted(NOW - 30)
        .build()
    )
    # Another Pending job, sometimes: it is not the preemptor we ask for.
    if draw(st.booleans()):
        jobs.append(
            a_job("waiting")
            .in_queue(draw(st.sampled_from(queue_names)))
            .priority(draw(st.sampled_from([0, 1000, 3000])))
            .pending(pods=1, gpus=draw(st.sampled_from([1, 8])), submitted_at=NOW - 60)
            .build()
        )
    jobs.insert(draw(st.integers(0, len(jobs))), preemptor)

    own: dict[str, int] = dict.fromkeys(queue_names, 0)
    for job in jobs:
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
    queues = draw(queues_around(shape, usage, need, lean_to_reclaim=draw(st.booleans())))
    snapshot = a_snapshot(now=NOW, nodes=nodes, queues=queues, jobs=jobs, policy=policy)
    return Case(snapshot, PREEMPTOR)


def _holds(pod: Pod) -> bool:
    return pod.node is not None and pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED)
