"""What the decider derives from its table, kept up to date instead of rebuilt per message.

A step used to rebuild every job view from the whole table (up to three times
per message) and to sort every key to find a prefix: at 30,000 jobs that is
most of a second for a message that decides nothing. ``RecordIndex`` holds
the same derived state, updated from each step's writes:

- each kind's keys (``node/``, ``pod/``...), sorted on demand, so a prefix is
  a bisection and a step's overlay never walks the table;
- the records a step parsed, by key, reused while the table holds the same
  value (the table keeps the object a step wrote, so the check is ``is``);
- which pods, PodGroups and yields belong to which job, and each job's view
  (``cluster.job_view``, the function ``cluster.jobs`` applies to every job):
  a write recomputes the views of the jobs it touches, nothing else;
- the sets the decider scans on every message: the demands (waiting and
  unschedulable), the partial gangs, the dangling gangs, the queues that hold
  GPU jobs, the cluster's GPUs; and on ticks the candidates of the
  checkpoint-stale and pending-past-SLA conditions;
- a memo of the demands whose last round changed nothing, with what that
  round read and until when it cannot change (``decider._decide``);
- the last snapshot's node and job models (``snapshot_parts``), which the
  next snapshot reuses for the nodes and jobs no input changed since.

The index is a function of the records alone (and the configuration): the
worker and ``replay`` keep one next to the table and ``apply`` each step's
writes to both; a restart builds it from the table (``build``). ``step`` reads
it through a ``Scratch``, which lays the step's own writes over it; what the
caller holds describes the table it holds, so the step stays pure. The writes
are taken back off lazily (``Pending``): by ``apply`` when the caller applies
other writes, by the next reader otherwise, and not at all when the caller
applies the step's own writes, as the worker does after nearly every step.
``tests/controller/test_decider_index.py`` checks that an index carried
across steps equals one built afresh, that its views equal ``cluster.jobs``,
and that the outcomes are byte-identical to those of the decider that
rebuilt everything.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Container, ItemsView, Iterator, Mapping, ValuesView
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpuyield.agents.controller import aborted, cluster, deadlock, incidents, queue_capability
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.free_capacity import FreeCapacity, node_facts
from gpuyield.agents.controller.records import (
    ALERT,
    CLOCK,
    DEMAND,
    EVICTIONS,
    GROUP,
    NODE,
    POD,
    PROGRESS,
    QUEUE,
    SUSPENDED,
    VJOB,
    YIELD,
    ClockRecord,
    GroupRecord,
    Overlay,
    PodRecord,
    ProgressRecord,
    Record,
    RecordModel,
    SuspendedRecord,
    VJobRecord,
    Writes,
    YieldRecord,
)
from gpuyield.agents.controller.snapshot_parts import SnapshotParts
from gpuyield.schemas.messages import AlertKind

JOB_KINDS = (POD, GROUP, VJOB, YIELD, SUSPENDED, PROGRESS)
"""The kinds of record a job's view is computed from."""

RETAINED = (PROGRESS, SUSPENDED, DEMAND)
"""Per-job records kept until no watched object names the job, then for a while
(``decider._forget``)."""

UNCACHED = (POD, GROUP, VJOB)
"""Kinds whose parsed records are not kept across steps: many, and read only
when their job's view is recomputed."""

DEMAND_VIEWS = "demand views"
"""``epochs``' count of the changes of a demand's view (one entering or leaving included)."""

ALERT_VIEWS = "alert views"
"""``epochs``' count of the recomputations of the views of jobs with an open condition
alert, and of the changes of the set of stuck gangs while a gang-deadlock alert is open
(the one condition that reads it: gangs are bound pod by pod, each a change of the set)."""

GANG_DEADLOCK = AlertKind.GANG_DEADLOCK.value
INVALID_INPUT = AlertKind.INVALID_INPUT.value

WAKE_MARGIN_S = 1.0
"""How early a time-driven re-evaluation is scheduled: a little early costs one
more look, a little late would change a decision."""


