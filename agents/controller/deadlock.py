"""The decider's view of gang deadlocks: the records in, a resolution to issue out.

Only a cheap look at the job views runs on every step: two or more jobs
holding GPUs with fewer pods than their gang minimum, that Volcano marked
unschedulable (a gang being bound pod by pod is partial for a moment, but
not unschedulable). Partial gangs are rare, so the snapshot, the detector and
the planner runs of ``policy.gang_deadlock`` run only then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gpuyield.agents.controller import cluster
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.records import Overlay
from gpuyield.agents.controller.snapshot_parts import SnapshotParts
from gpuyield.agents.policy import gang_deadlock
from gpuyield.schemas import JobState

NO_PREEMPTOR = ""
"""A name no job has: the detection snapshot includes every job holding GPUs."""


def partial_gang(view: cluster.JobView) -> bool:
    """A gang holding part of its minimum, with pods to place, that Volcano marked
    unschedulable: a member of a deadlock, if another one blocks it."""
    gang_min = len(view.pods) if view.min_available is None else view.min_available
    return (
        view.state is not JobState.SUSPENDED
        and 0 < view.placed < gang_min
        and any(p.node is None for p in view.pods)
        and view.unschedulable
    )


def members(
    views: Mapping[str, cluster.JobView],
    may_plan: Callable[[str], bool] = lambda _job: True,
    partial: Iterable[str] | None = None,
) -> frozenset[str]:
    """The gangs a deadlock may be made of: partly placed, unschedulable, free to plan.

    ``may_plan`` is the demand ledger's answer per gang: a gang whose round is
    in flight or cooling down is no member, which bounds the planner runs an
    unbreakable deadlock costs to one round per ``demand_retry_s``. ``partial``: the
    jobs of ``views`` for which ``partial_gang`` holds, where the caller keeps them
    (``index.RecordIndex``); by default they are looked for in ``views``.
    """
    if partial is None:
        partial = [v.name for v in views.values() if partial_gang(v)]
    return frozenset(name for name in partial if may_plan(name))


def resolve(
    records: Overlay,
    views: Mapping[str, cluster.JobView],
    now: float,
    config: ControllerConfig,
    may_plan: Callable[[str], bool] = lambda _job: True,
    *,
    partial: Iterable[str] | None = None,
    parts: SnapshotParts | None = None,
) -> gang_deadlock.Resolution | None:
    """The deadlock among partly placed gangs (``members``) and which one yields, or None.

    ``parts``: the decider's reused snapshot models (``cluster.snapshot``).
    """
    stuck = members(views, may_plan, partial)
    if len(stuck) < 2:
        return None
    snapshot = cluster.snapshot(records, views, NO_PREEMPTOR, now, config, parts=parts)
    found = gang_deadlock.find(snapshot, among=stuck)
    if found is None:
        return None
    return gang_deadlock.resolve(
        found,
        lambda member: cluster.snapshot(records, views, member, now, config, parts=parts),
        budget=config.planner_budget,
    )
