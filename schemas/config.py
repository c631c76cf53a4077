"""The controller's policy knobs: one pure model that every component reads.

``ControllerConfig`` is what the decider's pure step, the live view, the
simulator's gpuyield policy and the demo take: the planner's ``Policy``
block (alpha, beta, cooldown, eviction cap and window, grace) plus the
controller's own timers and limits. It lives in ``gpuyield.schemas`` because
both sides must import it: the pure cores (which may import only wire
models) and the edge's settings (``gpuyield.streams.settings``, which may not
import ``gpuyield.agents``). The edge composes it into its pydantic-settings
model, so one model serves the worker, the node agent, the simulator and the
demo, and ``gpuyield config`` shows it.

``NodeAgentKnobs`` is the same for the node agent's waits (how long a
yielding pod may take to exit, when a kill has failed, ...).

Every leaf is a *knob* with a flat name: a field of ``ControllerConfig``
(``reservation_s``) or of a model nested in it (``policy.cooldown_s`` is the
knob ``cooldown_s``). The edge reads knob ``<name>`` from the variable
``GPUYIELD_<NAME>`` (``GPUYIELD_COOLDOWN_S``, ``GPUYIELD_RESERVATION_S``):
flat names are what an operator writes in a ConfigMap, and ``knob_paths``
checks that no two leaves share one.

**Adding a knob is a one-place edit**: add a field below, typed, with its
default and a docstring under it saying its unit and why it has its default
(the docstring becomes its description, in ``gpuyield config``, the README
table and the errors). Its variable ``GPUYIELD_<NAME>``, the settings-file
line, validation, provenance and ``gpuyield config`` follow from the field.
The documentation follows with no thinking: the README table is generated
(``tests/test_config_command.py`` prints the command when it is stale) and
the ConfigMap gains a commented-out line (``tests/deploy`` names what it
lacks). A constraint goes in the type (``Annotated[float, Field(ge=0)]``); a
check across knobs goes in ``_across_knobs`` and raises ``knob_error``
naming the knob, so the error names its variable.

The models are frozen pydantic models (no longer dataclasses): build them
with keywords, copy with ``model_copy(update=...)`` or, validated,
``with_knobs``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gpuyield.schemas.snapshot import Policy

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def knob_error(knob: str, message: str) -> PydanticCustomError:
    """A cross-knob error; ``knob`` (a dotted path such as ``policy.alpha``) names the culprit.

    The edge reads ``ctx["knob"]`` to name the variable to fix.
    """
    return PydanticCustomError("knob", "{knob}: " + message, {"knob": knob})


def check_label_key(value: str) -> str:
    """A Kubernetes label key: ``[prefix/]name`` (apimachinery's ``IsQualifiedName``)."""
    prefix, slash, name = value.rpartition("/")
    if not value or len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"{value!r} is not a Kubernetes label key: the name (after any '/') must be 1-63 "
            "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(
            f"{value!r} is not a Kubernetes label key: the prefix {prefix!r} must be a DNS "
            "subdomain (lowercase letters, digits, '-' and '.')"
        )
    return value


