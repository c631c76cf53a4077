"""A brute-force reference planner, for comparison with the real one on small clusters.

Written from the contract (``shared/spec/plan-contract.md``, format v1) and our
readings of it (``docs/design/0001-planner-readings.md``), never from the
planner's code: its worth is that it is independent. It is slow on purpose and
simple on purpose. It enumerates every eviction set that respects gang
integrity, keeps the feasible, minimal ones and returns the one with the least
lexicographic objective. The only cleverness is a branch-and-bound cut that
drops a partial set once it is already strictly worse than the best plan
found on criteria that can only grow as victims are added (protected count,
lost work, victim count), which never drops an optimum.

Citations: "C rule N" is the contract's "Who may be a victim" rule N, "C
reading N" its precise reading N, "D N" decision N of our design doc.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from gpuyield.schemas import Job, Pod, Snapshot

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class UnknownPreemptorError(ValueError):
    """The named preemptor is not a job of the snapshot."""


# --------------------------------------------------------------------------- facts


def holds_gpus(pod: Pod) -> bool:
    """C reading 8: the pod is on a node and neither Succeeded nor Failed."""
    return pod.node is not None and str(pod.phase) not in FINISHED_PHASES


def holding_pods(job: Job) -> tuple[Pod, ...]:
    """The pods of ``job`` that hold GPUs (D 1: only these can be evicted)."""
    return tuple(p for p in job.pods if holds_gpus(p))


def pods_to_place(job: Job) -> tuple[Pod, ...]:
    """D 5: the preemptor's pods without a node that are not finished."""
    return tuple(p for p in job.pods if p.node is None and str(p.phase) not in FINISHED_PHASES)


def gang_min(job: Job) -> int:
    """C snapshot: ``min_available`` defaults to the number of pods."""
    return len(job.pods) if job.min_available is None else job.min_available


def since(now: float, t: float) -> float:
    """Seconds from ``t`` to ``now``; D 2: a negative interval counts as 0."""
    return max(0.0, now - t)


def run_hours(job: Job, now: float) -> float:
    """D 3 (and D 2): hours since ``started_at`` for a Running job, else 0."""
    if str(job.state) != "Running" or job.started_at is None:
        return 0.0
    return since(now, job.started_at) / 3600.0


def w_eff(job: Job, snapshot: Snapshot) -> float:
    """C "Effective weight": priority + alpha ln(1 + T_run_hours) + beta progress^2."""
    pol = snapshot.policy
    hours = run_hours(job, snapshot.now)
    return job.priority + pol.alpha * math.log(1.0 + hours) + pol.beta * job.progress**2


def preemptor_weight(job: Job, snapshot: Snapshot) -> float:
    """C "Effective weight" and D 4: a Pending preemptor weighs its priority."""
    return job.priority if str(job.state) == "Pending" else w_eff(job, snapshot)


def in_cooldown(job: Job, snapshot: Snapshot) -> bool:
    """C reading 2 and D 2: ``now - started_at < cooldown_s``; never started: no."""
    if job.started_at is None:
        return False
    return since(snapshot.now, job.started_at) < snapshot.policy.cooldown_s


def at_eviction_limit(job: Job, snapshot: Snapshot) -> bool:
    """C reading 3: evictions with ``0 <= now - e <= window`` reach ``max_evictions``."""
    pol = snapshot.policy
    recent = [e for e in job.evictions if 0 <= snapshot.now - e <= pol.eviction_window_s]
    return len(recent) >= pol.max_evictions


def pod_lost_work(pod: Pod, job: Job, now: float) -> float:
    """C reading 9 and D 2: GPUs times seconds since the checkpoint, else since start."""
    mark = job.last_checkpoint_at if job.last_checkpoint_at is not None else job.started_at
    if mark is None:
        return 0.0
    return pod.gpus * since(now, mark)


