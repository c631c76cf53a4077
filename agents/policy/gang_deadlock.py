"""Gang deadlocks: partly placed gangs that each hold part of their minimum and block each other.

Volcano binds a gang only once ``minAvailable`` pods fit, yet partial gangs
still happen (a gang's pod deleted and recreated pending, pods bound in two
scheduling cycles around a node going away; ../shared/design). Two 20-GPU
gangs on 30 GPUs can then hold 15 each and wait forever, and Volcano sees
neither as starving enough to act on (its preempt is gang-atomic for the
preemptor: a partial gang evicts nothing).

Reading of a deadlock (pure, on the planner's own snapshot):

- a *partial gang* is a job not suspended that holds GPUs with fewer pods than
  its ``min_available`` and has pods waiting for a node;
- it is *blocked* when its missing pods (the smallest of its waiting pods, as
  many as it lacks) cannot be placed on the free GPUs of schedulable nodes;
- a deadlock is a set of two or more blocked partial gangs in which at least
  one could complete with the GPUs another one holds.

Breaking it (``resolve``): each member in turn is the preemptor of a planner
run on a snapshot where the members are what they are, gangs that never ran
as gangs (``Pending``, ``started_at: null``: in the contract they lose no
work, docs/design/0001-planner-readings.md §1-2), and the other members are
eligible victims whatever their weight (``DeadlockedGangs`` below; the
other rules, preemptable, cooldown and the eviction limit, still hold). The
plan with the lowest objective wins: the gang that yields is the one whose
yield loses least. Ties keep the gang that holds more GPUs (fewer to move),
then the higher priority, then the earlier submitted, then the name.

Placement is checked first-fit-decreasing per node: exact when the missing
pods are of one size (gangs almost always are), conservative otherwise (a
deadlock may be reported where a cleverer packing would fit; the planner then
finds the plan without evictions and nothing is yielded).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from gpuyield.agents.planner import DEFAULT_RULES, Rule, Verdict, plan
from gpuyield.agents.planner.eligibility import WeightWithinQueue
from gpuyield.agents.planner.session import CandidateFacts, PlanningSession
from gpuyield.schemas import Job, JobState, Plan, Snapshot


@dataclass(frozen=True, slots=True)
class Deadlock:
    """Blocked partial gangs, by name, with what each holds and lacks."""

    gangs: tuple[str, ...]
    held: Mapping[str, int]  # GPUs each member holds
    wanted: Mapping[str, int]  # GPUs each member's gang minimum needs in all
    free_gpus: int

    def describe(self) -> str:
        parts = ", ".join(f"{g} holds {self.held[g]} of {self.wanted[g]} GPUs" for g in self.gangs)
        return f"{parts}; {self.free_gpus} GPUs free"


@dataclass(frozen=True, slots=True)
class Resolution:
    """Which member yields: the planner's plan for the member that keeps its GPUs."""

    deadlock: Deadlock
    preemptor: str | None  # None: no member may yield (all protected by the rules)
    snapshot: Snapshot | None
    plan: Plan | None


def _holding(job: Job) -> list[tuple[str, int]]:
    return [(p.node, p.gpus) for p in job.pods if p.holds_gpus and p.node is not None]


def _waiting(job: Job) -> list[int]:
    return sorted(p.gpus for p in job.pods if p.node is None and p.phase.value == "Pending")


def partial_gangs(snapshot: Snapshot) -> list[Job]:
    """Jobs holding GPUs with fewer pods than their gang minimum, and pods left to place."""
    out = []
    for job in snapshot.jobs:
        if job.state is JobState.SUSPENDED:
            continue
        held = len(_holding(job))
        if 0 < held < job.gang_min and len(_waiting(job)) >= job.gang_min - held:
            out.append(job)
    return out


def free_gpus(snapshot: Snapshot) -> dict[str, int]:
    """Free GPUs per schedulable node."""
    used: dict[str, int] = {}
    for job in snapshot.jobs:
        for node, gpus in _holding(job):
            used[node] = used.get(node, 0) + gpus
    return {n.name: n.gpus - used.get(n.name, 0) for n in snapshot.nodes if n.schedulable}


