"""The drill's timeline and budgets, judged from a run's messages (no process, no broker).

The watch events are the simulated Volcano's own (``SimCluster`` on the drill's
cluster, with a fake launcher); the decision, commands, acks and heartbeats
are the messages the worker, the node agents and the burst's pods send, with
the times a run gives them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from builders import a_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx  # noqa: PT013 -- read as the numbers it compares

from demo.test_cluster import Events, FakeLauncher
from gpuyield.agents.demo.cluster import SimCluster
from gpuyield.agents.demo.drill import BURST_PODS, READY_BUDGET_S, RECLAIM_BUDGET_S, drill_scenario
from gpuyield.agents.demo.drill_timeline import DrillReport, DrillTimeline, judge
from gpuyield.agents.demo.tally import Resumption
from gpuyield.schemas.messages import (
    CommandAction,
    Decision,
    Heartbeat,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)
from gpuyield.schemas.plan import Action, Plan, Victim

T = 1_800_000_000.0
BURST_AT = T + 30.0  # the offline jobs have run 30 s, past the demo's cooldown
VICTIMS = tuple(f"offline/train-{i:02d}" for i in range(0, 16, 2))
CHECKPOINT = 140


@dataclass
class Run:
    """A drill's messages, as a run sends them; each test changes what it is about."""

    decision_at: float = BURST_AT + 0.6
    acks_at: dict[str, float] = field(
        default_factory=lambda: {job: BURST_AT + 1.5 + 0.2 * i for i, job in enumerate(VICTIMS)}
    )
    suspended_at: float = BURST_AT + 3.5
    ready_at: dict[int, float] = field(
        default_factory=lambda: {i: BURST_AT + 5.5 + 0.1 * i for i in range(BURST_PODS)}
    )
    resumed_at_step: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(VICTIMS, CHECKPOINT)
    )


def command_id(job: str) -> str:
    return f"cmd-{job.split('/')[1]}"


def decision(at: float) -> Decision:
    victims = tuple(
        Victim(
            job=job,
            pods=(f"{job.split('/')[1]}-worker-0",),
            whole_job=True,
            gpus=8,
            lost_gpu_seconds=16.0,
            grace_s=8.0,
            reason="reclaimable from 'offline'",
            queue="offline",
        )
        for job in VICTIMS
    )
    plan = Plan(
        preemptor="online/burst",
        action=Action.RECLAIM,
        feasible=True,
        victims=victims,
        placement={f"burst-worker-{i}": f"gpu-{8 + 2 * i:03d}" for i in range(BURST_PODS)},
    )
    return Decision(
        decision_id="d-burst",
        demand="online/burst",
        decided_at=BURST_AT,  # the decider's event-time clock: the watch event's time
        snapshot=a_snapshot(now=BURST_AT),
        plan=plan,
        commands=tuple(command_id(j) for j in VICTIMS),
    )


def messages(run: Run) -> list[tuple[object, float]]:
    """The topics' messages with their records' times."""
    out: list[tuple[object, float]] = [(decision(run.decision_at), run.decision_at)]
    for job in VICTIMS:
        command = YieldCommand(
            command_id=command_id(job),
            decision_id="d-burst",
            action=CommandAction.YIELD,
            node="gpu-000",
            job=job,
            pods=(f"{job.split('/')[1]}-worker-0",),
            grace_s=8.0,
            issued_at=BURST_AT,
            deadline=BURST_AT + 8.0,
        )
        out.append((command, run.decision_at + 0.01))
        if job in run.acks_at:
            ack = YieldAck(
                command_id=command_id(job),
                decision_id="d-burst",
                node="gpu-000",
                job=job,
                outcome=YieldOutcome.CHECKPOINTED,
                checkpoint_step=CHECKPOINT,
                seconds_taken=1.0,
                acked_at=run.acks_at[job],
            )
            out.append((ack, run.acks_at[job] + 0.005))
    for pod, at in run.ready_at.items():
        beat = Heartbeat(
            job="online/burst", pod=f"burst-worker-{pod}", step=0, progress=0.0, sent_at=at
        )
        out.append((beat, at + 0.01))
    return out


async def watch_events(run: Run) -> Events:
    """The simulated Volcano's watch events: the cluster fills, the burst waits, the victims'
    pods end and their jobs are Aborted, the burst is placed."""
    scenario = drill_scenario(24)
    launcher, events = FakeLauncher(), Events()
    cluster = SimCluster(scenario, launcher, events)
    for plan in scenario.jobs:
        if not plan.burst:
            cluster.submit(plan, T)
    await cluster.tick(T, {})
    cluster.submit(next(p for p in scenario.jobs if p.burst), BURST_AT)
    await cluster.tick(BURST_AT, {})
    ended_at = max(run.acks_at.values(), default=BURST_AT + 2.0)
    for job in VICTIMS:
        launcher.exit(job, 0)
    await cluster.tick(ended_at, {})
    suspended = {job: {"state": "suspended", "command_id": command_id(job)} for job in VICTIMS}
    await cluster.tick(run.suspended_at, suspended)
    await cluster.tick(run.suspended_at + 0.2, suspended)
    return events


def timeline_of(run: Run, *, order: list[int] | None = None) -> DrillTimeline:
    timeline = DrillTimeline("online/burst")
    for event in asyncio.run(watch_events(run)).seen:
        timeline.watch(event)
    found = messages(run)
    for i in order if order is not None else range(len(found)):
        message, sent_at = found[i % len(found)]
        timeline.message(message, sent_at)
    return timeline


