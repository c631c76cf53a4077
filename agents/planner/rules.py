"""The shape every eligibility rule has, like a Volcano plugin's preemptable fn.

A rule looks at one candidate victim against the preemptor, over a read-only
session, and returns a verdict as data (never a log line): ``--explain`` and
the decision records print every rule's verdict, not only the first refusal.
A rule that does not apply to a candidate returns None (Volcano's abstain).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from gpuyield.agents.planner.session import CandidateFacts, PlanningSession


class Verdict(NamedTuple):
    """One rule's answer about one candidate victim.

    The reason is kept as a template and its values and only formatted when
    someone reads it: a 1000-node plan judges thousands of candidates and
    prints none of them unless asked to explain.
    """

    allowed: bool
    template: str
    values: tuple[object, ...] = ()
    protected: bool = False

    @property
    def reason(self) -> str:
        return self.template.format(*self.values)


class Rule(Protocol):
    """An eligibility rule: pure, stateless, judged per candidate."""

    name: str

    def judge(self, session: PlanningSession, candidate: CandidateFacts) -> Verdict | None:
        """The verdict on ``candidate`` as a victim of the session's preemptor."""
        ...