def kind_of(key: str) -> str:
    """The key prefix (``KINDS``' key) a key or a narrower prefix belongs to."""
    slash = key.find("/")
    return key if slash < 0 else key[: slash + 1]


@dataclass(frozen=True, slots=True)
class Quiet:
    """A demand's round that changed nothing, with what it read (compared with ``is``)
    and the time before which the same reads cannot give another round."""

    view: cluster.JobView
    demand: Record | None
    reservation: Record | None
    yielding: bool
    alert: Record | None
    until: float


@dataclass(frozen=True, slots=True)
class ResumeMemo:
    """What the resume pass learned at these epochs, until a reservation expires.

    For each job it looked at, and the GPUs held for heavier jobs before it,
    the free GPUs and its hold; made only when none of them had room for its
    job, so the planner was never asked.
    """

    epochs: tuple[int, ...]
    until: float
    found: Mapping[tuple[str, tuple[tuple[str, int], ...]], tuple[int, Mapping[str, int]]]
    validated: bool = True
    """A snapshot was built (and was valid) at these epochs, not only the free-GPU counts."""


@dataclass(frozen=True, slots=True)
class NoDeadlock:
    """These partial gangs did not block each other at these epochs, until ``until``."""

    epochs: tuple[int, ...]
    gangs: frozenset[str]
    until: float


