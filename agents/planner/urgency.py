"""When production's claim outranks every protection: a preemptor whose SLA is at risk.

The product's promise is production's SLA first, then the least lost work.
The eligibility rules that keep lost work down and stop livelocks (a job's
cooldown after it starts, its eviction limit, and the protection of heavy,
near-finished work in other queues) can leave a production job with no
victim at all, and then it waits while its budget runs out. So once a
waiting job with an SLA has used ``policy.sla_risk_share`` of its budget,
those three give way to it: its candidates are judged as if none of them
applied (cooldown and eviction-limit victims stay *protected*, taken only
when no plan without them exists; W_eff protection is lifted). What never
gives way: ``preemptable: false``, the queues' guarantees and capability,
gang integrity, and the same-queue W_eff rule (production does not evict
heavier production).

The budget runs from ``submitted_at`` to ``sla_deadline``. A job without
either, or one that runs, is never at risk. Pure: the same snapshot always
gives the same answer.
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
