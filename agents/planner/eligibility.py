"""Who may be a victim: one small rule per clause of the contract's "Who may be a victim".

Each rule is pure and judges one candidate against the session's preemptor.
A candidate is eligible when no rule refuses it; it is *protected* when a rule
allows it only as a last resort (rule 3), which the objective then avoids.

A waiting preemptor with an SLA (``urgency``) overrides two of them: a
candidate in its cooldown or at its eviction limit is allowed but protected
(taken only when no plan without it exists); once its SLA is at risk, W_eff
protection across queues is lifted too. Each such verdict says so, so the
decision records why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from gpuyield.agents.planner.rules import Rule, Verdict
from gpuyield.agents.planner.session import CandidateFacts, PlanningSession

# Verdicts without values, shared: a big plan judges tens of thousands of candidates.
_PREEMPTABLE = Verdict(True, "preemptable")
_NOT_PREEMPTABLE = Verdict(False, "marked preemptable: false")
_NEVER_STARTED = Verdict(True, "never started: no cooldown")


class NotPreemptable:
    """Rule 1: never a job with ``preemptable: false``."""

    name = "preemptable"

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        return _PREEMPTABLE if candidate.job.preemptable else _NOT_PREEMPTABLE


class InCooldown:
    """Rule 1 and reading 2: not a job that started less than ``cooldown_s`` ago."""

    name = "cooldown"

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        started = candidate.job.started_at
        cooldown = session.snapshot.policy.cooldown_s
        if started is None:
            return _NEVER_STARTED
        age = max(0.0, session.now - started)  # clock skew counts as no time (0001 §2)
        if age < cooldown and session.sla_claim:
            return Verdict(
                True,
                "in cooldown (started {:.0f} s ago, cooldown {:.0f} s), overridden: the "
                "preemptor has an SLA; taken only if no plan without it exists",
                (age, cooldown),
                protected=True,
            )
        if age < cooldown:
            return Verdict(
                False, "in cooldown: started {:.0f} s ago, cooldown is {:.0f} s", (age, cooldown)
            )
        return Verdict(True, "started {:.0f} s ago, past its {:.0f} s cooldown", (age, cooldown))


class AtEvictionLimit:
    """Rule 1 and reading 3: the livelock guard, at most ``max_evictions`` per window."""

    name = "eviction-limit"

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        policy = session.snapshot.policy
        window = policy.eviction_window_s
        evictions, now = candidate.job.evictions, session.now
        recent = sum(1 for e in evictions if 0 <= now - e <= window) if evictions else 0
        if recent >= policy.max_evictions and session.sla_claim:
            return Verdict(
                True,
                "at its eviction limit ({} in the last {:.0f} s, limit {}), overridden: the "
                "preemptor has an SLA; taken only if no plan without it exists",
                (recent, window, policy.max_evictions),
                protected=True,
            )
        if recent >= policy.max_evictions:
            return Verdict(
                False,
                "at its eviction limit: evicted {} times in the last {:.0f} s (limit {})",
                (recent, window, policy.max_evictions),
            )
        return Verdict(True, "evicted {} of {} times in the window", (recent, policy.max_evictions))


class WeightWithinQueue:
    """Rule 2: inside the preemptor's queue, only jobs of strictly lower W_eff."""

    name = "preempt-weight"

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        if not candidate.same_queue:
            return None
        mine, theirs = session.preemptor_w, candidate.w_eff
        if theirs < mine:
            return Verdict(True, "W_eff {:.1f} < preemptor's {:.1f}", (theirs, mine))
        return Verdict(
            False, "W_eff {:.1f} >= preemptor's {:.1f} in the same queue", (theirs, mine)
        )


class ReclaimAcrossQueues:
    """Rule 3 and reading 6: reclaim only from over-guarantee, reclaimable branches.

    The static half is judged here: every queue on the victim's branch below
    the lowest common ancestor must be reclaimable and use more than its
    guarantee before the plan; never from an ancestor or descendant queue.
    The after-the-plan half (guarantees kept on both branches) depends on the
    whole plan and is checked by ``queues``. A candidate whose W_eff is not
    lower than the preemptor's stays allowed but protected: taken last.
    """

    name = "reclaim"

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        if candidate.same_queue:
            return None
        refusal = _queue_refusal(session, candidate.queue)
        if refusal is not None:
            return refusal
        theirs = candidate.queue
        if candidate.w_eff >= session.preemptor_w and session.sla_risk is not None:
            return Verdict(
                True,
                "W_eff {:.1f} >= preemptor's {:.1f}, not protected: {}",
                (candidate.w_eff, session.preemptor_w, session.sla_risk.describe()),
            )
        if candidate.w_eff >= session.preemptor_w:
            return Verdict(
                True,
                "protected: W_eff {:.1f} >= preemptor's {:.1f}, "
                "taken only if no plan without it exists",
                (candidate.w_eff, session.preemptor_w),
                protected=True,
            )
        return Verdict(
            True,
            "reclaimable from '{}' (W_eff {:.1f} < {:.1f})",
            (theirs, candidate.w_eff, session.preemptor_w),
        )


