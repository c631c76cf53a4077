"""Exact eviction planning with OR-Tools CP-SAT, for the optimality benchmark (not a test).

The same problem as ``gpuyield.agents.planner`` (../shared/spec/plan-contract.md, with the
readings of docs/design/0001-planner-readings.md), written independently as a 0-1 model so that
the planner's plans can be compared with the true optimum on small clusters (up to 16 nodes).
Exactness matters more than speed here.

Model
-----
Eligibility is decided per job before the model is built (:func:`build_problem`): preemptable,
cooldown (reading 2), eviction limit (reading 3), same queue: ``W_eff`` strictly lower than
the preemptor's; other queues: never an ancestor or descendant of the preemptor's queue, and
every queue on the victim's branch below the lowest common ancestor reclaimable and above its
guarantee before the plan (reading 6); a reclaim candidate with ``W_eff`` not lower than the
preemptor's is *protected*. Candidates are the jobs other than the preemptor whose pods hold
GPUs (decision 1); only those pods can be evicted.

Variables:

* ``x[p]`` - pod ``p`` (holding GPUs, of an eligible job) is evicted;
* ``y[j]`` - job ``j`` is a victim (``y[j] = OR x[p]``);
* ``w[j]`` - job ``j`` loses all its pods (for gang integrity);
* ``c[g, n]`` - how many of the preemptor's pods of ``g`` GPUs go to node ``n``. Pods of the
  same size are interchangeable, so counting them instead of assigning each pod (``z[pod,
  node]``) removes symmetric solutions without losing any; a placement per pod is read back
  from the counts.

Constraints:

* gang integrity (rule 4): a victim keeps 0 pods (``w``) or at least ``min_available``;
* capacity: on every schedulable node the pods placed fit in the free GPUs plus those of the
  pods evicted there; unschedulable nodes get nothing;
* capability (decision 10): the preemptor's queue and its ancestors after the plan;
* reclaim (rule 3, readings 5 and 6): for each reclaim victim, every queue on the
  preemptor's branch below the lowest common ancestor within its guarantee after the plan,
  every queue on the victim's branch not below its guarantee after it. "After the plan"
  is one expression per queue: usage minus evicted GPUs in its subtree plus the preemptor's
  placed pods when the preemptor's queue is in the subtree.

Objective (lexicographic, as sequential solves, each optimum fixed before the next stage):
protected victim jobs, then lost GPU-seconds, then victim jobs. The last two tie-breaks of the
contract (victims' ``W_eff``, names) do not change these three numbers and are not solved.

Lost work in integers: CP-SAT needs integer coefficients, so each pod's lost work
``gpus * max(0, now - (last_checkpoint_at or started_at))`` is scaled to milliseconds and
rounded, ``round(1000 * lost)``. The synthetic clusters use whole-second timestamps, so every
pod's lost work is an integer number of GPU-seconds and the scaling is exact. For snapshots with
fractional timestamps each pod carries at most 0.5 ms of rounding, so two plans whose true
lost work differs by less than 0.5 ms per evicted pod may be ordered wrongly; the comparison in
``bench_planner.py`` uses that bound as its tolerance. The float lost work reported for the
optimal solution is recomputed with ``math.fsum`` over the chosen pods (decision 8).

:func:`check_plan` re-checks a plan (evicted pods and placement) against the same rules in
plain Python and computes its objective; the benchmark uses it to tell, when the planner and
this solver disagree, which of the two broke a rule.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from gpuyield.schemas import Job, Snapshot
from gpuyield.schemas.snapshot import JobState

ROOT = "<root>"


@dataclass(frozen=True)
class PodInfo:
    name: str
    job: str
    node: str
    gpus: int
    lost: float
    lost_ms: int


@dataclass(frozen=True)
class Candidate:
    name: str
    queue: str
    w_eff: float
    pods: tuple[PodInfo, ...]  # the pods that hold GPUs
    gang_min: int
    relation: str  # "preempt" or "reclaim"
    eligible: bool
    protected: bool
    why: str
    victim_branch: tuple[str, ...] = ()  # queues on the victim's branch below the LCA
    preemptor_branch: tuple[str, ...] = ()  # queues on the preemptor's branch below the LCA


@dataclass
class Problem:
    preemptor: str | None
    queue: str = ""
    w_preemptor: float = 0.0
    to_place: list[tuple[str, int]] = field(default_factory=list)  # (pod, gpus)
    node_gpus: dict[str, int] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    schedulable: dict[str, bool] = field(default_factory=dict)
    guarantee: dict[str, int] = field(default_factory=dict)
    capability: dict[str, int | None] = field(default_factory=dict)
    parent: dict[str, str | None] = field(default_factory=dict)
    reclaimable: dict[str, bool] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)  # before the plan, with descendants
    candidates: list[Candidate] = field(default_factory=list)

    def ancestors(self, queue: str) -> list[str]:
        """``queue`` and its ancestors, nearest first."""
        out = [queue]
        cursor = self.parent[queue]
        while cursor is not None:
            out.append(cursor)
            cursor = self.parent[cursor]
        return out

    def in_subtree(self, queue: str, top: str) -> bool:
        return top in self.ancestors(queue)

    @property
    def demand(self) -> int:
        return sum(g for _, g in self.to_place)


@dataclass
class ExactResult:
    status: str  # "optimal", "infeasible", "no-preemptor" or "unknown" (time limit)
    protected: int = 0
    lost_ms: int = 0
    lost: float = 0.0
    victims: int = 0
    evicted: tuple[str, ...] = ()
    placement: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "no-preemptor")


def w_eff(snap: Snapshot, job: Job) -> float:
    """The contract's effective weight; run time only for Running jobs (decision 3)."""
    hours = 0.0
    if job.state == JobState.RUNNING and job.started_at is not None:
        hours = max(0.0, snap.now - job.started_at) / 3600.0
    pol = snap.policy
    return job.priority + pol.alpha * math.log(1.0 + hours) + pol.beta * job.progress**2