def choose_preemptor(snapshot: Snapshot, name: str | None) -> Job | None:
    """C "Plan": the named job; else the Pending job with the highest priority,
    ties by earliest ``submitted_at`` (an absent one sorts last), then name.
    D 6: None when there is no Pending job."""
    if name is not None:
        job = next((j for j in snapshot.jobs if j.name == name), None)
        if job is None:
            raise UnknownPreemptorError(name)
        return job
    pending = [j for j in snapshot.jobs if str(j.state) == "Pending"]
    if not pending:
        return None

    def order(j: Job) -> tuple[float, float, str]:
        submitted = math.inf if j.submitted_at is None else j.submitted_at
        return (-j.priority, submitted, j.name)

    return min(pending, key=order)


# --------------------------------------------------------------------------- queues


def queue_chain(snapshot: Snapshot, queue: str) -> list[str]:
    """``queue`` followed by its ancestors, nearest first."""
    parents = {q.name: q.parent for q in snapshot.queues}
    chain: list[str] = []
    cursor: str | None = queue
    while cursor is not None:
        chain.append(cursor)
        cursor = parents[cursor]
    return chain


def queue_usage(snapshot: Snapshot, held: Mapping[str, int]) -> dict[str, int]:
    """C reading 6: a queue's usage is its own jobs' GPUs plus its descendants'.

    ``held`` maps each queue to the GPUs its own jobs hold (not descendants')."""
    usage = {q.name: 0 for q in snapshot.queues}
    for queue, gpus in held.items():
        for q in queue_chain(snapshot, queue):
            usage[q] += gpus
    return usage


@dataclass(frozen=True)
class Relation:
    """How a candidate's queue V relates to the preemptor's queue Q (C reading 6)."""

    kind: str  # "preempt" (same queue), "reclaim", or "kin" (ancestor/descendant: D 11)
    q_branch: tuple[str, ...] = ()  # Q and its ancestors strictly below L
    v_branch: tuple[str, ...] = ()  # V and its ancestors strictly below L


def relation(snapshot: Snapshot, q: str, v: str) -> Relation:
    """C reading 6 and D 11: L is the lowest common ancestor, or the root above all."""
    if q == v:
        return Relation("preempt")
    q_chain, v_chain = queue_chain(snapshot, q), queue_chain(snapshot, v)
    if v in q_chain or q in v_chain:
        return Relation("kin")
    common = next((x for x in v_chain if x in q_chain), None)
    q_branch = q_chain if common is None else q_chain[: q_chain.index(common)]
    v_branch = v_chain if common is None else v_chain[: v_chain.index(common)]
    return Relation("reclaim", tuple(q_branch), tuple(v_branch))


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class RefPlan:
    """What the reference decided: feasibility and the objective, criterion by criterion."""

    preemptor: str | None
    feasible: bool
    action: str = "none"
    protected_victims: int = 0
    lost_gpu_seconds: float = 0.0
    victim_jobs: tuple[str, ...] = ()  # sorted
    evicted_pods: tuple[str, ...] = ()  # sorted
    victim_weight: float = 0.0
    explored: int = 0  # leaves evaluated, for sizing tests


@dataclass
class _Candidate:
    job: Job
    rel: Relation
    weight: float
    protected: bool
    pods: tuple[Pod, ...]  # holding pods
    options: list[frozenset[str]] = field(default_factory=list)  # non-empty eviction sets


