"""Production's claim: what gives way to a waiting job with an SLA, and when it is at risk.

The product's promise is production's SLA first, then the least lost work.
The eligibility rules that keep lost work down and stop livelocks (a job's
cooldown after it starts, its eviction limit, and the protection of heavy,
near-finished work in other queues) can leave a production job with no
victim at all, and then it waits while its budget runs out. In an
overloaded pool that is the rule, not the exception: a production gang
needs whole nodes, and nearly every node runs some job that started less
than a cooldown ago (the overloaded scenario measured a 40-minute p99 wait
where stock Volcano, which has no cooldowns, waited 30 s). So:

- a waiting job with an SLA (``sla_deadline``) may take a victim in its
  cooldown or at its eviction limit, as a *protected* victim: only when no
  plan without one exists, so least lost work still decides among the rest;
- once it has waited ``policy.sla_risk_share`` of its budget it is *at
  risk*: W_eff protection across queues is lifted too (and the controller
  raises an alert).

What never gives way: ``preemptable: false``, the queues' guarantees and
capability, gang integrity, and the same-queue W_eff rule (production does
not evict heavier production). The budget runs from ``submitted_at`` to
``sla_deadline``. A job without either, or one that runs, claims nothing.
Pure: the same snapshot always gives the same answer.
"""

from __future__ import annotations

from typing import NamedTuple

from gpuyield.schemas import Job, JobState, Policy


class SlaRisk(NamedTuple):
    """How far into its SLA budget a waiting job is."""

    waited_s: float
    budget_s: float
    share: float  # the policy's threshold

    def describe(self) -> str:
        if self.budget_s <= 0:
            return (
                "SLA at risk: its deadline is not after its submission "
                f"(waited {self.waited_s:.0f} s)"
            )
        return (
            f"SLA at risk: waited {self.waited_s:.0f} s of its {self.budget_s:.0f} s budget "
            f"({self.waited_s / self.budget_s:.0%} >= sla_risk_share {self.share:.0%})"
        )


def has_claim(job: Job) -> bool:
    """A waiting job with an SLA: cooldowns and eviction limits give way to it (taken last)."""
    return job.state is not JobState.RUNNING and job.sla_deadline is not None


def sla_risk(job: Job, now: float, policy: Policy) -> SlaRisk | None:
    """The job's risk if it waits with an SLA past ``policy.sla_risk_share`` of its budget."""
    if job.state is JobState.RUNNING or job.sla_deadline is None or job.submitted_at is None:
        return None
    return budget_risk(job.submitted_at, job.sla_deadline, now, policy.sla_risk_share)


def budget_risk(submitted_at: float, deadline: float, now: float, share: float) -> SlaRisk | None:
    """The rule on bare times, for callers that hold no snapshot (the simulator's ledger)."""
    waited = max(0.0, now - submitted_at)
    budget = deadline - submitted_at
    if budget > 0 and waited < share * budget:
        return None
    return SlaRisk(waited, max(0.0, budget), share)
