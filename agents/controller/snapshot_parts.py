"""The last snapshot's parts, reused by the next one where nothing they read changed.

A snapshot holds a ``Node`` per node and a ``Job`` per job holding GPUs: at
10,000 nodes, 40,000 pydantic models validated for each plan, most of a
planning step outside the planner, although between two plans only the jobs
and nodes that an input touched differ. ``cluster.snapshot`` asks this cache
for each model with everything the model is built from; an entry is reused
only when all of it is the same (the same objects: the index keeps a job's
view, and the table the record a step wrote, while they do not change; or
equal values), so a snapshot is equal, field for field, to one built afresh.

Reusing the models still walked every job each time, in Python: its pods
for the totals the snapshot needs first (``PodTotals``), its records and
its models' keys for its part (``Entry``), and its pods again in the
reference check. The index that owns these parts now says which jobs'
views and records changed (``feed``); a snapshot makes those jobs' parts
again and follows the totals and the reference check's sums
(``references``) for them, and the other jobs' parts are the last
snapshot's. Without a feed (no index: a test, a one-off call) every job is
looked at, as before.

Only what the last snapshot used is kept: a job or node that left the
cluster is dropped at the next snapshot. The decider keeps one next to its
``RecordIndex``; the cache changes no result, so the step stays pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuyield.schemas import Job, Node, Pod
from gpuyield.schemas.counts import count, count_rows, count_twice, rows
from gpuyield.schemas.snapshot import JobReferences, ReferenceTotals

Key = tuple[Any, ...]

LEAVING = "~leaving"
"""The suffix of the job a job's leaving pods make in a snapshot (``<job>~leaving``)."""


class View(Protocol):
    """What the totals read of a job's view (``cluster.JobView``)."""

    @property
    def name(self) -> str: ...
    @property
    def pods(self) -> tuple[Pod, ...]: ...
    @property
    def leaving(self) -> tuple[Pod, ...]: ...
    @property
    def queue(self) -> str: ...


@dataclass(frozen=True, slots=True)
class PodTally:
    """One view's share of ``PodTotals``; a function of the view alone."""

    on: tuple[tuple[str, int, int], ...]  # (node, pods, GPUs), leaving pods included
    leaving: tuple[tuple[str, int, int], ...]  # (node, pods, GPUs) of its leaving pods
    placed: bool  # a pod not leaving is on a node
    names: tuple[str, ...]  # every pod's name, leaving ones included
    queue: str

    @classmethod
    def of(cls, view: View) -> PodTally:
        on = [
            (p.node, p.gpus)
            for pods in (view.pods, view.leaving)
            for p in pods
            if p.node is not None
        ]
        leaving = [(p.node, p.gpus) for p in view.leaving if p.node is not None]
        placed = any(p.node is not None for p in view.pods)
        names = tuple(p.name for p in view.pods) + tuple(p.name for p in view.leaving)
        return cls(rows(on), rows(leaving), placed, names, view.queue)


class PodTotals:
    """What a snapshot needs of every pod, kept up to date from the views that changed.

    ``held``: the GPUs each node's pods hold (leaving ones included), with a
    key for every node a pod is on; ``leaving``: those of its leaving pods;
    ``placed``: the jobs with a pod on a node (leaving ones aside);
    ``shared``: the pod names two pods use; ``queues``: the jobs per queue.
    Equal to the totals of the last views given, computed afresh
    (``test_snapshot_parts``).
    """

    def __init__(self) -> None:
        self._of: dict[str, tuple[View, PodTally]] = {}
        self._on: dict[str, int] = {}  # pods per node
        self._leaving_on: dict[str, int] = {}  # leaving pods per node
        self._count: dict[str, int] = {}  # pods per name
        self.held: dict[str, int] = {}
        self.leaving: dict[str, int] = {}
        self.placed: set[str] = set()
        self.shared: set[str] = set()
        self.queues: dict[str, int] = {}

    def update(self, views: Mapping[str, View], names: Iterable[str] | None = None) -> None:
        """Follow ``views`` (every job's, by name) from the last ones given.

        ``names``: the only jobs whose view may be another object than last
        time (``SnapshotParts.feed``); None: any may be.
        """
        last = self._of
        if names is not None and last:
            for name in names:
                view = views.get(name)
                hit = last.get(name)
                if hit is not None and hit[0] is view:
                    continue
                if hit is not None:
                    self._add(name, hit[1], -1)
                    del last[name]
                if view is not None:
                    last[name] = (view, PodTally.of(view))
                    self._add(name, last[name][1], 1)
            if len(last) == len(views):
                return
            names = None  # a job no one said changed came or went: look at every one
        current: dict[str, tuple[View, PodTally]] = {}
        for view in views.values():
            name = view.name
            hit = last.get(name)
            if hit is None or hit[0] is not view:
                if hit is not None:
                    self._add(name, hit[1], -1)
                hit = (view, PodTally.of(view))
                self._add(name, hit[1], 1)
            current[name] = hit
        for name in last.keys() - current.keys():
            self._add(name, last[name][1], -1)
        self._of = current

    def jobs_naming(self, pods: frozenset[str]) -> list[str]:
        """The jobs with a pod of one of these names (a walk over every job's names)."""
        return [job for job, (_, tally) in self._of.items() if not pods.isdisjoint(tally.names)]

    def _add(self, name: str, tally: PodTally, sign: int) -> None:
        count_rows(self._on, self.held, tally.on, sign)
        count_rows(self._leaving_on, self.leaving, tally.leaving, sign)
        if tally.placed:
            if sign > 0:
                self.placed.add(name)
            else:
                self.placed.discard(name)
        count(self.queues, tally.queue, sign)
        for pod in tally.names:
            count_twice(self._count, self.shared, pod, sign)