class _Problem:
    """One preemptor on one snapshot, with everything that does not depend on the set."""

    def __init__(self, snapshot: Snapshot, pre: Job) -> None:
        self.snapshot = snapshot
        self.pre = pre
        self.q = pre.queue
        self.w_pre = preemptor_weight(pre, snapshot)
        self.to_place = sorted((p.gpus for p in pods_to_place(pre)), reverse=True)
        self.queues = {q.name: q for q in snapshot.queues}
        self.job_of_pod: dict[str, Job] = {}
        self.pod: dict[str, Pod] = {}
        held: dict[str, int] = {}
        self.node_used: dict[str, int] = {n.name: 0 for n in snapshot.nodes}
        for job in snapshot.jobs:
            for p in holding_pods(job):
                self.job_of_pod[p.name] = job
                self.pod[p.name] = p
                held[job.queue] = held.get(job.queue, 0) + p.gpus
                assert p.node is not None
                self.node_used[p.node] += p.gpus
        self.usage_before = queue_usage(snapshot, held)
        self.held_before = held
        self.candidates = [c for c in self._candidates() if c.options]
        self.cand_by_job = {c.job.name: c for c in self.candidates}

    def _candidates(self) -> Iterator[_Candidate]:
        """D 1: every other job holding GPUs, kept only if statically eligible."""
        snap = self.snapshot
        for job in snap.jobs:
            if job.name == self.pre.name:
                continue
            pods = holding_pods(job)
            if not pods:
                continue
            # C rule 1.
            if not job.preemptable or in_cooldown(job, snap) or at_eviction_limit(job, snap):
                continue
            rel = relation(snap, self.q, job.queue)
            weight = w_eff(job, snap)
            if rel.kind == "kin":  # D 11
                continue
            if rel.kind == "preempt" and not weight < self.w_pre:  # C rule 2
                continue
            if rel.kind == "reclaim" and not all(  # C rule 3, reading 6: before the plan
                self.queues[v].reclaimable and self.usage_before[v] > self.queues[v].guarantee.gpu
                for v in rel.v_branch
            ):
                continue
            protected = rel.kind == "reclaim" and weight >= self.w_pre  # C rule 3
            cand = _Candidate(job, rel, weight, protected, pods)
            cand.options = list(gang_options(pods, gang_min(job)))
            yield cand

    # ------------------------------------------------------------------ one plan

    def feasible(self, evicted: frozenset[str]) -> bool:
        """C rules 1-5 for the set of evicted pod names (all of statically eligible jobs)."""
        snap = self.snapshot
        victims: dict[str, list[Pod]] = {}
        for name in evicted:
            victims.setdefault(self.job_of_pod[name].name, []).append(self.pod[name])
        # C rule 4: none or at least min_available left holding GPUs.
        for job_name, gone in victims.items():
            cand = self.cand_by_job[job_name]
            left = len(cand.pods) - len(gone)
            if left != 0 and left < gang_min(cand.job):
                return False
        # Usage after the whole plan (C reading 5): victims gone, preemptor placed.
        held = dict(self.held_before)
        for name in evicted:
            job = self.job_of_pod[name]
            held[job.queue] -= self.pod[name].gpus
        held[self.q] = held.get(self.q, 0) + sum(self.to_place)
        after = queue_usage(snap, held)
        # C rule 5 and D 10: capability of Q and its ancestors, whatever the action.
        for q in queue_chain(snap, self.q):
            cap = self.queues[q].capability.gpu
            if cap is not None and after[q] > cap:
                return False
        # C rule 3 and reading 6 / D 11, per cross-queue victim with its own L.
        for job_name in victims:
            rel = self.cand_by_job[job_name].rel
            if rel.kind != "reclaim":
                continue
            if any(after[q] > self.queues[q].guarantee.gpu for q in rel.q_branch):
                return False
            if any(after[v] < self.queues[v].guarantee.gpu for v in rel.v_branch):
                return False
        # C rule 5: every pod to place on a schedulable node with enough free GPUs.
        used = dict(self.node_used)
        for name in evicted:
            node = self.pod[name].node
            assert node is not None
            used[node] -= self.pod[name].gpus
        capacities = [n.gpus - used[n.name] for n in snap.nodes if n.schedulable]
        return packs(self.to_place, capacities)

    def minimal(self, evicted: frozenset[str]) -> bool:
        """D 9: no feasible plan evicts a smaller gang-valid subset of one victim's
        evicted pods, the other victims unchanged (sparing a whole job is the
        empty subset); self.feasible rejects what gang integrity forbids."""
        by_job: dict[str, set[str]] = {}
        for name in evicted:
            by_job.setdefault(self.job_of_pod[name].name, set()).add(name)
        for pods in by_job.values():
            others = evicted - pods
            ordered = sorted(pods)
            for size in range(len(ordered)):
                for kept in itertools.combinations(ordered, size):
                    if self.feasible(others | frozenset(kept)):
                        return False
        return True

    def key(self, evicted: frozenset[str]) -> tuple[int, float, int, float, list[str], list[str]]:
        """C "What the plan minimises", C reading 7, D 7 and D 8."""
        jobs = sorted({self.job_of_pod[n].name for n in evicted})
        cands = [self.cand_by_job[j] for j in jobs]
        lost = math.fsum(
            pod_lost_work(self.pod[n], self.job_of_pod[n], self.snapshot.now) for n in evicted
        )
        return (
            sum(c.protected for c in cands),
            lost,
            len(jobs),
            math.fsum(c.weight for c in cands),
            jobs,
            sorted(evicted),
        )

    # ------------------------------------------------------------------ search

    def solve(self) -> RefPlan:
        best: frozenset[str] | None = None
        best_key: tuple[int, float, int, float, list[str], list[str]] | None = None
        explored = 0
        now = self.snapshot.now
        cands = self.candidates

        def dfs(i: int, chosen: frozenset[str], prot: int, lost: list[float], jobs: int) -> None:
            nonlocal best, best_key, explored
            if best_key is not None and (prot, math.fsum(lost), jobs) > best_key[:3]:
                return  # every criterion here only grows with more victims
            if i == len(cands):
                explored += 1
                key = self.key(chosen)
                if best_key is not None and key >= best_key:
                    return
                if self.feasible(chosen) and self.minimal(chosen):
                    best, best_key = chosen, key
                return
            dfs(i + 1, chosen, prot, lost, jobs)
            cand = cands[i]
            for option in cand.options:
                extra = [pod_lost_work(self.pod[n], cand.job, now) for n in option]
                dfs(i + 1, chosen | option, prot + cand.protected, lost + extra, jobs + 1)

        dfs(0, frozenset(), 0, [], 0)
        if best is None or best_key is None:
            return RefPlan(self.pre.name, feasible=False, explored=explored)
        kinds = {self.cand_by_job[j].rel.kind for j in best_key[4]}
        action = {
            frozenset(): "none",
            frozenset({"preempt"}): "preempt",
            frozenset({"reclaim"}): "reclaim",
        }.get(frozenset(kinds), "mixed")
        return RefPlan(
            preemptor=self.pre.name,
            feasible=True,
            action=action,
            protected_victims=best_key[0],
            lost_gpu_seconds=best_key[1],
            victim_jobs=tuple(best_key[4]),
            evicted_pods=tuple(best_key[5]),
            victim_weight=best_key[3],
            explored=explored,
        )


