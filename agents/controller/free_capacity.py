"""Free GPUs per node, kept up to date from the job views and node records.

The resume pass asks three things of a suspended job on every input while
the cluster stays full: could the free GPUs hold its waiting pods
(``planner.session.could_place_on_free_gpus``), how many GPUs are free
(``cluster.free_gpus``), and which free GPUs it holds against lighter
resumes (``cluster.hold_for``). Each used to need the planner's whole
snapshot: 54 ms of CPU at 1,000 nodes and 0.65 s at 10,000, per input, for
as long as a gang stays parked. All three read only the free GPUs of each
schedulable node, the job's own pods and its queue's usage, so this module
keeps those as the views change (``changed``, called by the index for every
view it recomputes) and answers in time independent of the
cluster's size: the nodes are bucketed by their free GPUs, and a question
reads the buckets, not the nodes.

The answers are the snapshot's, exactly (``tests/controller/test_free_capacity.py``
checks them against ``cluster.snapshot`` on generated clusters):

- a node's capacity is its GPUs less what is reserved on it for others
  (``cluster.reserved_gpus``, which ``cluster.snapshot`` uses too);
- it is schedulable when its record says so and its pods do not hold more
  than that capacity (the snapshot closes an overcommitted node);
- its free GPUs are that capacity less what placed pods hold, leaving ones
  included. The views hold no finished pods (``cluster.job_view`` leaves them
  out), so the pre-check's "used" (finished pods aside) and
  ``cluster.free_gpus``' (every placed pod) are the same number here;
- pods on a node the table has no record of are in no snapshot: they count
  neither on a node nor in their queue's usage.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuyield.agents.controller.cluster import JobView, reserved_gpus
from gpuyield.agents.controller.records import ReservationRecord
from gpuyield.schemas.snapshot import Pod

NodeFacts = tuple[int, bool]
"""A node record's GPUs and whether it is schedulable (``records.NodeRecord``)."""

_PENDING_LIMIT = 1024
"""Job view changes held before they are counted (``changed``): a step's overlay changes
views and puts them back, and most changes are never asked about; the limit bounds what
is held while no resume check asks (weeks without a suspended job)."""

_REBUILD_SHARE = 4
"""When more than a 1/_REBUILD_SHARE of the nodes changed since the last question (a
restart, a large step), the buckets are sorted afresh rather than updated node by node."""


@dataclass(frozen=True, slots=True)
class Room:
    """What a snapshot built to resume a job would have answered (module docstring)."""

    could_place: bool
    """``could_place_on_free_gpus``: False when no plan without victims can place it."""
    free: int
    """``cluster.free_gpus``: free GPUs over the schedulable nodes."""
    hold: Mapping[str, int]
    """``cluster.hold_for``: the free GPUs per node it holds against lighter resumes."""