class RecordIndex:
    """The decider's derived state for one table and one configuration (see the module)."""

    def __init__(self, config: ControllerConfig, *, free_capacity: bool = True) -> None:
        self.config = config
        self.free = FreeCapacity() if free_capacity else None
        """The free GPUs per node, for the resume pass's check without a snapshot (None:
        every check builds the snapshot, as before it; the reference in tests and benches)."""
        self.keys: dict[str, set[str]] = {}
        self._sorted: dict[str, list[str]] = {}
        self.parsed: dict[str, tuple[Record, RecordModel]] = {}
        self.node_gpus: dict[str, int] = {}
        self.cluster_gpus = 0
        self.group_job: dict[str, str] = {}
        self.job_groups: dict[str, set[str]] = {}
        self.pod_job: dict[str, str] = {}
        self.job_pods: dict[str, set[str]] = {}
        self.pod_ref: dict[str, str] = {}
        self.ref_pods: dict[str, set[str]] = {}
        self.yield_job: dict[str, str] = {}
        self.job_yields: dict[str, set[str]] = {}
        self.open_yields: set[str] = set()
        """The yields not done (or whose ``done_at`` is not a number), by key tail."""
        self.done_yields: dict[str, float] = {}
        """Each done yield's ``done_at``, by key tail: kept a day, read only when due."""
        self._done_order: list[tuple[float, str]] = []  # done_yields, sorted by done_at
        self._views: dict[str, cluster.JobView] = {}
        self._names: list[str] | None = None
        self.dirty: set[str] = set()
        self.renote: set[str] = set()
        """Jobs whose progress record changed in a way their view does not read: noted
        again (checkpoint due, alerts), not recomputed (``track``)."""
        self.progress_seen: dict[str, object] = {}
        """Per job, what its view reads of its progress record: its ``first_seen_at``."""
        self.demands: set[str] = set()
        self.partial: set[str] = set()
        self.stuck: set[str] = set()
        self.dangling: set[str] = set()
        self.pending_sla: set[str] = set()
        self.checkpoint_due: dict[str, float] = {}
        self.queues: Counter[str] = Counter()
        self.quiet: dict[str, Quiet] = {}
        self.epochs: Counter[str] = Counter()
        """How often each kind of record was written, and ``DEMAND_VIEWS``, ``ALERT_VIEWS``:
        a memo made at equal epochs read the same records (``decider``'s ``_epochs``)."""
        self.alert_job: dict[str, str] = {}
        self.alert_jobs: Counter[str] = Counter()
        self.deadlock_alerts: set[str] = set()
        """The keys of the open gang-deadlock alerts."""
        self.invalid_alerts: set[str] = set()
        """The keys of the open invalid-input alerts (only a snapshot built shows them over)."""
        self.retained: dict[str, set[str]] = {}
        """Per job, the kinds of ``RETAINED`` record the table holds for it."""
        self.unnamed: set[str] = set()
        """The jobs with a ``RETAINED`` record that no PodGroup, pod or Volcano Job names
        (``cluster.known_jobs``): what retention looks at on ticks, not every job."""
        self.aborted_vjobs: set[str] = set()
        """The Volcano Jobs (``namespace/name``) whose phase is Aborting or Aborted."""
        self.gpuless_queues: set[str] = set()
        """The keys of the queues whose capability names no GPUs (``queue_capability``)."""
        self.demands_memo: tuple[tuple[int, ...], float] | None = None
        """The epochs at which every demand's round changed nothing, and until when."""
        self.resolve_memo: tuple[int, ...] | None = None
        """The epochs at which no open condition alert had ended."""
        self.deadlock_memo: NoDeadlock | None = None
        """The last partial gangs found not to block each other (``decider._gang_deadlock``)."""
        self.resume_memo: ResumeMemo | None = None
        """What the resume pass's snapshots answered at the last epochs it could remember."""
        self.parts = SnapshotParts(fed=True)
        """The last snapshot's models, reused by the next (``cluster.snapshot``'s ``parts``).
        The index tells it which jobs' views and records change (its ``feed``)."""
        self.pending: Pending | None = None
        """The last step's job records, still laid over the views (``Scratch``): ``apply``
        keeps them when given those writes, anything else takes them off first."""

    @classmethod
    def build(
        cls, records: Mapping[str, Record], config: ControllerConfig, *, free_capacity: bool = True
    ) -> RecordIndex:
        """The index of ``records``: what a restarted worker builds from its recovered table."""
        index = cls(config, free_capacity=free_capacity)
        for key in records:
            value = records[key]
            index._key(key, value)
            index.track(key, value)
        index.refresh(index.reader(records))
        return index

    def warm(self, records: Mapping[str, Record]) -> None:
        """Build the snapshot's node and job models once (``parts``), at the table's time.

        A plan reuses the models of the last snapshot; after a restart there is
        none, and the first plan built every one: 1.3 s of a 10,000-node plan,
        paid by the first urgent demand after a restart. A restarted worker
        calls this after ``build``, where that time is part of its recovery.
        A snapshot the records cannot make is left to the first plan to report.
        """
        reader = self.reader(records)
        saved = reader.typed(CLOCK, ClockRecord)
        if saved is None:
            return  # an empty table: nothing to build
        try:
            cluster.snapshot(reader, self.views(), "", saved.now, self.config, parts=self.parts)
        except ValidationError:
            return

    def apply(self, writes: Writes, records: Mapping[str, Record]) -> None:
        """Follow ``writes``, already applied to ``records`` (the table after them).

        When they are the writes of the step just taken on this index, its job
        views are already those of these writes: only the keys are followed.
        Otherwise the step's records are taken off first, then these followed.
        """
        pending, self.pending = self.pending, None
        if pending is not None and pending.complete and pending.made_by(writes):
            for key, value in writes.items():
                self._key(key, value)  # the step tracked its job records, these very values
            return
        if pending is not None:
            self._take_off(pending, records)
        for key, value in writes.items():
            self._key(key, value)
            self.track(key, value)
        self.refresh(self.reader(records))

    def settle(self, records: Mapping[str, Record] | None = None) -> None:
        """Take the last step's records off the views, if they are still laid over them:
        the index then describes ``records`` (by default the table that step read)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            self._take_off(pending, pending.base if records is None else records)

    def _take_off(self, pending: Pending, records: Mapping[str, Record]) -> None:
        for key in pending.applied:
            self.track(key, records.get(key))
        # The views from before the step are the ones wanted while ``records`` still holds
        # what the step read; else (the caller moved on) they are computed from it.
        unchanged = all(records.get(key) is value for key, value in pending.read.items())
        self.refresh(self.reader(records), known=pending.before if unchanged else None)

    def reader(self, records: Mapping[str, Record]) -> Overlay:
        return Overlay(records, {}, self)

    # -- keys --------------------------------------------------------------
    def _key(self, key: str, value: Record | None) -> None:
        kind = kind_of(key)
        self.epochs[kind] += 1
        if kind in (PROGRESS, EVICTIONS):
            self.parts.touch(key[len(kind) :])  # a snapshot's job reads both
        if kind == ALERT:
            self._alert(key, value)
        elif kind == QUEUE:
            self.gpuless_queues.discard(key)
            if value is not None and queue_capability.lacks_gpu(value):
                self.gpuless_queues.add(key)
        elif kind == VJOB:
            self.aborted_vjobs.discard(key[len(VJOB) :])
            if value is not None and value.get("phase") in aborted.ABORTED_PHASES:
                self.aborted_vjobs.add(key[len(VJOB) :])
        if kind in RETAINED:
            job = key[len(kind) :]
            kinds = self.retained.setdefault(job, set())
            if value is None:
                kinds.discard(kind)
                if not kinds:
                    del self.retained[job]
            else:
                kinds.add(kind)
        keys = self.keys.setdefault(kind, set())
        if value is None:
            self.parsed.pop(key, None)
            if key in keys:
                keys.discard(key)
                self._sorted.pop(kind, None)
        elif key not in keys:
            keys.add(key)
            self._sorted.pop(kind, None)
        if kind == NODE:
            self.cluster_gpus -= self.node_gpus.pop(key, 0)
            if value is not None:
                self.node_gpus[key] = int(value.get("gpus", 0))
                self.cluster_gpus += self.node_gpus[key]
            if self.free is not None:
                self.free.node(key[len(NODE) :], node_facts(value))
        if kind in RETAINED or kind == VJOB:
            self._check_named(key[len(kind) :])

    def _check_named(self, job: str) -> None:
        """Keep ``unnamed`` true of ``job`` (after its records or its watched objects moved)."""
        if job in self.retained and not self.named(job):
            self.unnamed.add(job)
        else:
            self.unnamed.discard(job)

    def named(self, job: str, keys: Container[str] | None = None) -> bool:
        """Whether a PodGroup, pod or Volcano Job names ``job``; the Volcano Jobs looked up
        in ``keys`` (a step's records), else among the table's."""
        vjobs = self.keys.get(VJOB, ()) if keys is None else keys
        return job in self.job_groups or job in self.job_pods or VJOB + job in vjobs

    def _alert(self, key: str, value: Record | None) -> None:
        """Keep the jobs of the open condition alerts (whose end a view change may bring)."""
        self.deadlock_alerts.discard(key)
        self.invalid_alerts.discard(key)
        fields = value if value is not None else {}
        if fields.get("resolved_at") is None and fields.get("kind") == GANG_DEADLOCK:
            self.deadlock_alerts.add(key)
        if fields.get("resolved_at") is None and fields.get("kind") == INVALID_INPUT:
            self.invalid_alerts.add(key)
        old = self.alert_job.pop(key, None)
        if old is not None:
            self.alert_jobs[old] -= 1
            if not self.alert_jobs[old]:
                del self.alert_jobs[old]
        if (
            value is not None
            and value.get("resolved_at") is None
            and value.get("kind") in incidents.CONDITION_VALUES
            and value.get("job")
        ):
            self.alert_job[key] = value["job"]
            self.alert_jobs[value["job"]] += 1

    def sorted_keys(self, prefix: str) -> list[str]:
        """The keys starting with ``prefix``, in key order."""
        kind = kind_of(prefix)
        keys = self._sorted.get(kind)
        if keys is None:
            keys = self._sorted[kind] = sorted(self.keys.get(kind, ()))
        if prefix == kind:
            return keys
        start = bisect.bisect_left(keys, prefix)
        stop = bisect.bisect_left(keys, prefix + "\U0010ffff")
        return keys[start:stop]

    def cached(self, key: str) -> bool:
        """Whether ``key``'s parsed record is kept across steps."""
        return not key.startswith(UNCACHED)

    # -- jobs --------------------------------------------------------------
    def track(self, key: str, value: Record | None) -> None:
        """Note that ``key`` now holds ``value`` (None: deleted): mark the jobs it touches."""
        if not key.startswith(JOB_KINDS):
            return
        kind = kind_of(key)
        tail = key[len(kind) :]
        if kind == POD:
            self._track_pod(tail, value)
        elif kind == GROUP:
            old = self.group_job.pop(tail, None)
            if old is not None:
                _discard(self.job_groups, old, tail)
                self.dirty.add(old)
                self._check_named(old)
            if value is not None:
                job = f"{value.get('namespace')}/{value.get('job')}"
                self.group_job[tail] = job
                self.job_groups.setdefault(job, set()).add(tail)
                self.dirty.add(job)
                self._check_named(job)
            for pod in list(self.ref_pods.get(tail, ())):
                self._map_pod(pod, self.group_job.get(tail))
        elif kind == YIELD:
            old = self.yield_job.pop(tail, None)
            if old is not None:
                _discard(self.job_yields, old, tail)
                self.dirty.add(old)
            self.open_yields.discard(tail)
            ended = self.done_yields.pop(tail, None)
            if ended is not None:
                del self._done_order[bisect.bisect_left(self._done_order, (ended, tail))]
            if value is not None:
                done_at = value.get("done_at")
                if isinstance(done_at, int | float) and not isinstance(done_at, bool):
                    self.done_yields[tail] = float(done_at)
                    bisect.insort(self._done_order, (float(done_at), tail))
                else:
                    self.open_yields.add(tail)
                job = str(value.get("job"))
                self.yield_job[tail] = job
                self.job_yields.setdefault(job, set()).add(tail)
                self.dirty.add(job)
        elif kind == PROGRESS:
            self._track_progress(tail, value)
        else:  # a Volcano Job or a suspension: keyed by the job itself
            self.dirty.add(tail)

    def _track_progress(self, job: str, value: Record | None) -> None:
        """A job's view reads of its progress record only whether there is one and its
        ``first_seen_at`` (``cluster.job_view``); the rest moves with every forward (a
        third of a busy cluster's inputs), and only the job's notes read it. So a
        change that keeps both re-notes the job instead of recomputing its view."""
        seen: object = None
        if value is not None:
            seen = value.get("first_seen_at") if isinstance(value, dict) else None
            if not isinstance(seen, int | float) or isinstance(seen, bool):
                seen = _MALFORMED  # recomputed, and reported by its parse as before
        before = self.progress_seen.pop(job, None)
        if seen is not None:
            self.progress_seen[job] = seen
        if seen is _MALFORMED or before is _MALFORMED or before != seen:
            self.dirty.add(job)
        else:
            self.renote.add(job)

    def _track_pod(self, tail: str, value: Record | None) -> None:
        ref = self.pod_ref.pop(tail, None)
        if ref is not None:
            _discard(self.ref_pods, ref, tail)
        job: str | None = None
        if value is not None:  # read leniently: a malformed record fails in its view's parse
            namespace = value.get("namespace")
            if value.get("job"):
                job = f"{namespace}/{value['job']}"
            elif value.get("group"):
                ref = f"{namespace}/{value['group']}"
                self.pod_ref[tail] = ref
                self.ref_pods.setdefault(ref, set()).add(tail)
                job = self.group_job.get(ref)
        self._map_pod(tail, job)
        if job is not None:
            self.dirty.add(job)

    def _map_pod(self, tail: str, job: str | None) -> None:
        old = self.pod_job.get(tail)
        if old == job:
            return
        if old is not None:
            del self.pod_job[tail]
            _discard(self.job_pods, old, tail)
            self.dirty.add(old)
            self._check_named(old)
        if job is not None:
            self.pod_job[tail] = job
            self.job_pods.setdefault(job, set()).add(tail)
            self.dirty.add(job)
            self._check_named(job)

    def refresh(
        self,
        records: Overlay,
        *,
        known: Mapping[str, cluster.JobView | None] | None = None,
        before: dict[str, cluster.JobView | None] | None = None,
    ) -> None:
        """Recompute the views of the jobs marked, reading ``records``.

        ``known``: views already computed from these records (a job's view
        depends on its own records only), taken instead of computing them;
        ``before``: where to keep each marked job's view from before its first
        recomputation (a step's ``Scratch`` puts them back when it ends).
        """
        config = self.config
        # A fresh set each time: popping from a set that once held every job (``build``)
        # scans its emptied slots, a cost that grows with the cluster.
        dirty, self.dirty = self.dirty, set()
        renote, self.renote = self.renote, set()
        for name in renote - dirty:
            view = self._views.get(name)
            if view is None:
                continue  # nothing to note: no view reads the record
            self._forget(view)  # the view stays as it is: nothing for ``before`` to keep
            self._note(view, records)
            if name in self.alert_jobs:
                self.epochs[ALERT_VIEWS] += 1
        for name in dirty:
            if before is not None and name not in before:
                before[name] = self._views.get(name)
            if known is not None and name in known:
                view = known[name]
            else:
                view = self._compute(name, records, config)
            old = self._views.pop(name, None)
            was = (name in self.demands, name in self.stuck)
            if old is not None:
                self._forget(old)
            if view is not None:
                self._views[name] = view
                self._note(view, records)
            if (old is None) != (view is None):
                self._names = None
            if self.free is not None:
                self.free.changed(name, old, view)
            self.parts.touch(name)
            now = (name in self.demands, name in self.stuck)
            if (was[0] or now[0]) and old != view:
                self.epochs[DEMAND_VIEWS] += 1
            if name in self.alert_jobs or (was[1] != now[1] and self.deadlock_alerts):
                self.epochs[ALERT_VIEWS] += 1

    def _compute(
        self, name: str, records: Overlay, config: ControllerConfig
    ) -> cluster.JobView | None:
        groups = sorted(self.job_groups.get(name, ()))
        members = [
            (tail, records.typed(POD + tail, PodRecord))
            for tail in sorted(self.job_pods.get(name, ()))
        ]
        yields = [
            records.typed(YIELD + tail, YieldRecord)
            for tail in sorted(self.job_yields.get(name, ()))
        ]
        return cluster.job_view(
            name,
            records.typed(GROUP + groups[-1], GroupRecord) if groups else None,
            records.typed(VJOB + name, VJobRecord),
            [(tail, pod) for tail, pod in members if pod is not None],
            cluster.leaving_of(y for y in yields if y is not None),
            records.typed(SUSPENDED + name, SuspendedRecord),
            records.typed(PROGRESS + name, ProgressRecord),
            config,
        )

    def _note(self, view: cluster.JobView, records: Overlay) -> None:
        name = view.name
        if view.waiting and view.unschedulable:
            self.demands.add(name)
        if incidents.stuck(view):
            self.stuck.add(name)
        if deadlock.partial_gang(view):
            self.partial.add(name)
        if incidents.dangling(view):
            self.dangling.add(name)
        if incidents.pending(view) and incidents.sla_budget(view, self.config) is not None:
            self.pending_sla.add(name)
        due = _checkpoint_due(view, records, self.config.checkpoint_stale_factor)
        if due is not None:
            self.checkpoint_due[name] = due
        self.queues[view.queue] += 1

    def _forget(self, view: cluster.JobView) -> None:
        name = view.name
        for members in (self.demands, self.partial, self.stuck, self.dangling, self.pending_sla):
            members.discard(name)
        self.checkpoint_due.pop(name, None)
        self.queues[view.queue] -= 1
        if not self.queues[view.queue]:
            del self.queues[view.queue]

    # -- reading -----------------------------------------------------------
    def views(self) -> Mapping[str, cluster.JobView]:
        """Every job's view, in name order (as ``cluster.jobs`` gives them)."""
        self.settle()
        return _Views(self)

    def names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(self._views)
        return self._names

    def pods_of(self, job: str) -> list[str]:
        """The key tails of ``job``'s pods (``incidents.PodsOf``), in key order."""
        return sorted(self.job_pods.get(job, ()))

    def yields_to_visit(self, forget_before: float) -> set[str]:
        """The yields a step must look at: those not done, and the done ones that
        ended before ``forget_before`` (their retention is over), by key tail."""
        due = self._done_order[: bisect.bisect_left(self._done_order, (forget_before, ""))]
        return self.open_yields.union(tail for _, tail in due)

    def groups_of(self, job: str) -> list[str]:
        """The key tails of ``job``'s PodGroups (``incidents.GroupsOf``), in key order."""
        return sorted(self.job_groups.get(job, ()))

    def stale_candidates(self, now: float) -> list[str]:
        """Jobs whose checkpoint may be stale at ``now``, in name order."""
        return sorted(name for name, due in self.checkpoint_due.items() if due <= now)

    def state(self) -> dict[str, Any]:
        """Everything the index derives (caches left out): equal for equal records."""
        self.settle()
        return {
            "keys": {k: v for k, v in self.keys.items() if v},
            "cluster_gpus": self.cluster_gpus,
            "node_gpus": self.node_gpus,
            "group_job": self.group_job,
            "job_groups": self.job_groups,
            "pod_job": self.pod_job,
            "job_pods": self.job_pods,
            "pod_ref": self.pod_ref,
            "ref_pods": self.ref_pods,
            "yield_job": self.yield_job,
            "job_yields": self.job_yields,
            "open_yields": self.open_yields,
            "done_yields": self.done_yields,
            "views": self._views,
            "demands": self.demands,
            "partial": self.partial,
            "stuck": self.stuck,
            "dangling": self.dangling,
            "pending_sla": self.pending_sla,
            "checkpoint_due": self.checkpoint_due,
            "queues": dict(self.queues),
            "alert_job": self.alert_job,
            "alert_jobs": dict(self.alert_jobs),
            "deadlock_alerts": self.deadlock_alerts,
            "gpuless_queues": self.gpuless_queues,
            "invalid_alerts": self.invalid_alerts,
            "aborted_vjobs": self.aborted_vjobs,
            "retained": self.retained,
            "unnamed": self.unnamed,
            "progress_seen": self.progress_seen,
            "free": None if self.free is None else self.free.state(),
        }


class _Views(Mapping[str, cluster.JobView]):
    """The index's views as ``cluster.jobs``' mapping: by name, iterated in name order."""

    def __init__(self, index: RecordIndex) -> None:
        self._index = index

    def __getitem__(self, name: str) -> cluster.JobView:
        return self._index._views[name]

    def __contains__(self, name: object) -> bool:
        return name in self._index._views

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.names())

    def __len__(self) -> int:
        return len(self._index._views)

    def values(self) -> ValuesView[cluster.JobView]:
        return _ViewValues(self)

    def items(self) -> ItemsView[str, cluster.JobView]:
        return _ViewItems(self)


