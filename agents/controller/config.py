"""The decider's knobs, each with its unit and why it has its default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gpuyield.schemas import Policy


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    policy: Policy = field(default_factory=Policy)
    """The contract's policy block (alpha, beta, cooldown, eviction limit, grace)."""

    demand_retry_s: float = 30.0
    """A shortage that found no plan is planned again after this long, or at once
    when the cluster changes in a way that can free GPUs (a pod or node event)."""

    ack_slack_s: float = 30.0
    """A yield not acknowledged this long after its deadline raises an alert and
    stops holding its demand back: the node agent hard-kills at the deadline, so
    only a lost agent leaves a yield unacknowledged."""

    reservation_s: float = 600.0
    """GPUs freed for a preemptor stay nominated for it this long; after that,
    other demands may plan with them (Volcano may have placed it elsewhere)."""

    max_clock_skew_s: float = 300.0
    """No message moves the decider's clock by more than this, and a tick this far
    behind the clock sets a poisoned clock back (``clock``). It is also the skew a
    trainer's clock may have before the progress agent corrects its times by the
    offset it observes. Workers' clocks must agree within it (NTP does)."""

    max_plans_per_step: int = 4
    """Planner calls per input message, so a burst of pending jobs cannot stall the stream."""

    planner_budget: int = 20_000
    """Search steps per plan (the planner's default)."""

    priority_classes: Mapping[str, float] = field(default_factory=dict)
    """PriorityClass name -> value, for objects whose pods carry no resolved ``spec.priority``."""

    rack_label: str = "topology.kubernetes.io/rack"
    nvlink_label: str = "nvidia.com/gpu.clique"
    """Node labels the planner's topology tie-breaks read (NVLink domain as
    published by NVIDIA's GPU feature discovery on multi-node NVLink systems)."""

    resume_backoff_base_s: float = 300.0
    """A job evicted n times recently waits base x 2^(n-1) before it may resume."""

    # -- the demand ledger's backoff (ISSUE9 §5: the controller backs off as the simulator does)
    demand_backoff_max_s: float | None = 1800.0
    """A demand whose rounds keep finding no plan is retried after ``demand_retry_s``,
    then twice, four times that, up to this long (None: never longer); any decided
    or settled round starts it afresh. The simulator's ``RETRY_BACKOFF_MAX_S``."""

    # -- retention: the table holds only what a later decision can need (ISSUE9 §5)
    yield_retention_s: float = 86400.0
    """A finished yield (acknowledged or expired, its pods gone) is kept this long,
    to recognise a redelivered ack and to apply a late one (its job is then
    recorded as suspended and resumed), then deleted. A day covers an agent
    partitioned from the broker for hours."""

    alert_retention_s: float = 86400.0
    """An alert's record (which keeps a replay from raising it again) is kept this
    long. Every alert is raised by a one-shot transition of a record that lives
    at least as long as the input that caused it can be replayed (a yield, the
    guard's window, a demand's round), and a replay after a crash covers only
    the uncommitted tail of the input (seconds), judged at the table's clock,
    never an older one; so an expired alert record raises nothing twice. Only
    a condition that persists past a day (a demand unservable all day) raises
    its alert again: once a day, as a reminder."""

    forget_after_s: float = 3600.0
    """Progress, suspension and demand records of a job that no watched object
    names any more (deleted by its owner) are deleted once their newest time
    is this old: heartbeats and watch events of a deleted job may still be in
    flight for a while, and one arriving later only recreates a record that
    expires again."""

    resume_starved_s: float = 1800.0
    """A suspended job that may resume (past its backoff, no heavier job waiting)
    and for which enough GPUs have been free this long without it resuming
    (fragmented, or held for others) raises a ``resume-starved`` alert."""

    # -- issue 9, the live path ------------------------------------------------
    capability_without_gpu: Literal["zero", "cluster"] = "zero"
    """How to read a Volcano Queue whose ``spec.capability`` names resources but
    not ``nvidia.com/gpu``: ``zero`` as Volcano v1.5-v1.8.1 do (0 GPUs), or
    ``cluster`` as v1.8.2 and later do (the cluster's GPUs less the other queues'
    guarantees). gpuyield cannot see the version; ``zero`` never evicts for a
    job some Volcano will not admit. See ``queue_capability``; an alert
    (``queue-misconfigured``) names such a queue and the fix either way."""

    adopt_aborted_jobs: bool = False
    """Adopt Volcano Jobs something else aborted (``status.state.phase`` Aborted
    or Aborting, with no yield of gpuyield's behind them): they become
    suspended jobs gpuyield resumes like its own. Off by default: an operator
    who aborted a job by hand usually meant it; ``gpuyield status`` lists them
    under "aborted outside gpuyield" either way."""