def parse_priority_classes(value: Any) -> Any:
    """``{"name": value}`` as a mapping, JSON text, or ``name=value,name=value`` text."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return {}
    if text.startswith(("{", "[")):  # JSON (a list is then reported as not a mapping)
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        name, equals, number = item.partition("=")
        if not item:
            continue
        if not equals or not name.strip() or not number.strip():
            raise ValueError(f"{item!r} is not name=value (e.g. 'production=1000,research=100')")
        pairs[name.strip()] = number.strip()
    return pairs


SPARED_EVENTS = 20
"""How many ``Spared`` Kubernetes Events one decision writes at most, by default
(``GPUYIELD_KUBE_EVENTS_SPARED``); every victim gets its ``GracefulYield`` whatever this is."""


class ControllerConfig(BaseModel):
    """The decider's knobs, each with its unit and why it has its default."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",  # ControllerConfig(reservation=...) is a typo, not a new knob
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )

    policy: Policy = Policy()
    """The contract's policy block (alpha, beta, cooldown, eviction limit, grace)."""

    demand_retry_s: Annotated[float, Field(ge=0)] = 30.0
    """A shortage that found no plan is planned again after this long, or at once
    when the cluster changes in a way that can free GPUs (a pod or node event)."""

    demand_backoff_max_s: Annotated[float, Field(ge=0)] = 1800.0
    """A demand whose rounds keep finding no plan is retried after demand_retry_s
    doubled per failed round in a row, up to this long (the simulator's value;
    any decided or settled round starts it afresh); equal to demand_retry_s:
    never grows."""

    sla_retry_s: Annotated[float, Field(ge=0)] = 10.0
    """A demand with an SLA (gpuyield.io/sla-seconds) skips the retry cooldown and the
    backoff: it is planned again this long after its last round, while a round of it
    is not in flight."""

    ack_slack_s: Annotated[float, Field(ge=0)] = 30.0
    """A yield not acknowledged this long after its deadline raises an alert and
    stops holding its demand back: the node agent hard-kills at the deadline, so
    only a lost agent leaves a yield unacknowledged."""

    reservation_s: Annotated[float, Field(gt=0)] = 600.0
    """GPUs freed for a preemptor stay nominated for it this long; after that,
    other demands may plan with them (Volcano may have placed it elsewhere)."""

    max_plans_per_step: Annotated[int, Field(ge=1)] = 4
    """Planner calls per input message, so a burst of pending jobs cannot stall the stream."""

    planner_budget: Annotated[int, Field(ge=1)] = 20_000
    """Search steps per plan (the planner's default)."""

    priority_classes: Mapping[str, float] = Field(default_factory=dict)
    """PriorityClass name -> value, for objects whose pods carry no resolved
    ``spec.priority``: the base weight of W_eff. JSON or name=value,name=value."""

    rack_label: str = "topology.kubernetes.io/rack"
    """Node label naming the rack, for the planner's topology tie-breaks."""

    nvlink_label: str = "nvidia.com/gpu.clique"
    """Node label naming the NVLink domain (as NVIDIA's GPU feature discovery
    publishes it on multi-node NVLink systems), for the topology tie-breaks."""

    resume_backoff_base_s: Annotated[float, Field(ge=0)] = 300.0
    """A job evicted n times recently waits base x 2^(n-1) before it may resume."""

    # -- retention: the table holds only what a later decision can need (issue 9 §5)
    yield_retention_s: Annotated[float, Field(ge=0)] = 86400.0
    """A finished yield (acknowledged or expired, its pods gone) is kept this long,
    to recognise a redelivered ack and to apply a late one (its job is then
    recorded as suspended and resumed), then deleted. A day covers an agent
    partitioned from the broker for hours."""

    alert_retention_s: Annotated[float, Field(ge=0)] = 86400.0
    """An alert's record (which keeps a replay from raising it again) is kept this
    long. Every alert is raised by a one-shot transition of a record that lives
    at least as long as the input that caused it can be replayed, and a replay
    after a crash covers only the uncommitted tail of the input, judged at the
    table's clock, so an expired alert record raises nothing twice; a condition
    that persists past a day raises its alert again, once a day, as a reminder."""

    forget_after_s: Annotated[float, Field(ge=0)] = 3600.0
    """Progress, suspension and demand records of a job that no watched object
    names any more (deleted by its owner) are deleted once their newest time is
    this old: heartbeats and watch events of a deleted job may still be in
    flight for a while."""

    resume_starved_s: Annotated[float, Field(ge=0)] = 1800.0
    """A suspended job that may resume (past its backoff, no heavier job waiting)
    and for which enough GPUs have been free this long without it resuming
    (fragmented, or held for others) raises a resume-starved alert."""

    # -- conditions watched on ticks (issue 13; agents/controller/incidents.py)
    checkpoint_stale_factor: Annotated[float, Field(ge=1)] = 3.0
    """A preemptable running job that reports a checkpoint interval and whose newest
    checkpoint is older than this many intervals raises checkpoint-stale: a yield
    would lose more work than its owner planned for."""

    pending_sla_s: Annotated[float, Field(ge=0)] = 0.0
    """A gang of priority sla_priority or more that has waited this long without
    being placed raises pending-past-sla. 0: off (set it to the production SLA)."""

    sla_priority: float = 1000.0
    """The priority (a pod's spec.priority, or priority_classes' weight) from which a
    job is held to pending_sla_s."""

    dangling_gang_s: Annotated[float, Field(gt=0)] = 300.0
    """A running gang the watch shows with fewer pods placed than its minAvailable for
    this long raises dangling-gang: it holds GPUs and cannot make progress."""

    volcano_evicting_quiet_s: Annotated[float, Field(gt=0)] = 1800.0
    """A volcano-evicting incident (pods a scheduler evicted beside gpuyield, seen from
    the watch) is resolved once no such eviction has been seen for this long."""

    # -- the live path (issue 9 §3) and trusted time (issue 11 §1)
    capability_without_gpu: Literal["zero", "cluster"] = "zero"
    """How to read a Volcano Queue whose spec.capability names resources but not
    nvidia.com/gpu: zero as Volcano v1.5-v1.8.1 do (0 GPUs), or cluster as
    v1.8.2 and later do (the cluster's GPUs less the other queues' guarantees).
    gpuyield cannot see the version; zero never evicts for a job some Volcano
    will not admit. A queue-misconfigured alert names such a queue either way."""

    adopt_aborted_jobs: bool = False
    """Adopt Volcano Jobs something else aborted (Aborted or Aborting, with no
    yield of gpuyield's behind them): they become suspended jobs gpuyield resumes
    like its own. Off by default: an operator who aborted a job by hand usually
    meant it; gpuyield status lists them either way."""

    progress_forward_delta: Annotated[float, Field(gt=0, le=1)] = 0.01
    """The progress agent forwards a job's summary to the decider once its progress
    has moved this much (a fraction: 0.01 is one percent) since the copy the decider
    has. A new checkpoint is forwarded at once whatever this says. Progress enters a
    job's weight squared, so a percent moves W by at most 2 % of beta."""

    progress_forward_silence_s: Annotated[float, Field(gt=0)] = 300.0
    """The progress agent forwards a job's summary at the latest this long after the
    last forward, while the job keeps beating, even when it moved less than
    progress_forward_delta. No decision reads how fresh the copy is (only its progress and newest
    checkpoint, forwarded by the rules above), so this only bounds how old the step
    and step rate that gpuyield status shows may be. Each forward is a decider input,
    a journal record and a changelog record: at 60 s, 30,000 jobs would send the
    decider 500 of them a second for nothing new."""

    max_clock_skew_s: Annotated[float, Field(gt=0)] = 300.0
    """No input but a worker's tick moves the decider's clock more than this past
    the newest tick, and a tick this far behind the clock sets a poisoned clock
    back. It is also the skew a trainer's clock may have (a beat's `sent_at`
    against its Kafka record's timestamp, so a backlog is not skew) before the
    progress agent takes its heartbeats in the worker's time. Workers' clocks
    must agree within it (NTP does)."""

    @field_validator("priority_classes", mode="before")
    @classmethod
    def _parse_classes(cls, value: Any) -> Any:
        return parse_priority_classes(value)

    @field_validator("priority_classes")
    @classmethod
    def _check_classes(cls, value: Mapping[str, float]) -> Mapping[str, float]:
        for name, weight in value.items():
            if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
                raise ValueError(f"{name!r} is not a PriorityClass name (a DNS subdomain)")
            if not math.isfinite(weight):
                raise ValueError(f"{name}: the value must be a finite number")
        return value

    @field_validator("rack_label", "nvlink_label")
    @classmethod
    def _check_label(cls, value: str) -> str:
        return check_label_key(value)

    @model_validator(mode="after")
    def _across_knobs(self) -> ControllerConfig:
        policy = self.policy
        for knob in ("alpha", "beta"):
            if getattr(policy, knob) < 0:
                raise knob_error(
                    f"policy.{knob}", "must be >= 0 (a negative weight favours evicting old work)"
                )
        if policy.eviction_window_s <= 0:
            raise knob_error(
                "policy.eviction_window_s",
                "must be > 0 (an empty window counts no eviction: the cap would never apply)",
            )
        if policy.max_evictions < 1:
            raise knob_error(
                "policy.max_evictions",
                "must be >= 1 (at 0 no job could ever be a victim)",
            )
        if self.demand_backoff_max_s < self.demand_retry_s:
            raise knob_error(
                "demand_backoff_max_s",
                f"{self.demand_backoff_max_s:g} is below demand_retry_s "
                f"({self.demand_retry_s:g}), where the backoff starts",
            )
        return self