def report_of(run: Run, timeline: DrillTimeline | None = None) -> DrillReport:
    resumptions = [Resumption(job, CHECKPOINT, step) for job, step in run.resumed_at_step.items()]
    return judge(
        timeline or timeline_of(run),
        burst_pods=BURST_PODS,
        reclaim_budget_s=RECLAIM_BUDGET_S,
        ready_budget_s=READY_BUDGET_S,
        resumptions=resumptions,
    )


def step(report: DrillReport, prefix: str) -> tuple[float | None, float | None, int]:
    found = next(s for s in report.steps if s.what.startswith(prefix))
    return found.first_s, found.last_s, found.count


def verdicts(report: DrillReport) -> list[bool]:
    return [b.met for b in report.budgets]


def test_a_drill_inside_its_budgets_passes_with_its_timeline_in_order() -> None:
    report = report_of(Run())
    assert report.passed
    assert report.victims == VICTIMS
    seen, decided, commanded, acked, free = (
        step(report, what)
        for what in ("burst seen", "decision", "yield commands", "acks", "GPUs free")
    )
    placed, ready = step(report, "burst pods placed"), step(report, "burst pods ready")
    assert seen[0] == 0.0
    assert 0.0 < decided[0] <= commanded[0] < acked[0]
    assert free[1] <= placed[0]  # a gang: placed once all are free
    assert placed[1] < ready[0]
    assert step(report, "burst pods placed")[2] == BURST_PODS
    assert step(report, "burst pods ready") == approx((5.5, 5.5 + 0.1 * (BURST_PODS - 1), 8))


def test_reclaim_is_timed_to_the_last_of_acks_deletions_and_suspensions() -> None:
    report = report_of(Run(suspended_at=BURST_AT + 4.25))
    reclaim = report.budgets[0]
    assert (reclaim.took_s, reclaim.met) == (approx(4.25), True)


def test_the_decision_is_timed_by_its_record_not_by_the_deciders_event_clock() -> None:
    report = report_of(Run(decision_at=BURST_AT + 2.75))
    first, _, count = step(report, "decision")
    assert (first, count) == (approx(2.75), 1)  # decided_at says +0.0: the input's time


def test_gpus_are_free_when_the_victims_pods_end_before_they_are_deleted() -> None:
    report = report_of(Run(suspended_at=BURST_AT + 6.0))
    last_ack = BURST_AT + 1.5 + 0.2 * (len(VICTIMS) - 1)
    assert step(report, "GPUs free")[1] == approx(last_ack - BURST_AT)  # Succeeded, acked
    assert step(report, "victims' pods deleted")[1] == approx(6.0)


def test_a_reclaim_longer_than_15_s_misses_only_that_budget() -> None:
    late = Run(suspended_at=BURST_AT + 15.5)
    late.ready_at = dict.fromkeys(range(BURST_PODS), BURST_AT + 17.0)
    report = report_of(late)
    assert verdicts(report) == [False, True, True]
    assert report.budgets[0].took_s == approx(15.5)
    assert not report.passed


def test_a_command_never_acked_misses_the_reclaim_budget() -> None:
    run = Run()
    del run.acks_at[VICTIMS[3]]
    report = report_of(run)
    assert verdicts(report)[0] is False
    assert report.budgets[0].detail == f"{len(VICTIMS) - 1} of {len(VICTIMS)} commands acked"


def test_a_burst_pod_that_never_reports_misses_the_ready_budget() -> None:
    run = Run()
    del run.ready_at[5]
    report = report_of(run)
    assert verdicts(report) == [True, False, True]
    assert report.budgets[1].detail == f"{BURST_PODS - 1} of {BURST_PODS} pods ready"


def test_ready_after_30_s_is_missed() -> None:
    run = Run()
    run.ready_at[2] = BURST_AT + 30.5
    report = report_of(run)
    assert (report.budgets[1].took_s, report.budgets[1].met) == (approx(30.5), False)


def test_a_job_that_resumes_from_another_step_than_its_checkpoint_fails_the_drill() -> None:
    run = Run()
    run.resumed_at_step[VICTIMS[1]] = CHECKPOINT - 25
    report = report_of(run)
    assert verdicts(report) == [True, True, False]
    assert report.budgets[2].detail == (
        f"{VICTIMS[1]} resumed at step {CHECKPOINT - 25}, its yield saved {CHECKPOINT}"
    )


def test_a_job_never_resumed_fails_the_drill() -> None:
    run = Run()
    del run.resumed_at_step[VICTIMS[0]]
    report = report_of(run)
    assert report.budgets[2].detail == f"{VICTIMS[0]} never resumed"


def test_a_burst_never_seen_pending_misses_every_budget() -> None:
    timeline = DrillTimeline("online/burst")
    report = report_of(Run(), timeline)
    assert verdicts(report) == [False, False, False]
    assert report.steps == ()


@settings(max_examples=25, deadline=None)
@given(st.permutations(range(len(messages(Run())))))
def test_the_report_does_not_depend_on_the_order_messages_are_read_in(order: list[int]) -> None:
    """The reader takes the topics side by side: an ack may come before its command."""
    run = Run()
    assert report_of(run, timeline_of(run, order=list(order))) == report_of(run)
