"""Wire models: the contract of every document and topic gpuyield reads or writes.

This package imports nothing of ours (checked by import-linter), so any
component, in any process, can depend on it without pulling in policy or I/O.
"""

from gpuyield.schemas.errors import InputError, load_snapshot
from gpuyield.schemas.plan import (
    Action,
    Candidate,
    Objective,
    Plan,
    RuleVerdict,
    SearchStats,
    Victim,
)
from gpuyield.schemas.snapshot import (
    Job,
    JobState,
    Node,
    Pod,
    PodPhase,
    Policy,
    Queue,
    Snapshot,
    Topology,
)

__all__ = [
    "Action",
    "Candidate",
    "InputError",
    "Job",
    "JobState",
    "Node",
    "Objective",
    "Plan",
    "Pod",
    "PodPhase",
    "Policy",
    "Queue",
    "RuleVerdict",
    "SearchStats",
    "Snapshot",
    "Topology",
    "Victim",
    "load_snapshot",
]
