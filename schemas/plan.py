"""Preemption plan, format v1: the planner's output (../shared/spec/plan-contract.md).

The fields the contract names come first and keep its meaning. ``objective``,
``search`` and ``candidates`` are additions for audits: readers that do not
know them ignore them, as the contract allows.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from gpuyield.schemas.base import FormatVersion, WireModel


class Action(StrEnum):
    """Where the victims come from."""

    PREEMPT = "preempt"
    RECLAIM = "reclaim"
    MIXED = "mixed"
    NONE = "none"


class Victim(WireModel):
    """One evicted job, or the surplus pods of one elastic job."""

    job: str
    pods: tuple[str, ...]
    whole_job: bool
    gpus: int
    lost_gpu_seconds: float
    grace_s: float
    reason: str
    queue: str = ""
    protected: bool = False
    w_eff: float = 0.0


class Objective(WireModel):
    """The lexicographic cost the plan minimised, criterion by criterion."""

    protected_victims: int = 0
    lost_gpu_seconds: float = 0.0
    victim_jobs: int = 0
    victim_weight: float = 0.0


class SearchStats(WireModel):
    """How much of the search space was explored, in deterministic work units."""

    steps: int = 0
    budget: int = 0
    exhausted: bool = Field(
        False, description="True when the budget cut the search short: the plan is the best found."
    )


class RuleVerdict(WireModel):
    """What one eligibility rule said about one candidate."""

    rule: str
    allowed: bool
    reason: str
    protected: bool = False


class Candidate(WireModel):
    """A job that holds GPUs, with every rule's verdict on it as a victim."""

    job: str
    queue: str
    relation: Literal["preempt", "reclaim"]
    w_eff: float
    gpus: int
    lost_gpu_seconds: float = Field(description="Work lost if the whole job were evicted.")
    eligible: bool
    protected: bool
    outcome: Literal["victim", "spared", "ineligible"]
    verdicts: tuple[RuleVerdict, ...]


class Plan(WireModel):
    """What to evict so that the preemptor fits, and where its pods go."""

    version: FormatVersion = 1
    preemptor: str | None
    action: Action
    feasible: bool
    victims: tuple[Victim, ...] = ()
    placement: dict[str, str] = Field(default_factory=dict)
    lost_gpu_seconds: float = 0.0
    explanation: tuple[str, ...] = ()
    objective: Objective = Objective()
    search: SearchStats = SearchStats()
    candidates: tuple[Candidate, ...] = ()
