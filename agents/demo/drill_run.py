"""``gpuyield demo --drill``: the demo's machinery playing the pre-peak drill (``drill``).

The same run as the demo (``run.Demo``): the embedded broker and Redis, the
worker as a process of its own, one node agent per node, the simulated
Volcano publishing watch events, real trainer processes that checkpoint on
SIGTERM. Only the story differs:

1. everything but the burst is submitted; the drill waits until every
   offline job runs past its cooldown with a checkpoint, in its own view and
   in the decider's (as the demo does), and the worker and the node agents
   are ready;
2. the burst is submitted; the drill waits until all its pods are placed
   and have sent a heartbeat;
3. the peak: the burst's pods serve until they finish;
4. the peak is over: the drill waits until every evicted job runs again,
   with a heartbeat since its resume.

Each wait ends on state, under the demo's watchdog (no fixed sleep, no
timeout that decides the outcome); the budgets are judged afterwards from
the messages' own timestamps (``drill_timeline``), so a missed budget is
reported as missed, with the whole timeline, rather than cut short.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gpuyield.agents.demo.cluster import SimCluster
from gpuyield.agents.demo.drill import OFFLINE, READY_BUDGET_S, RECLAIM_BUDGET_S
from gpuyield.agents.demo.drill_timeline import DrillReport, DrillTimeline, judge
from gpuyield.agents.demo.run import (
    Demo,
    DemoOptions,
    decider_knows_settled,
    finished,
    placed,
    settled,
)
from gpuyield.agents.demo.timing import demo_policy
from gpuyield.schemas.messages import KubeEvent


class Drill(Demo):
    """One run of the drill; ``report`` judges it (also after a failed run: what was seen)."""

    def __init__(self, options: DemoOptions) -> None:
        super().__init__(options)
        burst = [j for j in options.scenario.jobs if j.burst]
        if len(burst) != 1:
            raise ValueError(f"a drill has one burst job, this scenario has {len(burst)}")
        self.burst = burst[0]
        self.timeline = DrillTimeline(self.burst.key)

    def report(self) -> DrillReport:
        return judge(
            self.timeline,
            burst_pods=self.burst.pods,
            reclaim_budget_s=RECLAIM_BUDGET_S,
            ready_budget_s=READY_BUDGET_S,
            resumptions=self.tally.resumptions(),
        )

    def _watched(self, events: Sequence[KubeEvent]) -> None:
        for event in events:
            self.timeline.watch(event)

    def _message(self, message: Any, sent_at: float) -> None:
        self.timeline.message(message, sent_at)

    async def _story(self, cluster: SimCluster) -> None:
        scenario = self.options.scenario
        before = [j for j in scenario.jobs if not j.burst]
        offline = [j for j in before if j.queue == OFFLINE]
        self.phase = "the cluster fills: online serving, other tenants, offline research"
        now = time.time()
        for plan in before:
            cluster.submit(plan, now)
        settled_s = demo_policy(scenario.grace_s).cooldown_s + 1.0

        def ready_to_drill() -> bool:
            return (
                all(placed(cluster.job(p.key)) for p in before)
                and all(
                    settled(cluster.job(p.key), self.tally.steps.get(p.key), time.time(), settled_s)
                    and decider_knows_settled(self._decider_jobs.get(p.key))
                    for p in offline
                )
                and self._worker_ready()
                and self._agents_ready()
            )

        await self._until(
            ready_to_drill,
            "the offline jobs to run with a checkpoint, the worker and the node agents to start",
            progress=lambda: (
                self._story_state(cluster),
                self._worker_ready(),
                self._agents_ready(),
                self._steps(p.key for p in offline),
                tuple(decider_knows_settled(self._decider_jobs.get(p.key)) for p in offline),
            ),
            missing=lambda: (
                "; ".join(
                    f"{p.key} ({self._job_state(cluster, p.key)})"
                    for p in offline
                    if not decider_knows_settled(self._decider_jobs.get(p.key))
                )
                or ("the worker" if not self._worker_ready() else "the node agents")
            ),
        )

        self.phase = "the online burst arrives"
        self.tally.line(f"online burst: {self.burst.key}, {self.burst.gpus} GPUs", time.time())
        cluster.submit(self.burst, time.time())
        pods = self.burst.pods
        await self._until(
            lambda: placed(cluster.job(self.burst.key)) and len(self.timeline.ready) >= pods,
            "the burst's pods to be placed and ready",
            progress=lambda: (self._story_state(cluster), len(self.timeline.ready)),
            missing=lambda: (
                f"{self._job_state(cluster, self.burst.key)}, "
                f"{len(self.timeline.ready)}/{pods} ready"
            ),
        )

        self.phase = "the peak: the burst serves, the evicted jobs wait, suspended"
        await self._until(
            lambda: finished(cluster.job(self.burst.key)),
            "the burst to finish",
            progress=lambda: (self._story_state(cluster), self._steps([self.burst.key])),
            missing=lambda: self._job_state(cluster, self.burst.key),
        )

        self.phase = "the peak is over: the evicted jobs resume"
        await self._until_resumed(cluster, "the evicted jobs to resume")
        self.phase = "done"