def lost_work(snap: Snapshot, job: Job, gpus: int) -> float:
    """Reading 9 with decision 2: from the checkpoint, else the start, never negative."""
    since = job.last_checkpoint_at if job.last_checkpoint_at is not None else job.started_at
    if since is None:
        return 0.0
    return gpus * max(0.0, snap.now - since)


def pick_preemptor(snap: Snapshot) -> Job | None:
    """The pending job with the highest priority, then earliest submitted_at, then name."""
    pending = [j for j in snap.jobs if j.state == JobState.PENDING]
    if not pending:
        return None
    inf = float("inf")
    return min(
        pending,
        key=lambda j: (-j.priority, j.submitted_at if j.submitted_at is not None else inf, j.name),
    )


def _lca(problem: Problem, a: str, b: str) -> str:
    up = set(problem.ancestors(a))
    for q in problem.ancestors(b):
        if q in up:
            return q
    return ROOT


def _below(problem: Problem, queue: str, top: str) -> tuple[str, ...]:
    """``queue`` and its ancestors strictly below ``top`` (``ROOT``: all of them)."""
    out: list[str] = []
    for q in problem.ancestors(queue):
        if q == top:
            break
        out.append(q)
    return tuple(out)


def build_problem(snap: Snapshot, preemptor: str | None = None) -> Problem:
    """Everything the model needs, with eligibility decided per job."""
    pre = snap.job(preemptor) if preemptor is not None else pick_preemptor(snap)
    if preemptor is not None and pre is None:
        raise ValueError(f"no job called {preemptor!r}")
    problem = Problem(preemptor=None if pre is None else pre.name)
    for spec in snap.queues:
        problem.guarantee[spec.name] = spec.guarantee.gpu
        problem.capability[spec.name] = spec.capability.gpu
        problem.parent[spec.name] = spec.parent
        problem.reclaimable[spec.name] = spec.reclaimable
        problem.usage[spec.name] = 0
    held: dict[str, int] = {n.name: 0 for n in snap.nodes}
    for job in snap.jobs:
        for pod in job.pods:
            if pod.holds_gpus and pod.node is not None:
                held[pod.node] += pod.gpus
                for q in problem.ancestors(job.queue):
                    problem.usage[q] += pod.gpus
    for node in snap.nodes:
        problem.node_gpus[node.name] = node.gpus
        problem.free[node.name] = node.gpus - held[node.name]
        problem.schedulable[node.name] = node.schedulable
    if pre is None:
        return problem
    problem.queue = pre.queue
    problem.w_preemptor = pre.priority if pre.state == JobState.PENDING else w_eff(snap, pre)
    problem.to_place = [
        (p.name, p.gpus) for p in pre.pods if p.node is None and p.phase not in _FINISHED
    ]
    pol = snap.policy
    for job in snap.jobs:
        if job.name == pre.name:
            continue
        pods = tuple(
            PodInfo(
                name=p.name,
                job=job.name,
                node=p.node,
                gpus=p.gpus,
                lost=lost_work(snap, job, p.gpus),
                lost_ms=round(1000.0 * lost_work(snap, job, p.gpus)),
            )
            for p in job.pods
            if p.holds_gpus and p.node is not None
        )
        if not pods:
            continue
        weight = w_eff(snap, job)
        same = job.queue == pre.queue
        relation = "preempt" if same else "reclaim"
        recent = [e for e in job.evictions if 0 <= snap.now - e <= pol.eviction_window_s]
        eligible, protected, why = True, False, "eligible"
        v_branch: tuple[str, ...] = ()
        q_branch: tuple[str, ...] = ()
        if not job.preemptable:
            eligible, why = False, "not preemptable"
        elif job.started_at is not None and snap.now - job.started_at < pol.cooldown_s:
            eligible, why = False, "cooldown"
        elif len(recent) >= pol.max_evictions:
            eligible, why = False, "eviction limit"
        elif same:
            if not weight < problem.w_preemptor:
                eligible, why = False, "same queue, W_eff not lower"
        elif problem.in_subtree(pre.queue, job.queue) or problem.in_subtree(job.queue, pre.queue):
            eligible, why = False, "ancestor or descendant queue"
        else:
            top = _lca(problem, pre.queue, job.queue)
            v_branch = _below(problem, job.queue, top)
            q_branch = _below(problem, pre.queue, top)
            for q in v_branch:
                if not problem.reclaimable[q]:
                    eligible, why = False, f"queue {q} not reclaimable"
                    break
                if not problem.usage[q] > problem.guarantee[q]:
                    eligible, why = False, f"queue {q} not above its guarantee"
                    break
            protected = eligible and not weight < problem.w_preemptor
        problem.candidates.append(
            Candidate(
                name=job.name,
                queue=job.queue,
                w_eff=weight,
                pods=pods,
                gang_min=job.gang_min,
                relation=relation,
                eligible=eligible,
                protected=protected,
                why=why,
                victim_branch=v_branch,
                preemptor_branch=q_branch,
            )
        )
    return problem


