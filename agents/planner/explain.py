"""Turning the search's result into the plan's words: victims, candidates, explanation.

Reasons are data. ``gpuyield plan --explain`` prints them as a table, and the
controller's decision records carry them, so an operator can see why each job
was or was not taken without reading a log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gpuyield.agents.planner.rules import Verdict
from gpuyield.agents.planner.session import CandidateFacts, PlanningSession
from gpuyield.schemas import Candidate, RuleVerdict, Victim


def rule_verdicts(
    named: Sequence[tuple[str, Verdict]],
    shared: dict[tuple[str, bool, str, bool], RuleVerdict] | None = None,
) -> tuple[RuleVerdict, ...]:
    """Each rule's verdict as the plan states it.

    ``shared`` holds the ones already made in this plan, by their exact
    content: many candidates get the very same verdict (preemptable, never
    evicted, the same queue's refusal), an explained plan at 10,000 nodes
    states 150,000 of them, and a frozen model can be one object in many
    places (the plan's bytes are the same).
    """
    if shared is None:
        shared = {}
    out = []
    for name, v in named:
        key = (name, v.allowed, v.reason, v.protected)
        made = shared.get(key)
        if made is None:
            made = RuleVerdict(rule=name, allowed=v.allowed, reason=key[2], protected=v.protected)
            shared[key] = made
        out.append(made)
    return tuple(out)


def whole_job_loss(cand: CandidateFacts) -> float:
    return math.fsum(p.gpus * cand.lost_per_gpu_s for p in cand.pods)


def describe_victim(
    session: PlanningSession, cand: CandidateFacts, pods: frozenset[int], protected: bool
) -> Victim:
    evicted = sorted(cand.pods[p].name for p in pods)
    gpus = sum(cand.pods[p].gpus for p in pods)
    lost = math.fsum(cand.pods[p].gpus * cand.lost_per_gpu_s for p in pods)
    whole = len(pods) == len(cand.pods)
    kind = "preempt" if cand.same_queue else f"reclaim from queue '{cand.queue}'"
    scope = (
        "whole job"
        if whole
        else f"{len(pods)} surplus pod(s) above min_available {cand.min_running}"
    )
    since = "last checkpoint" if cand.job.last_checkpoint_at is not None else "start"
    reason = (
        f"{kind}: {scope}, W_eff {cand.w_eff:.1f} vs preemptor's {session.preemptor_w:.1f}; "
        f"loses {lost:.0f} GPU-seconds since its {since}"
    )
    if protected:
        reason += "; protected, taken because no plan without it exists"
    return Victim(
        job=cand.name,
        pods=tuple(evicted),
        whole_job=whole,
        gpus=gpus,
        lost_gpu_seconds=lost,
        grace_s=session.snapshot.policy.grace_s,
        reason=reason,
        queue=cand.queue,
        protected=protected,
        w_eff=cand.w_eff,
    )


def describe_candidates(
    session: PlanningSession,
    verdicts: Mapping[int, tuple[RuleVerdict, ...]],
    evicted: Mapping[int, frozenset[int]],
) -> tuple[Candidate, ...]:
    out = []
    for cand in session.candidates:
        named = verdicts[cand.index]
        eligible = all(v.allowed for v in named)
        protected = eligible and any(v.protected for v in named)
        outcome = "victim" if evicted.get(cand.index) else ("spared" if eligible else "ineligible")
        out.append(
            Candidate(
                job=cand.name,
                queue=cand.queue,
                relation="preempt" if cand.same_queue else "reclaim",
                w_eff=cand.w_eff,
                gpus=cand.gpus,
                lost_gpu_seconds=whole_job_loss(cand),
                eligible=eligible,
                protected=protected,
                outcome=outcome,
                verdicts=named,
            )
        )
    return tuple(out)
