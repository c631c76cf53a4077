"""The eviction planner: a pure function from a cluster snapshot to a preemption plan.

No clock, no I/O, no randomness, no logging: the same snapshot always gives
the same plan, byte for byte, so audits can replay decisions. It is composed
the way Volcano composes plugins over a session: eligibility rules judge each
candidate (``eligibility.DEFAULT_RULES``; a new rule is one class and one line
there), gang integrity, queue accounting and placement are separate modules,
and ``search`` combines them under the lexicographic objective.

    >>> from gpuyield.agents.planner import plan
    >>> plan(snapshot).model_dump_json()        # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping, Sequence

from gpuyield.agents.planner.eligibility import DEFAULT_RULES, judge_candidates
from gpuyield.agents.planner.explain import describe_candidates, describe_victim, rule_verdicts
from gpuyield.agents.planner.impossible import cannot_fit
from gpuyield.agents.planner.queues import violations
from gpuyield.agents.planner.rules import Rule, Verdict
from gpuyield.agents.planner.search import Budget, Found, Search
from gpuyield.agents.planner.session import PlanningSession, UnknownPreemptor
from gpuyield.agents.planner.weights import effective_weight, lost_seconds_per_gpu
from gpuyield.schemas import (
    Action,
    Candidate,
    Job,
    Objective,
    Plan,
    RuleVerdict,
    SearchStats,
    Snapshot,
)

DEFAULT_BUDGET = 20_000
"""Search steps per plan. Small clusters finish far below it (the plan is then
optimal); on 1000 nodes it bounds the call to tens of milliseconds."""

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_RULES",
    "PlanningSession",
    "Rule",
    "UnknownPreemptor",
    "Verdict",
    "cycle_collection_paused",
    "effective_weight",
    "lost_seconds_per_gpu",
    "plan",
]


def plan(
    snapshot: Snapshot,
    preemptor: str | None = None,
    *,
    budget: int | None = None,
    rules: Sequence[Rule] = DEFAULT_RULES,
    explain: bool = False,
) -> Plan:
    """The cheapest valid plan that makes room for ``preemptor`` (default: contract's choice).

    With ``explain``, the plan also lists every candidate job with each rule's
    verdict (``Plan.candidates``), for ``--explain`` and decision records.
    Raises UnknownPreemptor when ``preemptor`` names no job of the snapshot.
    """
    with cycle_collection_paused():
        return _plan(snapshot, preemptor, budget=budget, rules=rules, explain=explain)


@contextlib.contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """No cyclic garbage collection during the call (restored after; the plan is the same).

    A plan allocates hundreds of thousands of small objects, each of which
    counts towards Python's next collection, and a full collection walks
    every object of the process, the snapshot's included: at 10,000 nodes
    that made half of the call. What the planner allocates is freed by
    reference counting; anything cyclic waits for the next collection after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan(
    snapshot: Snapshot,
    preemptor: str | None,
    *,
    budget: int | None,
    rules: Sequence[Rule],
    explain: bool,
) -> Plan:
    session = PlanningSession.open(snapshot, preemptor)
    job = session.preemptor
    if job is None:
        return Plan(
            preemptor=None,
            action=Action.NONE,
            feasible=True,
            explanation=("no pending job in the snapshot: nothing to plan",),
        )
    limit = DEFAULT_BUDGET if budget is None else budget
    as_is = _fits_as_is(session, limit) if session.to_place else None
    if as_is is not None:
        return as_is
    judged = judge_candidates(session, rules, every=explain)
    eligible, protected = judged.eligible, judged.protected

    def candidates(evicted: Mapping[int, frozenset[int]]) -> tuple[Candidate, ...]:
        if not explain:
            return ()
        shared: dict[tuple[str, bool, str, bool], RuleVerdict] = {}
        verdicts = {i: rule_verdicts(named, shared) for i, named in judged.verdicts.items()}
        return describe_candidates(session, verdicts, evicted)

    header = (
        f"{_needs(session, job)}; "
        f"{len(eligible)} of {len(session.candidates)} jobs holding GPUs are eligible victims"
    )
    if session.sla_risk is not None:  # production's claim: the decision says why
        header += (
            f"; {session.sla_risk.describe()}: cooldowns, eviction limits and W_eff "
            "protection give way"
        )
    elif session.sla_claim:
        header += "; it has an SLA: cooldowns and eviction limits give way (victims taken last)"
    if not session.to_place:
        return Plan(
            preemptor=job.name,
            action=Action.NONE,
            feasible=True,
            explanation=(header, "no pod waits for a node: nothing to place"),
            candidates=candidates({}),
        )
    impossible = cannot_fit(session, eligible)
    if impossible is not None:  # counted, not searched: the search would try every set
        return Plan(
            preemptor=job.name,
            action=Action.NONE,
            feasible=False,
            explanation=(
                header,
                impossible,
                "not searched: no set of eligible victims passes this count, so no plan exists",
            ),
            search=SearchStats(steps=0, budget=limit, exhausted=False),
            candidates=candidates({}),
        )
    found, counter = _search(session, eligible, protected, limit)
    stats = SearchStats(steps=counter.steps, budget=limit, exhausted=counter.exhausted)
    if counter.exhausted:
        search_line = (
            f"search budget of {limit} steps exhausted: this is the best plan found, "
            "not proven optimal"
        )
    else:
        search_line = f"search complete in {counter.steps} steps: the plan is optimal"
    if found is None:
        return Plan(
            preemptor=job.name,
            action=Action.NONE,
            feasible=False,
            explanation=(header, _why_infeasible(session, eligible, counter), search_line),
            search=stats,
            candidates=candidates({}),
        )
    return _feasible_plan(
        session, found, protected, candidates(found.evicted), header, search_line, stats
    )


def _fits_as_is(session: PlanningSession, limit: int) -> Plan | None:
    """The plan without victims when the search's first dive finds it; else None.

    A plan that evicts nobody costs the least any plan can, so no candidate's
    verdict can change it, and it is found without judging any (30,000 of
    them at 10,000 nodes, every rule worded when explained). It is the very
    plan the whole search returns: at every level the search tries the nodes
    that fit the pod as they are before any that need evictions, in the same
    order whatever the candidates, so its first dive is this one; that dive's
    plan is its first leaf, which nothing can beat, and it stops there after
    a step per pod and one for the leaf (``test_fits_as_is``). So the search
    here, over no candidates, gets those steps alone: a dive that would have
    to back up (some pod finds no free node, or a queue rule breaks) gives
    None, and the plan is made the whole way, as if this had not been tried.

    The plan differs from the whole way's in its wording alone: its header
    does not count the eligible victims, and an explained plan lists no
    candidates (none was weighed; each rule's verdict on each bears on
    nothing it decided). Audits read such a decision as the preemptor's alone.
    One exception, for budgets under twice a dive's steps with protected
    candidates about: the whole way would spend half the budget on a first
    search it cannot finish (``_search``), then report more steps for the
    same plan or run out before it.
    """
    counter = Budget(min(limit, len(session.to_place) + 1))  # a step per pod, one for the leaf
    found = Search(session, (), frozenset(), counter).run()
    if found is None:
        return None
    job = session.preemptor
    assert job is not None  # a session with pods to place has a preemptor
    header = (
        f"{_needs(session, job)}; they fit as the cluster stands: none of the "
        f"{session.holders} jobs holding GPUs was judged as a victim"
    )
    stats = SearchStats(steps=counter.steps, budget=limit, exhausted=False)
    search_line = f"search complete in {counter.steps} steps: the plan is optimal"
    return _feasible_plan(session, found, frozenset(), (), header, search_line, stats)


def _needs(session: PlanningSession, job: Job) -> str:
    """What the preemptor asks for, the first words of every plan's header."""
    needed = sum(p.gpus for p in session.to_place)
    return (
        f"preemptor '{job.name}' (queue '{job.queue}', weight {session.preemptor_w:.1f}) "
        f"needs {needed} GPUs for {len(session.to_place)} pod(s)"
    )


def _search(
    session: PlanningSession, eligible: list[int], protected: frozenset[int], limit: int
) -> tuple[Found | None, Budget]:
    """Search without protected candidates first, then with them if it must.

    Any plan without a protected victim beats every plan with one (the first
    criterion), so when the unprotected candidates alone can make room, the
    best such plan is the optimum and the protected ones need not be
    searched at all. Only when that first search proves no such plan exists
    (or runs out of its half of the budget without one) are protected
    candidates added, with what is left of the budget.
    """
    if not protected:
        counter = Budget(limit)
        return Search(session, eligible, protected, counter).run(), counter
    first = Budget(limit // 2)
    unprotected = [i for i in eligible if i not in protected]
    found = Search(session, unprotected, frozenset(), first).run()
    if found is not None:
        return found, first
    second = Budget(limit - first.steps)
    found = Search(session, eligible, protected, second).run()
    total = Budget(limit, steps=first.steps + second.steps, exhausted=second.exhausted)
    return found, total


def _feasible_plan(
    session: PlanningSession,
    found: Found,
    protected: frozenset[int],
    candidates: tuple[Candidate, ...],
    header: str,
    search_line: str,
    stats: SearchStats,
) -> Plan:
    victims = tuple(
        describe_victim(session, session.candidates[i], pods, i in protected)
        for i, pods in sorted(found.evicted.items(), key=lambda kv: session.candidates[kv[0]].name)
    )
    kinds = {session.candidates[i].same_queue for i in found.evicted}
    action = (
        Action.NONE
        if not kinds
        else Action.MIXED
        if len(kinds) == 2
        else Action.PREEMPT
        if True in kinds
        else Action.RECLAIM
    )
    cost = found.cost
    if victims:
        summary = (
            f"{action.value}: evicts {sum(len(v.pods) for v in victims)} pod(s) of "
            f"{len(victims)} job(s), {sum(v.gpus for v in victims)} GPUs, losing "
            f"{cost.lost_gpu_seconds:.0f} GPU-seconds; {cost.protected} protected victim(s)"
        )
    else:
        summary = "fits without evicting anyone"
    return Plan(
        preemptor=session.preemptor.name if session.preemptor else None,
        action=action,
        feasible=True,
        victims=victims,
        placement=dict(sorted(found.placement.items())),
        lost_gpu_seconds=cost.lost_gpu_seconds,
        explanation=(header, summary, search_line),
        objective=Objective(
            protected_victims=cost.protected,
            lost_gpu_seconds=cost.lost_gpu_seconds,
            victim_jobs=cost.victim_jobs,
            victim_weight=cost.victim_weight,
        ),
        search=stats,
        candidates=candidates,
    )


def _why_infeasible(session: PlanningSession, eligible: list[int], counter: Budget) -> str:
    """One sentence on what stands in the way, judged with every eligible job evicted."""
    if counter.exhausted:
        return "no valid plan was found within the search budget"
    freed: dict[str, int] = {}
    by_queue: dict[str, int] = {}
    for i in eligible:
        cand = session.candidates[i]
        for pod in cand.pods:
            freed[pod.node] = freed.get(pod.node, 0) + pod.gpus
            by_queue[cand.queue] = by_queue.get(cand.queue, 0) + pod.gpus
    room = sorted(
        (
            session.node_free[n] + freed.get(n, 0)
            for n in session.node_names
            if session.node_schedulable[n]
        ),
        reverse=True,
    )
    largest = session.to_place[0].gpus
    if not room or room[0] < largest:
        return (
            f"cannot fit: no schedulable node can free {largest} GPUs for one pod, even "
            f"evicting all {len(eligible)} eligible job(s)"
        )
    capped = [
        v.reason
        for v in violations(session, by_queue, set())
        if v.repairable and "capability" in v.reason
    ]
    if capped:
        return f"cannot fit: {capped[0]}, even preempting every eligible job of the queue"
    total = sum(room)
    needed = sum(p.gpus for p in session.to_place)
    if total < needed:
        return (
            f"cannot fit: evicting all {len(eligible)} eligible job(s) frees room for "
            f"{total} of the {needed} GPUs needed"
        )
    return (
        "cannot fit: no combination of eligible victims both makes room for every pod "
        "(each on one node) and keeps the queues' guarantees and capabilities"
    )