_FINISHED = ("Succeeded", "Failed")


def _usage_after(problem: Problem, queue: str, evicted_gpus: dict[str, int]) -> int:
    """Usage of ``queue`` after the plan; ``evicted_gpus`` per queue of the victims."""
    out = problem.usage[queue]
    for q, g in evicted_gpus.items():
        if problem.in_subtree(q, queue):
            out -= g
    if problem.in_subtree(problem.queue, queue):
        out += problem.demand
    return out


def solve_exact(
    snap: Snapshot,
    preemptor: str | None = None,
    *,
    time_limit_s: float = 120.0,
    workers: int = 8,
) -> ExactResult:
    """The optimal (protected victims, lost GPU-seconds, victim jobs), or infeasible."""
    start = time.perf_counter()
    problem = build_problem(snap, preemptor)
    if problem.preemptor is None:
        return ExactResult(status="no-preemptor")
    if not problem.to_place:
        return ExactResult(status="optimal", wall_s=time.perf_counter() - start)

    model = cp_model.CpModel()
    eligible = [c for c in problem.candidates if c.eligible]
    x: dict[str, cp_model.IntVar] = {}
    y: dict[str, cp_model.IntVar] = {}
    for cand in eligible:
        yj = model.new_bool_var(f"y[{cand.name}]")
        wj = model.new_bool_var(f"w[{cand.name}]")
        y[cand.name] = yj
        xs = []
        for pod in cand.pods:
            xp = model.new_bool_var(f"x[{pod.name}]")
            x[pod.name] = xp
            xs.append(xp)
            model.add_implication(xp, yj)
        model.add_bool_or(xs).only_enforce_if(yj)
        model.add_implication(wj, yj)
        kept = len(cand.pods) - cp_model.LinearExpr.sum(xs)
        model.add(kept == 0).only_enforce_if(wj)
        model.add(kept >= cand.gang_min).only_enforce_if([yj, wj.Not()])

    # Placement by counts of interchangeable pods.
    sizes = sorted({g for _, g in problem.to_place})
    count = {g: sum(1 for _, h in problem.to_place if h == g) for g in sizes}
    c: dict[tuple[int, str], cp_model.IntVar] = {}
    for g in sizes:
        slots = []
        for node, gpus in problem.node_gpus.items():
            if not problem.schedulable[node] or gpus < g:
                continue
            most = count[g] if g == 0 else min(count[g], gpus // g)
            var = model.new_int_var(0, most, f"c[{g},{node}]")
            c[g, node] = var
            slots.append(var)
        model.add(cp_model.LinearExpr.sum(slots) == count[g])
    pods_on: dict[str, list[PodInfo]] = {}
    for cand in eligible:
        for pod in cand.pods:
            pods_on.setdefault(pod.node, []).append(pod)
    for node in problem.node_gpus:
        placed = [g * c[g, node] for g in sizes if (g, node) in c]
        if not placed:
            continue
        freed = [pod.gpus * x[pod.name] for pod in pods_on.get(node, [])]
        model.add(
            cp_model.LinearExpr.sum(placed) <= problem.free[node] + cp_model.LinearExpr.sum(freed)
        )

    def usage_after(queue: str) -> cp_model.LinearExprT:
        evicted = [
            pod.gpus * x[pod.name]
            for cand in eligible
            if problem.in_subtree(cand.queue, queue)
            for pod in cand.pods
        ]
        base = problem.usage[queue]
        if problem.in_subtree(problem.queue, queue):
            base += problem.demand
        return base - cp_model.LinearExpr.sum(evicted)

    for q in problem.ancestors(problem.queue):
        limit = problem.capability[q]
        if limit is not None:
            model.add(usage_after(q) <= limit)
    for cand in eligible:
        if cand.relation != "reclaim":
            continue
        for q in cand.victim_branch:
            model.add(usage_after(q) >= problem.guarantee[q]).only_enforce_if(y[cand.name])
        for q in cand.preemptor_branch:
            model.add(usage_after(q) <= problem.guarantee[q]).only_enforce_if(y[cand.name])

    protected = cp_model.LinearExpr.sum([y[cand.name] for cand in eligible if cand.protected])
    lost = cp_model.LinearExpr.sum(
        [pod.lost_ms * x[pod.name] for cand in eligible for pod in cand.pods]
    )
    victims = cp_model.LinearExpr.sum(list(y.values()))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    values: list[int] = []
    for stage in (protected, lost, victims):
        left = time_limit_s - (time.perf_counter() - start)
        solver.parameters.max_time_in_seconds = max(1.0, left)
        model.minimize(stage)
        status = solver.solve(model)
        if status == cp_model.INFEASIBLE:
            return ExactResult(status="infeasible", wall_s=time.perf_counter() - start)
        if status != cp_model.OPTIMAL:
            return ExactResult(status="unknown", wall_s=time.perf_counter() - start)
        best = round(solver.objective_value)
        values.append(best)
        model.add(stage == best)
        model.clear_hints()  # type: ignore[no-untyped-call]
        for var in [*x.values(), *y.values(), *c.values()]:
            model.add_hint(var, solver.value(var))
    evicted = tuple(sorted(name for name, var in x.items() if solver.value(var)))
    placement: dict[str, str] = {}
    for g in sizes:
        names = [name for name, h in problem.to_place if h == g]
        for node in sorted(problem.node_gpus):
            if (g, node) in c:
                for _ in range(solver.value(c[g, node])):
                    placement[names.pop(0)] = node
    chosen = set(evicted)
    lost_float = math.fsum(pod.lost for cand in eligible for pod in cand.pods if pod.name in chosen)
    return ExactResult(
        status="optimal",
        protected=values[0],
        lost_ms=values[1],
        lost=lost_float,
        victims=values[2],
        evicted=evicted,
        placement=placement,
        wall_s=time.perf_counter() - start,
    )


@dataclass
class Check:
    """What :func:`check_plan` found: broken rules and the plan's own objective."""

    violations: list[str]
    protected: int
    lost: float
    victims: int
    victim_weight: float


def check_plan(problem: Problem, evicted: Iterable[str], placement: dict[str, str]) -> Check:
    """Re-check a feasible plan against the rules, in plain Python, and cost it."""
    evicted = set(evicted)
    bad: list[str] = []
    by_pod = {pod.name: (cand, pod) for cand in problem.candidates for pod in cand.pods}
    for name in sorted(evicted - by_pod.keys()):
        bad.append(f"evicted pod {name} is not a pod holding GPUs of a candidate job")
    victims = [c for c in problem.candidates if any(p.name in evicted for p in c.pods)]
    evicted_gpus: dict[str, int] = {}
    for cand in victims:
        if not cand.eligible:
            bad.append(f"victim {cand.name} is ineligible ({cand.why})")
        gone = [p for p in cand.pods if p.name in evicted]
        kept = len(cand.pods) - len(gone)
        if kept and kept < cand.gang_min:
            bad.append(
                f"gang {cand.name}: keeps {kept} pods, min_available {cand.gang_min} (rule 4)"
            )
        evicted_gpus[cand.queue] = evicted_gpus.get(cand.queue, 0) + sum(p.gpus for p in gone)
    # Placement and capacity.
    room = dict(problem.free)
    for name, (_, pod) in by_pod.items():
        if name in evicted:
            room[pod.node] += pod.gpus
    for name, gpus in problem.to_place:
        node = placement.get(name)
        if node is None:
            bad.append(f"preemptor pod {name} is not placed")
            continue
        if node not in room:
            bad.append(f"preemptor pod {name} placed on unknown node {node}")
            continue
        if not problem.schedulable[node]:
            bad.append(f"preemptor pod {name} placed on unschedulable node {node}")
        room[node] -= gpus
    for node, left in sorted(room.items()):
        if left < 0:
            bad.append(f"node {node} over-committed by {-left} GPUs after the plan")
    extra = set(placement) - {name for name, _ in problem.to_place}
    if extra:
        bad.append(f"placement names pods that are not to be placed: {sorted(extra)}")
    # Queues.
    for q in problem.ancestors(problem.queue):
        cap = problem.capability[q]
        after = _usage_after(problem, q, evicted_gpus)
        if cap is not None and after > cap:
            bad.append(f"queue {q}: {after} GPUs after the plan, capability {cap}")
    for cand in victims:
        if cand.relation != "reclaim" or not cand.eligible:
            continue
        for q in cand.victim_branch:
            after = _usage_after(problem, q, evicted_gpus)
            if after < problem.guarantee[q]:
                bad.append(
                    f"reclaim {cand.name}: queue {q} left at {after} GPUs, "
                    f"below its guarantee {problem.guarantee[q]}"
                )
        for q in cand.preemptor_branch:
            after = _usage_after(problem, q, evicted_gpus)
            if after > problem.guarantee[q]:
                bad.append(
                    f"reclaim {cand.name}: preemptor queue {q} at {after} GPUs after the plan, "
                    f"above its guarantee {problem.guarantee[q]}"
                )
    lost = math.fsum(pod.lost for name, (_, pod) in by_pod.items() if name in evicted)
    return Check(
        violations=bad,
        protected=sum(1 for c in victims if c.protected),
        lost=lost,
        victims=len(victims),
        victim_weight=math.fsum(c.w_eff for c in victims),
    )