def fits(pods: Iterable[int], free: Mapping[str, int]) -> bool:
    """First-fit decreasing: do pods of these GPU sizes fit on these free GPUs?"""
    room = sorted(free.values(), reverse=True)
    for gpus in sorted(pods, reverse=True):
        for i, left in enumerate(room):
            if left >= gpus:
                room[i] = left - gpus
                break
        else:
            return False
    return True


def _missing(job: Job) -> list[int]:
    lacking = job.gang_min - len(_holding(job))
    return _waiting(job)[:lacking]


def _with(free: Mapping[str, int], job: Job) -> dict[str, int]:
    out = dict(free)
    for node, gpus in _holding(job):
        if node in out:
            out[node] += gpus
    return out


def find(snapshot: Snapshot, among: Collection[str] | None = None) -> Deadlock | None:
    """The gang deadlock in ``snapshot``, if there is one (see the module docstring).

    ``among`` restricts the members to these jobs (the controller passes the
    partial gangs Volcano has marked unschedulable, so a gang whose pods are
    being bound one by one right now is never taken for a deadlocked one).
    """
    free = free_gpus(snapshot)
    blocked = [
        j
        for j in partial_gangs(snapshot)
        if (among is None or j.name in among) and not fits(_missing(j), free)
    ]
    if len(blocked) < 2:
        return None
    unblockable = any(
        fits(_missing(x), _with(free, y)) for x in blocked for y in blocked if y is not x
    )
    if not unblockable:
        return None
    return Deadlock(
        gangs=tuple(sorted(j.name for j in blocked)),
        held={j.name: sum(g for _, g in _holding(j)) for j in blocked},
        wanted={j.name: sum(g for _, g in _holding(j)) + sum(_missing(j)) for j in blocked},
        free_gpus=sum(free.values()),
    )


class DeadlockedGangs:
    """Rule 2 for a deadlock: another member may yield whatever its weight.

    Members hold GPUs they cannot use; waiting for the weights to part would
    wait forever. Everyone else keeps the contract's rule 2.
    """

    name = "gang-deadlock"

    def __init__(self, members: Iterable[str]) -> None:
        self.members = frozenset(members)
        self.weight = WeightWithinQueue()

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        if candidate.name in self.members and candidate.same_queue:
            return Verdict(
                True,
                "deadlocked with the preemptor: holds {} GPUs it cannot use",
                (candidate.gpus,),
            )
        return self.weight.judge(session, candidate)


def rules_for(members: Iterable[str]) -> tuple[Rule, ...]:
    """The default rules with rule 2 read for a deadlock among ``members``."""
    deadlock = DeadlockedGangs(members)
    return tuple(deadlock if isinstance(r, WeightWithinQueue) else r for r in DEFAULT_RULES)


def as_deadlocked(snapshot: Snapshot, members: Iterable[str]) -> Snapshot:
    """``snapshot`` with the members as gangs that never ran as gangs: Pending, never started."""
    names = frozenset(members)
    jobs = tuple(
        j.model_copy(update={"state": JobState.PENDING, "started_at": None})
        if j.name in names
        else j
        for j in snapshot.jobs
    )
    return snapshot.model_copy(update={"jobs": jobs})


def resolve(
    deadlock: Deadlock, snapshot_for: Callable[[str], Snapshot], budget: int | None = None
) -> Resolution:
    """Plan for each member in turn; the cheapest plan's preemptor keeps its GPUs."""
    rules = rules_for(deadlock.gangs)
    best: tuple[tuple[object, ...], str, Snapshot, Plan] | None = None
    for member in deadlock.gangs:
        snapshot = as_deadlocked(snapshot_for(member), deadlock.gangs)
        result = plan(snapshot, member, budget=budget, rules=rules, explain=True)
        if not result.feasible or not result.victims:
            continue
        job = snapshot.job(member)
        assert job is not None
        o = result.objective
        key = (
            o.protected_victims,
            o.lost_gpu_seconds,
            o.victim_jobs,
            o.victim_weight,
            -deadlock.held[member],
            -job.priority,
            job.submitted_at if job.submitted_at is not None else float("inf"),
            member,
        )
        if best is None or key < best[0]:
            best = (key, member, snapshot, result)
    if best is None:
        return Resolution(deadlock, None, None, None)
    return Resolution(deadlock, best[1], best[2], best[3])