class NodeAgentKnobs(BaseModel):
    """The node agent's waits while it carries out a yield (``ExecutorSettings``).

    Each name starts with ``node_`` so its variable says whose it is
    (``GPUYIELD_NODE_KILL_TIMEOUT_S``).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True
    )

    node_stale_after_s: Annotated[float, Field(ge=0)] = 60.0
    """A yield command received this long after its deadline is refused (acked as stale):
    its demand was decided on a cluster that has moved on."""

    node_exit_grace_s: Annotated[float, Field(ge=0)] = 10.0
    """After a yielding pod reported its checkpoint, how long it may take to exit
    before it is killed."""

    node_settle_s: Annotated[float, Field(ge=0)] = 2.0
    """After the pods are gone, how long to wait for a checkpoint heartbeat still in flight."""

    node_poll_s: Annotated[float, Field(gt=0)] = 0.5
    """How often pod liveness is checked while a yield waits."""

    node_kill_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """After a kill, how long the pods may take to be gone before the yield is reported
    as failed."""

    node_release_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    """How long a suspension or a resume is retried (the API server unreachable, a
    conflict) before the agent gives up and reports it."""

    @model_validator(mode="after")
    def _across_knobs(self) -> NodeAgentKnobs:
        if self.node_poll_s > self.node_kill_timeout_s:
            raise knob_error(
                "node_poll_s",
                f"{self.node_poll_s:g} is above node_kill_timeout_s ({self.node_kill_timeout_s:g}):"
                " a kill would time out before the first look",
            )
        return self


def knob_paths(model: type[BaseModel] = ControllerConfig) -> dict[str, tuple[str, ...]]:
    """Every knob's flat name -> its path in ``model``: ``cooldown_s -> (policy, cooldown_s)``.

    Raises ``ValueError`` when two leaves share a flat name: each needs its own variable.
    """
    out: dict[str, tuple[str, ...]] = {}
    for name, info in model.model_fields.items():
        nested = info.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            leaves = {leaf: (name, *path) for leaf, path in knob_paths(nested).items()}
        else:
            leaves = {name: (name,)}
        for leaf, path in leaves.items():
            if leaf in out:
                raise ValueError(
                    f"knob {leaf!r} is both {'.'.join(out[leaf])} and {'.'.join(path)}"
                )
            out[leaf] = path
    return out


POLICY_HELP: dict[str, str] = {
    "alpha": "Weight of ln(1 + hours run) in W_eff: how much the time a job has run protects it.",
    "beta": "Weight of progress squared in W_eff: how much nearness to completion protects a job.",
    "cooldown_s": "Seconds after a job starts or resumes during which it is never a victim.",
    "max_evictions": "Evictions inside eviction_window_s at which a job is no longer a victim "
    "(the cap that ends preempt -> requeue -> preempt cycles).",
    "eviction_window_s": "Seconds of eviction history that max_evictions counts.",
    "grace_s": "Seconds a yielding pod gets to checkpoint before it is killed (the deadline "
    "written into plans and yield commands).",
}
"""The planner's policy knobs as an operator reads them (units, purpose): the contract's
``Policy`` descriptions are written for the snapshot's readers."""

KNOBS: dict[str, tuple[str, ...]] = knob_paths()
"""Every knob of ``ControllerConfig``, by flat name, in declaration order."""


def knob_value(config: BaseModel, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in ``config``."""
    value: Any = config
    for part in path:
        value = getattr(value, part)
    return value


def nest(flat: Mapping[str, Any], knobs: Mapping[str, tuple[str, ...]] = KNOBS) -> dict[str, Any]:
    """``{"cooldown_s": 60}`` -> ``{"policy": {"cooldown_s": 60}}``: flat knob values as a tree."""
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        *parents, leaf = knobs[name]
        at = tree
        for part in parents:
            at = at.setdefault(part, {})
        at[leaf] = value
    return tree


def with_knobs(config: ControllerConfig, flat: Mapping[str, Any]) -> ControllerConfig:
    """``config`` with the knobs in ``flat`` (by flat name) replaced, validated again."""
    tree = config.model_dump()
    for name, value in flat.items():
        *parents, leaf = KNOBS[name]
        at = tree
        for part in parents:
            at = at[part]
        at[leaf] = value
    return ControllerConfig.model_validate(tree)