def _queue_refusal(session: PlanningSession, theirs: str) -> Verdict | None:
    """Why no job of queue ``theirs`` may be reclaimed, or None; judged once per queue."""
    memo = session.memo.setdefault("reclaim-refusals", {})
    assert isinstance(memo, dict)
    if theirs not in memo:
        memo[theirs] = _judge_queue(session, theirs)
    found: Verdict | None = memo[theirs]
    return found


def _judge_queue(session: PlanningSession, theirs: str) -> Verdict | None:
    tree, mine = session.tree, session.queue
    if tree.related(mine, theirs):
        return Verdict(
            False,
            "queue '{}' is an ancestor or descendant of '{}': never reclaimed",
            (theirs, mine),
        )
    top = tree.lowest_common_ancestor(mine, theirs)
    for queue in tree.branch_below(theirs, top):
        if not tree.queues[queue].reclaimable:
            return Verdict(False, "queue '{}' is not reclaimable", (queue,))
        used, guaranteed = session.usage[queue], tree.guarantee(queue)
        if used <= guaranteed:
            return Verdict(
                False,
                "queue '{}' uses {} GPUs, within its guarantee of {}",
                (queue, used, guaranteed),
            )
    return None


DEFAULT_RULES: tuple[Rule, ...] = (
    NotPreemptable(),
    InCooldown(),
    AtEvictionLimit(),
    WeightWithinQueue(),
    ReclaimAcrossQueues(),
)


class Judged(NamedTuple):
    """Every candidate's verdicts (by candidate index), and what they make of it."""

    verdicts: dict[int, list[tuple[str, Verdict]]]  # (rule name, verdict), in the rules' order
    eligible: list[int]  # no rule refused it, in candidate order
    protected: frozenset[int]  # eligible, but a rule allows it only as a last resort


def judge_candidates(session: PlanningSession, rules: Sequence[Rule], *, every: bool) -> Judged:
    """Who is eligible and who of them protected; with ``every``, each rule's verdict on each
    candidate too (``verdicts``), for an explained plan to list.

    Without ``every`` no verdict is kept, and a candidate's judging stops at its first
    refusal (nothing after it can make the candidate eligible again): an unexplained
    plan reads eligibility alone, and keeping 3,000 candidates' verdicts cost a quarter
    of judging them at 1,000 nodes. Eligibility is read off as the verdicts come rather
    than in a second pass: at 10,000 nodes this judges 30,000 candidates on every plan.
    """
    if not every:
        return _judge_eligibility(session, rules)
    judges = [(rule.name, rule.judge) for rule in rules]
    verdicts: dict[int, list[tuple[str, Verdict]]] = {}
    eligible: list[int] = []
    protected: list[int] = []
    for cand in session.candidates:
        named: list[tuple[str, Verdict]] = []
        allowed, shielded = True, False
        for name, judge in judges:
            verdict = judge(session, cand)
            if verdict is None:
                continue
            named.append((name, verdict))
            if not verdict.allowed:
                allowed = False
            elif verdict.protected:
                shielded = True
        verdicts[cand.index] = named
        if allowed:
            eligible.append(cand.index)
            if shielded:
                protected.append(cand.index)
    return Judged(verdicts, eligible, frozenset(protected))


def _judge_eligibility(session: PlanningSession, rules: Sequence[Rule]) -> Judged:
    """``judge_candidates`` without verdicts kept: each candidate judged up to its first
    refusal."""
    judges = [rule.judge for rule in rules]
    eligible: list[int] = []
    protected: list[int] = []
    for cand in session.candidates:
        shielded = False
        for judge in judges:
            verdict = judge(session, cand)
            if verdict is None:
                continue
            if not verdict.allowed:
                break
            if verdict.protected:
                shielded = True
        else:  # no rule refused it
            eligible.append(cand.index)
            if shielded:
                protected.append(cand.index)
    return Judged({}, eligible, frozenset(protected))