class _ViewValues(ValuesView[cluster.JobView]):
    """``_Views.values()``, iterated by one ``map`` over the index's dict.

    The mixin's iteration calls ``__getitem__`` (Python) once per job: at
    10,000 nodes, 30,000 calls for every snapshot the decider builds.
    """

    _mapping: _Views

    def __iter__(self) -> Iterator[cluster.JobView]:
        index = self._mapping._index
        return map(index._views.__getitem__, index.names())


class _ViewItems(ItemsView[str, cluster.JobView]):
    """``_Views.items()``, in name order, without a Python call per job."""

    _mapping: _Views

    def __iter__(self) -> Iterator[tuple[str, cluster.JobView]]:
        index = self._mapping._index
        names = index.names()
        return zip(names, map(index._views.__getitem__, names), strict=True)


@dataclass(frozen=True, slots=True)
class Pending:
    """A step's job records, laid over the index's views and not yet taken off."""

    applied: dict[str, Record | None]
    """Each job record the step wrote (``JOB_KINDS``), with the very value the views read."""
    read: dict[str, Record | None]
    """What the step's table held under each of those keys."""
    before: dict[str, cluster.JobView | None]
    """The views of the jobs those records touch, from before the step (None: no such job)."""
    base: Mapping[str, Record]
    """The table the step read."""
    complete: bool
    """Every job those records touch has its view of them (none was left to compute)."""

    def made_by(self, writes: Writes) -> bool:
        """Whether ``writes``' job records are exactly (the same objects) those the views read."""
        ours = self.applied
        seen = 0
        for key, value in writes.items():
            if key.startswith(JOB_KINDS):
                if key not in ours or ours[key] is not value:
                    return False
                seen += 1
        return seen == len(ours)