class FreeCapacity:
    """The GPUs placed pods hold per node and per queue, and the nodes bucketed by free GPUs."""

    def __init__(self) -> None:
        self.taken: Counter[str] = Counter()
        """GPUs held by the placed pods of every view (leaving ones included), per node."""
        self.leaving: Counter[str] = Counter()
        """GPUs held by leaving pods, per node: what nominations there are waiting for."""
        self.queue_taken: Counter[str] = Counter()
        """GPUs held by placed pods, per queue."""
        self.node_queues: dict[str, Counter[str]] = {}
        """Per node, the GPUs each queue's pods hold there (a queue's usage leaves out
        the nodes without a record, as the snapshot does)."""
        self.nodes: dict[str, NodeFacts] = {}
        """Each node record's GPUs and schedulability, by node name."""
        self._unrecorded: set[str] = set()
        """The nodes placed pods name that have no record."""
        self._pending: dict[str, tuple[JobView | None, JobView | None]] = {}
        """Per job, its view when last counted and its view now (``changed``)."""
        # The buckets: a cache of the above for nodes schedulable when nothing is reserved.
        self._dirty: set[str] = set()
        self._base: dict[str, tuple[int, int]] = {}  # node -> (capacity, free)
        self._by_free: dict[int, list[str]] = {}  # free GPUs -> node names, sorted
        self._free_count: Counter[int] = Counter()
        self._cap_count: Counter[int] = Counter()
        self._cap_sum = 0

    # -- following the views and node records ---------------------------------
    def changed(self, name: str, old: JobView | None, new: JobView | None) -> None:
        """Job ``name``'s view went from ``old`` to ``new`` (None: no view).

        Counted only when asked (or past ``_PENDING_LIMIT``): a step lays its
        writes over the index and takes them off again, and counting each of
        those changes cost a sixth of a quiet input's time.
        """
        pending = self._pending.get(name)
        self._pending[name] = (old if pending is None else pending[0], new)
        if len(self._pending) > _PENDING_LIMIT:
            self._settle()
        self._bound()

    def _settle(self) -> None:
        pending, self._pending = self._pending, {}
        for old, new in pending.values():
            if old is new:
                continue
            if old is not None:
                self._count(old, -1)
            if new is not None:
                self._count(new, 1)

    def node(self, name: str, facts: NodeFacts | None) -> None:
        """Node ``name``'s record now says ``facts`` (None: it has none)."""
        if facts is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = facts
        self._dirty.add(name)
        self._note_record(name)
        self._bound()

    @property
    def held_back(self) -> int:
        """Nodes and job views changed since the buckets were last brought up to date."""
        return len(self._dirty) + len(self._pending)

    def _bound(self) -> None:
        """Bring the buckets up to date once the nodes to restate outnumber the nodes (names
        of nodes long gone would otherwise pile up while no resume check asks)."""
        if len(self._dirty) > len(self.nodes) + _PENDING_LIMIT:
            self._flush()

    def _note_record(self, name: str) -> None:
        if name in self.node_queues and name not in self.nodes:
            self._unrecorded.add(name)
        else:
            self._unrecorded.discard(name)

    def _count(self, view: JobView, sign: int) -> None:
        queue = view.queue
        for pods, leaving in ((view.pods, False), (view.leaving, True)):
            for pod in pods:
                node = pod.node
                if node is None:
                    continue
                gpus = sign * pod.gpus
                _bump(self.taken, node, gpus)
                if leaving:
                    _bump(self.leaving, node, gpus)
                _bump(self.queue_taken, queue, gpus)
                queues = self.node_queues.setdefault(node, Counter())
                _bump(queues, queue, gpus)
                if not queues:
                    del self.node_queues[node]
                self._dirty.add(node)
                self._note_record(node)

    def state(self) -> dict[str, object]:
        """What this derives from the views and records (the buckets left out)."""
        self._settle()
        return {
            "taken": dict(self.taken),
            "leaving": dict(self.leaving),
            "queue_taken": dict(self.queue_taken),
            "node_queues": {n: dict(q) for n, q in self.node_queues.items()},
            "nodes": dict(self.nodes),
            "unrecorded": set(self._unrecorded),
        }

    # -- the buckets ----------------------------------------------------------
    def _state_of(
        self, name: str, reserved: int, facts: NodeFacts | None
    ) -> tuple[int, int] | None:
        """(capacity, free) of a schedulable node with ``reserved`` GPUs set aside; None when
        it takes no pod (no record, cordoned, or its pods hold more than its capacity)."""
        if facts is None:
            return None
        gpus, schedulable = facts
        capacity = max(0, gpus - reserved)
        taken = self.taken.get(name, 0)
        if not schedulable or taken > capacity:
            return None
        return capacity, capacity - taken

    def _flush(self) -> None:
        self._settle()
        dirty, self._dirty = self._dirty, set()
        if len(dirty) * _REBUILD_SHARE > len(self.nodes):
            self._rebuild()
            return
        for name in dirty:
            old = self._base.pop(name, None)
            if old is not None:
                capacity, free = old
                names = self._by_free[free]
                del names[bisect.bisect_left(names, name)]
                self._free_count[free] -= 1
                self._cap_count[capacity] -= 1
                self._cap_sum -= capacity
            new = self._state_of(name, 0, self.nodes.get(name))
            if new is not None:
                capacity, free = new
                self._base[name] = new
                bisect.insort(self._by_free.setdefault(free, []), name)
                self._free_count[free] += 1
                self._cap_count[capacity] += 1
                self._cap_sum += capacity

    def _rebuild(self) -> None:
        self._base = {}
        for name, facts in self.nodes.items():
            state = self._state_of(name, 0, facts)
            if state is not None:
                self._base[name] = state
        by_free: dict[int, list[str]] = {}
        for name, (_, free) in self._base.items():
            by_free.setdefault(free, []).append(name)
        for names in by_free.values():
            names.sort()
        self._by_free = by_free
        self._free_count = Counter(free for _, free in self._base.values())
        self._cap_count = Counter(capacity for capacity, _ in self._base.values())
        self._cap_sum = sum(self._cap_count.elements())

    # -- the question ---------------------------------------------------------
    def room(
        self,
        view: JobView,
        *,
        reservations: Iterable[tuple[str, ReservationRecord]],
        now: float,
        held: Mapping[str, int],
        written: Mapping[str, NodeFacts | None],
        capability: int | None,
        need: int,
    ) -> Room:
        """What a snapshot for resuming ``view``'s job would answer.

        ``reservations``: every reservation record, by job (those in force for
        other preemptors are taken off their nodes, ``cluster.reserved_gpus``);
        ``held``: free GPUs set aside in this step for heavier suspended jobs;
        ``written``: node records the step wrote and the table does not hold yet;
        ``capability``: the GPU capability of the job's queue (None: none);
        ``need``: ``cluster.gang_gpus(view)``.
        """
        self._flush()
        free_count = Counter(self._free_count)
        cap_count = Counter(self._cap_count)
        cap_sum = self._cap_sum
        # Nodes whose state differs from their bucket's: reserved, or written by the step.
        moved: dict[str, int | None] = {}
        reserved = reserved_gpus(reservations, view.name, now, self.leaving, held)
        for name in {*reserved, *written}:
            old = self._base.get(name)
            if old is not None:
                free_count[old[1]] -= 1
                cap_count[old[0]] -= 1
                cap_sum -= old[0]
            facts = written[name] if name in written else self.nodes.get(name)
            new = self._state_of(name, reserved.get(name, 0), facts)
            moved[name] = None if new is None else new[1]
            if new is not None:
                free_count[new[1]] += 1
                cap_count[new[0]] += 1
                cap_sum += new[0]
        free = sum(f * count for f, count in free_count.items())
        if not view.pods:
            return Room(True, free, {})  # not in the snapshot: the planner names the problem
        could_place = _could_place([p.gpus for p in view.pods if p.node is None], free, free_count)
        if capability is not None and self._queue_used(view.queue, written) + need > capability:
            return Room(could_place, free, {})  # it waits for its queue, not for GPUs
        hold = self._hold(view.pods, free_count, cap_count, cap_sum, moved, need)
        return Room(could_place, free, hold)

    def _queue_used(self, queue: str, written: Mapping[str, NodeFacts | None]) -> int:
        """GPUs ``queue``'s placed pods hold on nodes with a record (after the step's writes)."""
        used = self.queue_taken.get(queue, 0)
        for name in {*self._unrecorded, *written}:
            recorded = written[name] is not None if name in written else name in self.nodes
            if not recorded and name in self.node_queues:
                used -= self.node_queues[name].get(queue, 0)
        return used

    def _hold(
        self,
        pods: Sequence[Pod],
        free_count: Counter[int],
        cap_count: Counter[int],
        cap_sum: int,
        moved: dict[str, int | None],
        need: int,
    ) -> dict[str, int]:
        """``cluster.hold_for`` but for its queue's test: each pod, largest first, on the
        node it fills most tightly (least left over, then the first name)."""
        largest = max((c for c, n in cap_count.items() if n > 0), default=0)
        if cap_sum < need or (pods and max(p.gpus for p in pods) > largest):
            return {}
        hold: dict[str, int] = {}
        for pod in sorted((p for p in pods if p.node is None), key=lambda p: -p.gpus):
            node = self._tightest(pod.gpus, free_count, moved)
            if node is None:
                continue
            left = self._free_of(node, moved)
            free_count[left] -= 1
            free_count[left - pod.gpus] += 1
            moved[node] = left - pod.gpus
            hold[node] = hold.get(node, 0) + pod.gpus
        return hold

    def _free_of(self, name: str, moved: Mapping[str, int | None]) -> int:
        if name in moved:
            free = moved[name]
            assert free is not None  # only schedulable nodes are chosen
            return free
        return self._base[name][1]

    def _tightest(
        self, gpus: int, free_count: Counter[int], moved: Mapping[str, int | None]
    ) -> str | None:
        """The node with the fewest free GPUs at or above ``gpus``; the first name on a tie."""
        for free in sorted(f for f, n in free_count.items() if n > 0 and f >= gpus):
            best = next((n for n in self._by_free.get(free, ()) if n not in moved), None)
            for name, left in moved.items():
                if left == free and (best is None or name < best):
                    best = name
            if best is not None:
                return best
        return None


def node_facts(record: Mapping[str, object] | None) -> NodeFacts | None:
    """A node record's (GPUs, schedulable), read as the index reads its GPUs."""
    if record is None:
        return None
    gpus = record.get("gpus", 0)
    return int(gpus) if isinstance(gpus, int | float | str) else 0, bool(record.get("schedulable"))


def _could_place(waiting: Sequence[int], free: int, free_count: Counter[int]) -> bool:
    """``could_place_on_free_gpus`` over the buckets: the sum (``free``), then the slots of
    each size."""
    if not waiting:
        return True
    if free < sum(waiting):
        return False
    for size in sorted({g for g in waiting if g > 0}, reverse=True):
        pods = sum(1 for g in waiting if g >= size)
        if sum((f // size) * n for f, n in free_count.items()) < pods:
            return False
    return True


def _bump(counter: Counter[str], key: str, by: int) -> None:
    value = counter.get(key, 0) + by
    if value:
        counter[key] = value
    else:
        del counter[key]
