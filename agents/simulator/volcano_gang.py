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

from gpuyield.agents.simulator.engine import Decision, Simulation, volcano_victim_job
from gpuyield.agents.simulator.state import SimJob


class VolcanoGang:
    name = "volcano-gang"
    graceful = False

    def executed(self, sim: Simulation, decision: Decision) -> None:
        """Stock Volcano keeps no state between sessions."""

    def may_decide(self, sim: Simulation, job: SimJob) -> bool:
        """Stock Volcano tries every starving job in every session."""
        return True

    def decide(self, sim: Simulation, job: SimJob) -> Decision | None:
        return self._round(sim, job, reclaim=False) or self._round(sim, job, reclaim=True)

    def _round(self, sim: Simulation, job: SimJob, *, reclaim: bool) -> Decision | None:
        spec = job.spec
        demand = len(job.waiting()) * spec.gpus_per_pod
        if demand == 0:
            return None
        if reclaim and sim.queue_used[spec.queue] + demand > sim.tree.guarantee(spec.queue):
            return None
        idle = sum(sim.cluster.free)
        bundles: list[tuple[int, int, str, tuple[int, ...], int]] = []
        for other in sim.running():
            if not volcano_victim_job(sim, job, other, reclaim=reclaim):
                continue
            placed = sorted(other.placed(), key=lambda p: p.index)
            slack = max(0, len(placed) - other.spec.min_available)
            gpus = other.spec.gpus_per_pod
            if slack:
                safe = tuple(p.index for p in placed[-slack:])
                bundles.append((0, other.spec.priority, other.name, safe, len(safe) * gpus))
            if len(placed) > slack:
                # The WHOLE bundle breaks the gang: its GlobalRes is every task of the job.
                whole = tuple(p.index for p in placed)
                bundles.append((1, other.spec.priority, other.name, whole, len(whole) * gpus))
        bundles.sort(key=lambda b: (b[0], b[1], b[2]))
        chosen: dict[str, set[int]] = {}
        supply = idle
        for _, _, name, pods, gpus in bundles:
            if supply >= demand:
                break
            already = chosen.setdefault(name, set())
            new = set(pods) - already
            already.update(new)
            supply += gpus * len(new) // max(1, len(pods))
        if supply < demand or not chosen:
            return None
        return Decision(job.name, {k: tuple(sorted(v)) for k, v in chosen.items()})
