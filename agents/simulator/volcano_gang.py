"""Volcano 1.15's opt-in ``gangpreempt`` / ``gangreclaim``: the best stock option.

Modelled on ``actions/gangpreempt``, ``actions/gangreclaim`` and
``actions/utils/bundle.go`` at ed72c7c8 (``../shared/design/volcano-preemption.md``
section 4.2):

- Preemptors are starving jobs, as in ``preempt``; the demand is the sum over
  all their pending pods (``simulate.go:373-424``).
- Candidates: same queue with strictly lower job priority (gangpreempt), or
  other reclaimable queues (gangreclaim, no priority check); the preemptor's
  queue must be ``Preemptive`` and overused queues are skipped.
- Per victim job, *bundles*: a SAFE bundle of the pods above its minimum and
  a WHOLE bundle of the rest, whose eviction takes the whole job
  (``bundle.go:53-192``). Order: SAFE before WHOLE, then victim-job order
  (lowest priority first), then job name (``bundle.go:248-292``).
- Bundles are accumulated until the demand fits in idle + releasing + the
  bundles' GPUs, counted over the whole domain (the cluster: no HyperNodes
  here), and then *all* selected bundles are evicted: the whole-bundle
  over-eviction of volcano#5984/#5994 (``gangpreempt.go:143-187``).
- Still no notion of progress, checkpoints or node topology, and victims are
  killed with their grace period like any Volcano eviction.
"""

from __future__ import annotations

import math

from gpuyield.agents.simulator.engine import Decision, Simulation
from gpuyield.agents.simulator.state import SimJob

Bundle = tuple[int, int, str, tuple[int, ...], int]
"""(0 SAFE or 1 WHOLE, victim job priority, victim job, pod indexes, GPUs), in Volcano's order."""


class VolcanoGang:
    name = "volcano-gang"
    graceful = False

    def __init__(self) -> None:
        self._running: list[SimJob] | None = None
        self._by_queue: dict[str, list[Bundle]] = {}
        self._reclaimable: dict[str, list[Bundle]] = {}

    def executed(self, sim: Simulation, decision: Decision) -> None:
        """Stock Volcano keeps no state between sessions."""

    def may_decide(self, sim: Simulation, job: SimJob) -> bool:
        """Stock Volcano tries every starving job in every session."""
        return True

    def held_until(self, sim: Simulation, job: SimJob) -> float:
        """Never held back."""
        return -math.inf

    def decide(self, sim: Simulation, job: SimJob) -> Decision | None:
        return self._round(sim, job, reclaim=False) or self._round(sim, job, reclaim=True)

    def _bundles(self, sim: Simulation, job: SimJob, *, reclaim: bool) -> list[Bundle]:
        """The bundles ``job`` may take, in Volcano's order, but for gangpreempt's priority test.

        Built once per list ``sim.running()`` hands out (once a cycle, and again
        after each eviction), by queue: a backlog asks for victims a dozen times
        a cycle, and testing every running job against each starving one
        (``volcano_victim_job``'s rules) was most of a day of an overloaded pool.
        Bundles are sorted on a key no two share, so building them per queue
        and merging changes neither which bundles come nor their order.
        """
        running = sim.running()
        if self._running is not running:
            self._running = running
            self._reclaimable = {}
            self._by_queue = {}
            for other in running:
                if other.spec.preemptable:
                    self._by_queue.setdefault(other.spec.queue, []).extend(_job_bundles(other))
            for bundles in self._by_queue.values():
                bundles.sort(key=_bundle_order)
        queue = job.spec.queue
        if not reclaim:
            return self._by_queue.get(queue, [])
        merged = self._reclaimable.get(queue)
        if merged is None:
            merged = [
                bundle
                for other, bundles in self._by_queue.items()
                if other != queue and sim.tree.queues[other].reclaimable
                for bundle in bundles
            ]
            merged.sort(key=_bundle_order)
            self._reclaimable[queue] = merged
        return merged

    def _round(self, sim: Simulation, job: SimJob, *, reclaim: bool) -> Decision | None:
        spec = job.spec
        demand = len(job.waiting()) * spec.gpus_per_pod
        if demand == 0:
            return None
        if reclaim and sim.queue_used[spec.queue] + demand > sim.tree.guarantee(spec.queue):
            return None
        idle = sum(sim.cluster.free)
        chosen: dict[str, set[int]] = {}
        supply = idle
        for _, priority, name, pods, gpus in self._bundles(sim, job, reclaim=reclaim):
            if supply >= demand:
                break
            if not reclaim and priority >= spec.priority:
                continue  # gangpreempt takes from lower job priorities only
            already = chosen.setdefault(name, set())
            new = set(pods) - already
            already.update(new)
            supply += gpus * len(new) // max(1, len(pods))
        if supply < demand or not chosen:
            return None
        return Decision(job.name, {k: tuple(sorted(v)) for k, v in chosen.items()})


def _bundle_order(bundle: Bundle) -> tuple[int, int, str]:
    return bundle[0], bundle[1], bundle[2]


def _job_bundles(other: SimJob) -> list[Bundle]:
    """A running job's SAFE bundle (pods above its minimum) and WHOLE bundle (the rest)."""
    placed = sorted(other.placed(), key=lambda p: p.index)
    slack = max(0, len(placed) - other.spec.min_available)
    gpus = other.spec.gpus_per_pod
    bundles: list[Bundle] = []
    if slack:
        safe = tuple(p.index for p in placed[-slack:])
        bundles.append((0, other.spec.priority, other.name, safe, len(safe) * gpus))
    if len(placed) > slack:
        # The WHOLE bundle breaks the gang: its GlobalRes is every task of the job.
        whole = tuple(p.index for p in placed)
        bundles.append((1, other.spec.priority, other.name, whole, len(whole) * gpus))
    return bundles
