"""Stock Volcano preemption, as most clusters run it: ``preempt`` and ``reclaim`` task by task.

Modelled on volcano-sh/volcano at ed72c7c8 (see ``../shared/design/volcano-preemption.md``;
citations are ``path:line`` there). The Helm-default scheduler configuration
with ``preempt`` and ``reclaim`` added: tier 1 ``priority, gang, conformance``
with gang's ``enablePreemptable: false``, tier 2 ``drf, predicates,
proportion, nodeorder, binpack``.

What is modelled, and where it comes from:

- Only starving jobs preempt: ``Ready + Pipelined < MinAvailable``
  (``gang.go:221-226``); a job at its gang minimum does not preempt for more.
- ``preempt`` takes victims from the same queue whose job priority is lower
  (``priority.go``); gang's preemptable fn is off in Helm's default, so a
  victim's gang minimum is not protected (``session_plugins.go:274-321``).
- ``reclaim`` only for a queue within its deserved share after the request
  (``proportion.go:385-388``), from other reclaimable queues
  (``queue_info.go:80-95``). Tier 1 ``gang`` offers only pods above a job's
  minimum; when it offers any, tier 2's over-deserved check is skipped, and
  when it offers none, ``proportion`` alone decides and ignores gang
  minimums (section 3.4).
- Victims are chosen per preemptor task: nodes in an order we cannot know
  (``PredicateNodes`` rotates; map order), so a seeded shuffle; on a node,
  victims in Volcano's victim order (lower job priority first, then the
  highest task index; ``session_plugins.go:1163-1215``), evicting the
  shortest prefix that makes the task fit (``preempt.go:331-424``).
- The job statement commits only if the preemptor's gang would be
  pipelined; otherwise nothing is evicted (``preempt.go:169-231``).
- Eviction is a pod DELETE with the pod's grace period, 30 s by default
  (``cache.go:270-313``); freed GPUs are not reserved for the preemptor
  (``allocate.go:795-985``); the victim job then restarts
  (``PodEvicted -> RestartJob``) or, with no policy, is left with a partial
  gang (``job_controller_actions.go:472-497``) -- both handled by the engine.
"""

from __future__ import annotations

import math
import random  # noqa: TID251 -- a seeded Random is passed in: Volcano's node order is map order

from gpuyield.agents.simulator.engine import Decision, Simulation, volcano_victim_job
from gpuyield.agents.simulator.state import SimJob, SimPod