def gang_options(pods: Sequence[Pod], minimum: int) -> Iterator[frozenset[str]]:
    """C rule 4 (D 1: "runs" means "holds GPUs"): every non-empty set of pods
    whose eviction leaves none of them, or at least ``minimum``, holding GPUs."""
    names = sorted(p.name for p in pods)
    for k in range(1, len(names) + 1):
        left = len(names) - k
        if left != 0 and left < minimum:
            continue
        for combo in combinations(names, k):
            yield frozenset(combo)


def packs(sizes: Sequence[int], capacities: Sequence[int]) -> bool:
    """Exact bin packing by backtracking: can every pod (a size) go on one node?

    C rule 5: a pod never spans nodes. ``sizes`` should be sorted descending."""
    caps = list(capacities)

    def place(i: int) -> bool:
        if i == len(sizes):
            return True
        tried: set[int] = set()
        for n, cap in enumerate(caps):
            if cap < sizes[i] or cap in tried:
                continue
            tried.add(cap)  # nodes with equal free GPUs are interchangeable
            caps[n] -= sizes[i]
            if place(i + 1):
                return True
            caps[n] += sizes[i]
        return False

    return place(0)


def reference_plan(snapshot: Snapshot, preemptor: str | None = None) -> RefPlan:
    """The best minimal feasible plan for ``preemptor`` (or the contract's choice).

    D 5 / D 6: no preemptor, or nothing to place, is a feasible plan with no
    victims; D 10 still applies when the preemptor has pods to place."""
    pre = choose_preemptor(snapshot, preemptor)
    if pre is None:
        return RefPlan(None, feasible=True)
    if not pods_to_place(pre):
        return RefPlan(pre.name, feasible=True)
    return _Problem(snapshot, pre).solve()


def search_space(snapshot: Snapshot, preemptor: str | None = None) -> int:
    """How many eviction sets the reference would enumerate without its cut."""
    pre = choose_preemptor(snapshot, preemptor)
    if pre is None or not pods_to_place(pre):
        return 1
    return math.prod(1 + len(c.options) for c in _Problem(snapshot, pre).candidates)