class Scratch:
    """One step's view of the index: the step's own writes laid over it, taken off after.

    ``views`` brings the index up to the step's writes so far (the jobs they
    touch are recomputed from the step's overlay); ``restore`` hands the index
    back with them still laid over it, as its ``pending``: ``apply`` given the
    same writes (the worker's next call, as a rule) keeps the views as they
    are, and anything else takes the records off first (``RecordIndex.settle``),
    putting back the views from before the step, so the caller's index still
    describes the caller's table, whatever the step wrote or raised. Each job's
    view is computed once per step, and not again when its writes are applied.
    """

    def __init__(self, index: RecordIndex, view: Overlay) -> None:
        index.settle(view.base)  # the last step's records, if its writes were not applied
        self.index = index
        self.view = view
        self._applied: dict[str, Record | None] = {}
        self._before: dict[str, cluster.JobView | None] = {}

    def views(self) -> Mapping[str, cluster.JobView]:
        index = self.index
        for key, value in self.view.writes.items():
            if not key.startswith(JOB_KINDS):
                continue
            if key in self._applied and self._applied[key] is value:
                continue
            self._applied[key] = value
            index.track(key, value)
        index.refresh(self.view, before=self._before)
        return index.views()

    def cluster_gpus(self) -> int:
        """The GPUs of every node, the step's node writes included."""
        total = self.index.cluster_gpus
        for key, value in self.view.writes.items():
            if key.startswith(NODE):
                total -= self.index.node_gpus.get(key, 0)
                total += int(value["gpus"]) if value is not None else 0
        return total

    def restore(self) -> None:
        index = self.index
        if not self._applied:
            return
        base = self.view.base
        index.pending = Pending(
            applied=dict(self._applied),
            read={key: base.get(key) for key in self._applied},
            before=dict(self._before),
            base=base,
            complete=not index.dirty,  # every job the writes touch has its view of them
        )
        self._applied.clear()
        self._before.clear()


_MALFORMED = object()
"""A progress record whose ``first_seen_at`` cannot be read: always recomputed."""


def _discard(groups: dict[str, set[str]], key: str, member: str) -> None:
    members = groups.get(key)
    if members is None:
        return
    members.discard(member)
    if not members:
        del groups[key]


def _checkpoint_due(view: cluster.JobView, records: Overlay, factor: float) -> float | None:
    """When ``view``'s checkpoint may turn stale (``incidents.stale_checkpoint``), or None when
    it cannot: WAKE_MARGIN_S early, so the exact test on the tick decides."""
    at_risk = incidents.work_at_risk_since(view, records)
    if at_risk is None:
        return None
    since, interval, _ = at_risk
    return since + factor * interval - WAKE_MARGIN_S