class VolcanoNative:
    name = "volcano-native"
    graceful = False

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._grouped: tuple[list[SimJob], dict[str, list[SimJob]]] | None = None

    def executed(self, sim: Simulation, decision: Decision) -> None:
        """Stock Volcano keeps no state between sessions."""

    def may_decide(self, sim: Simulation, job: SimJob) -> bool:
        """Stock Volcano tries every starving job in every session."""
        return True

    def held_until(self, sim: Simulation, job: SimJob) -> float:
        """Never held back."""
        return -math.inf

    def decide(self, sim: Simulation, job: SimJob) -> Decision | None:
        by_queue = self._by_queue(sim)
        spec = job.spec
        same = [
            o
            for o in by_queue.get(spec.queue, ())
            if o is not job and o.spec.priority < spec.priority
        ]
        preempt = self._round(sim, job, same, reclaim=False)
        if preempt is not None:
            return preempt
        others = [
            o
            for queue, jobs in by_queue.items()
            if queue != spec.queue and sim.tree.queues[queue].reclaimable
            for o in jobs
        ]
        return self._round(sim, job, others, reclaim=True)

    def _by_queue(self, sim: Simulation) -> dict[str, list[SimJob]]:
        """The running jobs by queue, once per list ``sim.running()`` hands out.

        Only same-queue jobs of lower priority (preempt) or jobs of other
        reclaimable queues (reclaim) can be victims (``volcano_victim_job``
        checks the rest); a backlog of thousands asks for victims a dozen
        times a cycle, and filtering every running job each time was the cost.
        The victims and their order are the same: each node's candidates are
        sorted by Volcano's victim order before any is taken.
        """
        running = sim.running()
        if self._grouped is None or self._grouped[0] is not running:
            grouped: dict[str, list[SimJob]] = {}
            for other in running:
                grouped.setdefault(other.spec.queue, []).append(other)
            self._grouped = (running, grouped)
        return self._grouped[1]

    def _round(
        self, sim: Simulation, job: SimJob, running: list[SimJob], *, reclaim: bool
    ) -> Decision | None:
        spec = job.spec
        gpus = spec.gpus_per_pod
        need = max(0, spec.min_available - len(job.placed()))
        if need == 0:
            return None
        if reclaim:
            deserved = sim.tree.guarantee(spec.queue)
            if sim.queue_used[spec.queue] + need * gpus > deserved:
                return None  # proportion's Preemptive: the queue would exceed its deserved share
        nodes = list(range(len(sim.cluster.free)))
        self.rng.shuffle(nodes)
        # Only the pods of jobs this action may take from are ever victims (``_victims``
        # filters by the same test): with none, nothing is evicted and nothing commits.
        by_node: dict[int, list[tuple[SimJob, SimPod]]] = {}
        for other in running:
            if volcano_victim_job(sim, job, other, reclaim=reclaim):
                for pod in other.placed():
                    assert pod.node is not None
                    by_node.setdefault(pod.node, []).append((other, pod))
        if not by_node:
            return None
        evicted: dict[str, set[int]] = {}
        freed: dict[int, int] = {}
        placed = 0
        for _ in range(need):
            for node in nodes:
                room = sim.cluster.free[node] + freed.get(node, 0)
                if room >= gpus:
                    freed[node] = freed.get(node, 0) - gpus
                    placed += 1
                    break
                victims = self._victims(sim, job, by_node.get(node, []), evicted, reclaim=reclaim)
                taken: list[tuple[SimJob, SimPod]] = []
                for victim, pod in victims:
                    if room >= gpus:
                        break
                    taken.append((victim, pod))
                    room += victim.spec.gpus_per_pod
                if room >= gpus:
                    for victim, pod in taken:
                        evicted.setdefault(victim.name, set()).add(pod.index)
                        freed[node] = freed.get(node, 0) + victim.spec.gpus_per_pod
                    freed[node] = freed.get(node, 0) - gpus
                    placed += 1
                    break
        if placed < need or not evicted:
            return None  # not pipelined: the statement is discarded
        return Decision(job.name, {k: tuple(sorted(v)) for k, v in evicted.items()})

    def _victims(
        self,
        sim: Simulation,
        job: SimJob,
        pods: list[tuple[SimJob, SimPod]],
        evicted: dict[str, set[int]],
        *,
        reclaim: bool,
    ) -> list[tuple[SimJob, SimPod]]:
        on_node: list[tuple[SimJob, SimPod]] = []
        for other, pod in pods:
            if not volcano_victim_job(sim, job, other, reclaim=reclaim):
                continue
            if pod.index not in evicted.get(other.name, set()):
                on_node.append((other, pod))
        if reclaim:
            on_node = _reclaim_tiers(sim, on_node, evicted)
        # Victim order: lower job priority first, then the highest task index.
        on_node.sort(key=lambda vp: (vp[0].spec.priority, -vp[1].index, vp[0].name))
        return on_node


def _reclaim_tiers(
    sim: Simulation, pods: list[tuple[SimJob, SimPod]], evicted: dict[str, set[int]]
) -> list[tuple[SimJob, SimPod]]:
    """Tier 1 (gang: slack pods only) if it offers any, else tier 2 (proportion)."""
    slack: list[tuple[SimJob, SimPod]] = []
    left: dict[str, int] = {}
    for job, pod in pods:
        ready = len(job.placed()) - len(evicted.get(job.name, set()))
        budget = left.setdefault(job.name, ready - job.spec.min_available)
        if budget > 0:
            slack.append((job, pod))
            left[job.name] = budget - 1
    if slack:
        return slack
    return [
        (job, pod)
        for job, pod in pods
        if sim.queue_used[job.spec.queue] > sim.tree.guarantee(job.spec.queue)
    ]