@dataclass(frozen=True, slots=True)
class Entry:
    """One job's part of the last snapshot: its job and its leaving pods, as models.

    Made again when the job's view or records change (``SnapshotParts.feed``),
    when the snapshot-wide context changes, for the preemptor of this
    snapshot and of the last, and once ``until`` is past (the first of its
    evictions that was still to come, which the snapshot leaves out until
    then).
    """

    jobs: tuple[Job, ...]
    until: float = math.inf
    refs: tuple[JobReferences, ...] = ()
    """What the reference check reads of each of ``jobs`` (kept only where summed)."""


class SnapshotParts:
    """The last snapshot's models with what each was built from, its parts, and their sums."""

    def __init__(self, *, fed: bool = False) -> None:
        """``fed``: the owner (the decider's index) says what changes, through ``touch``."""
        self._nodes: dict[str, tuple[Key, Node]] = {}
        self._jobs: dict[str, tuple[Key, Job]] = {}
        self._last_nodes: dict[str, tuple[Key, Node]] = {}
        self._last_jobs: dict[str, tuple[Key, Job]] = {}
        self.totals = PodTotals()
        """The pods' totals of the last views (``cluster.snapshot`` updates them)."""
        self.entries: dict[str, Entry] = {}
        """Each job's part of the last snapshot (``cluster.snapshot`` keeps them)."""
        self.context: object = None
        """What every entry depends on besides its job's own inputs (``cluster._JobParts``)."""
        self.shared: frozenset[str] = frozenset()
        """The pod names two pods shared at the last snapshot (their pods were renamed)."""
        self.timed: set[str] = set()
        """The jobs whose entry waits for an eviction still to come (``Entry.until``)."""
        self.references = ReferenceTotals()
        """The reference check's sums over the entries' jobs (``Entry.refs``)."""
        self.preemptor: str | None = None
        """The last snapshot's preemptor: its entry is made again for the next one."""
        self.feed: set[str] | None = set() if fed else None
        """The jobs whose view or progress or evictions record may have changed since the
        last snapshot, kept by the index that owns these parts (``RecordIndex.refresh``
        and its keys); None where no one keeps it: every job is looked at."""

    @property
    def fed(self) -> bool:
        """Whether an index keeps the feed: then the entries' references are summed too."""
        return self.feed is not None

    def put(self, name: str, entry: Entry) -> None:
        """``name``'s part of this snapshot."""
        self._take_off(name)
        self.entries[name] = entry
        for refs in entry.refs:
            self.references.add(refs)
        if entry.until < math.inf:
            self.timed.add(name)

    def drop(self, name: str) -> None:
        """``name`` left the cluster: its part goes, and its kept models with it."""
        self._take_off(name)
        if self.fed:
            self._jobs.pop(name, None)
            self._jobs.pop(name + LEAVING, None)

    def _take_off(self, name: str) -> None:
        old = self.entries.pop(name, None)
        if old is not None:
            for refs in old.refs:
                self.references.add(refs, -1)
            self.timed.discard(name)

    def clear(self) -> None:
        """Every part is made again, reusing the models the last parts held (only)."""
        self.entries.clear()
        self.timed.clear()
        self.references = ReferenceTotals()
        if self.fed:
            self._last_jobs, self._jobs = self._jobs, {}

    def touch(self, job: str) -> None:
        """``job``'s view or records changed (the index's hook)."""
        if self.feed is not None:
            self.feed.add(job)

    def start(self) -> None:
        """A snapshot begins: what the previous one used can be reused, the rest is let go.

        With a feed, a snapshot makes only some jobs' models, so the job models
        are kept across snapshots instead, and let go when their job leaves
        (``drop``) or every part is made again (``clear``): a part made again
        long after its model was built (the context changed, say) still finds it.
        """
        if self._nodes:
            self._last_nodes, self._nodes = self._nodes, {}
        if self.fed:
            self._last_jobs = {}
        elif self._jobs:
            self._last_jobs, self._jobs = self._jobs, {}

    def node(self, name: str, key: Key, build: Callable[..., Node], *args: Any) -> Node:
        """Node ``name`` built from ``key`` (compared with ``==``, which tries ``is`` first).

        ``build(*args)`` makes it when it is not kept: the arguments are passed
        as they are, since a closure made for every node and job of every
        snapshot, mostly unused, cost more than the lookup.
        """
        hit = self._nodes.get(name) or self._last_nodes.get(name)
        if hit is None or hit[0] != key:
            hit = (key, build(*args))
        self._nodes[name] = hit
        return hit[1]

    def job(self, name: str, key: Key, build: Callable[..., Job], *args: Any) -> Job:
        """Job ``name`` (a job, or its ``~leaving`` part) built from ``key`` by ``build(*args)``."""
        hit = self._jobs.get(name) or self._last_jobs.get(name)
        if hit is None or hit[0] != key:
            hit = (key, build(*args))
        self._jobs[name] = hit
        return hit[1]
