"""The worker's metrics follow from the decider's outcomes: each event counted once."""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "controller"))

from cluster_objects import node, pod, pod_group, queue, volcano_job
from harness import NOW, Controller, production_demand, shared_pool
from prometheus_client.parser import text_string_to_metric_families

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, Outcome
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import ALERT, AlertRecord
from gpuyield.agents.planner import plan
from gpuyield.agents.worker.metrics import EVENT_KINDS, WorkerMetrics
from gpuyield.schemas import Policy
from gpuyield.schemas.messages import AlertKind, RoundOutcome, Tick, YieldAck, YieldOutcome
from gpuyield.streams.metrics import serve


@dataclass
class Metered(Controller):
    """The harness's controller with the worker's metrics observing every step."""

    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)

    def feed(self, message: Input, origin: str | None = None) -> Outcome:
        before = dict(self.records)
        outcome = super().feed(message, origin)
        self.metrics.observe_step(before, message, outcome)
        return outcome


def metered(c: Controller) -> Metered:
    return Metered(config=c.config, records=c.records, offset=c.offset)


def value(m: WorkerMetrics, name: str, **labels: str) -> float:
    found = m.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def ack(c: Controller, index: int, at: float, outcome: YieldOutcome, lost: float = 0.0) -> None:
    command = c.commands[index]
    c.feed(
        YieldAck(
            command_id=command.command_id,
            decision_id=command.decision_id,
            node=command.node,
            job=command.job,
            outcome=outcome,
            checkpoint_step=1200 if outcome is YieldOutcome.CHECKPOINTED else None,
            seconds_taken=40.0,
            gpu_seconds_lost=lost,
            acked_at=at,
        )
    )


def test_an_eviction_counts_one_decision_and_one_eviction_per_victim_by_its_queue() -> None:
    c = metered(shared_pool())
    production_demand(c)
    victims = [v for d in c.decisions for v in d.plan.victims]
    assert victims
    assert value(c.metrics, "gpuyield_decisions_total", outcome="yield") == 1
    assert value(c.metrics, "gpuyield_evictions_total", queue="research") == len(victims)


def test_an_ack_is_counted_once_with_its_duration_and_lost_work_by_queue() -> None:
    c = metered(shared_pool())
    c.add(volcano_job("sweep-0", namespace="research", queue="research", replicas=2), NOW - 60)
    production_demand(c)
    ack(c, 0, NOW + 40, YieldOutcome.CHECKPOINTED, lost=960.0)
    ack(c, 0, NOW + 40, YieldOutcome.CHECKPOINTED, lost=960.0)  # redelivered
    m = c.metrics
    assert value(m, "gpuyield_yields_total", outcome="checkpointed") == 1
    assert value(m, "gpuyield_yield_seconds_count") == 1
    assert value(m, "gpuyield_yield_seconds_sum") == 40.0  # issued at NOW, acked at NOW + 40
    assert value(m, "gpuyield_lost_gpu_seconds_total", queue="research") == 960.0


def test_a_yield_nobody_acknowledges_counts_as_expired() -> None:
    c = metered(shared_pool())
    production_demand(c)
    c.tick(NOW + 120 + 31)
    commands = len(c.commands)
    assert value(c.metrics, "gpuyield_yields_total", outcome="expired") == commands
    assert (
        value(c.metrics, "gpuyield_alerts_total", kind="yield-deadline-missed", severity="warning")
        == commands
    )


def livelocked() -> Metered:
    """One research job evicted round after round until the eviction limit spares it."""
    c = metered(Controller(config=ControllerConfig(policy=Policy(cooldown_s=0.0, max_evictions=3))))
    c.add(node("gpu-00"), NOW)
    c.add(queue("production", capability=8, guarantee=8, reclaimable=False), NOW)
    c.add(queue("research", capability=8), NOW)
    for round_ in range(5):
        t = NOW + round_ * 1000
        c.add(pod_group("sweep", namespace="research", queue="research"), t)
        c.add(pod("sweep", 0, namespace="research", node="gpu-00"), t)
        name = f"ft-{round_}"
        issued = len(c.commands)
        production_demand(c, name, at=t + 1)
        if len(c.commands) > issued:
            ack(c, issued, t + 50, YieldOutcome.CHECKPOINTED)
            c.delete(pod("sweep", 0, namespace="research", node="gpu-00"), t + 50)
            c.add(pod(name, 0, namespace="prod", priority=1000, node="gpu-00"), t + 60)
            c.change(pod_group(name, namespace="prod", queue="production"), t + 60)
            c.delete(pod(name, 0, namespace="prod", priority=1000, node="gpu-00"), t + 900)
        c.delete(pod_group(name, namespace="prod", queue="production"), t + 900)
    return c


def test_a_livelock_is_counted_by_its_pattern() -> None:
    c = livelocked()
    patterns = [a.details["pattern"] for a in c.alerts if a.kind is AlertKind.LIVELOCK]
    assert len(patterns) == 1
    assert value(c.metrics, "gpuyield_livelock_detections_total", kind=patterns[0]) == 1


def test_demands_the_eviction_limit_leaves_unserved_count_as_unservable_decisions() -> None:
    """One count per round, as the decisions topic records them (an incident may take
    several rounds: its alert is raised once)."""
    c = livelocked()
    unservable = [d for d in c.rounds if d.outcome is RoundOutcome.UNSERVABLE]
    assert len(unservable) > len([a for a in c.alerts if a.kind is AlertKind.DEMAND_UNSERVABLE])
    assert value(c.metrics, "gpuyield_decisions_total", outcome="unservable") == len(unservable)
    assert value(c.metrics, "gpuyield_decisions_total", outcome="yield") == 3


def test_firing_counts_open_incidents_of_lasting_kinds_from_the_table() -> None:
    def alert(kind: AlertKind, resolved_at: float | None = None) -> dict[str, object]:
        return AlertRecord(kind=kind.value, raised_at=NOW, resolved_at=resolved_at).dump()

    records = {
        ALERT + "a": alert(AlertKind.GANG_DEADLOCK),
        ALERT + "b": alert(AlertKind.GANG_DEADLOCK),
        ALERT + "c": alert(AlertKind.QUEUE_MISCONFIGURED, resolved_at=NOW + 60),
        ALERT + "d": alert(AlertKind.YIELD_HARD_KILLED),  # an event, not a condition
    }
    m = WorkerMetrics()
    m.count_firing(records)
    assert value(m, "gpuyield_alerts_firing", kind="gang-deadlock") == 2
    assert value(m, "gpuyield_alerts_firing", kind="queue-misconfigured") == 0
    unlisted = m.registry.get_sample_value("gpuyield_alerts_firing", {"kind": "yield-hard-killed"})
    assert unlisted is None
    assert AlertKind.YIELD_HARD_KILLED in EVENT_KINDS


def test_firing_is_recounted_on_ticks_at_most_every_fifteen_seconds() -> None:
    c = metered(shared_pool())
    c.records[ALERT + "x"] = AlertRecord(kind="gang-deadlock", raised_at=NOW).dump()
    c.tick(NOW)
    assert value(c.metrics, "gpuyield_alerts_firing", kind="gang-deadlock") == 1
    c.records[ALERT + "y"] = AlertRecord(kind="gang-deadlock", raised_at=NOW).dump()
    c.tick(NOW + 5)
    assert value(c.metrics, "gpuyield_alerts_firing", kind="gang-deadlock") == 1
    c.tick(NOW + 20)
    assert value(c.metrics, "gpuyield_alerts_firing", kind="gang-deadlock") == 2


class UnlistedTable(dict[str, object]):
    """A big live table: its keys may be read one by one, never listed or sorted whole."""

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the whole table was listed")


def test_with_the_deciders_index_firing_is_counted_without_listing_the_table() -> None:
    c = shared_pool()
    production_demand(c)
    c.records[ALERT + "x"] = AlertRecord(kind="gang-deadlock", raised_at=NOW).dump()
    c.records[ALERT + "y"] = AlertRecord(kind="gang-deadlock", raised_at=NOW).dump()
    index = RecordIndex.build(c.records, c.config)
    m = WorkerMetrics()
    # a step that resolved one of them
    resolved = AlertRecord(kind="gang-deadlock", raised_at=NOW, resolved_at=NOW + 20).dump()
    outcome = Outcome(writes={ALERT + "y": resolved})
    m.observe_step(UnlistedTable(c.records), Tick(at=NOW + 20), outcome, index=index)
    assert value(m, "gpuyield_alerts_firing", kind="gang-deadlock") == 1


def test_the_timed_planner_returns_the_planners_plan_and_observes_each_call() -> None:
    c = shared_pool()
    production_demand(c)
    snapshot = c.decisions[0].snapshot
    m = WorkerMetrics()
    timed = m.timed_planner()
    assert timed(snapshot, "prod/ft-llama", explain=True) == plan(
        snapshot, "prod/ft-llama", explain=True
    )
    assert value(m, "gpuyield_planner_seconds_count") == 1


def test_dead_letters_and_lag_are_labelled_by_topic_without_the_prefix() -> None:
    m = WorkerMetrics(prefix="run7.")
    m.dead_letter("run7.gpuyield.kube-events")
    m.dead_letter("run7.gpuyield.kube-events")
    m.dead_letter("somebody-elses-topic")
    m.consumed("run7.gpuyield.heartbeats", 0, offset=9, highwater=25)
    m.consumed("run7.gpuyield.heartbeats", 1, offset=3, highwater=4)
    assert value(m, "gpuyield_dead_letters_total", topic="gpuyield.kube-events") == 2
    assert value(m, "gpuyield_dead_letters_total", topic="other") == 1
    assert value(m, "gpuyield_consumer_lag_messages", topic="gpuyield.heartbeats") == 15


def test_the_exposition_served_over_http_has_every_family() -> None:
    m = WorkerMetrics()
    m.observe_step({}, Tick(at=NOW), Outcome())
    server = serve(0, m.registry, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        server.close()
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {
        "gpuyield_decisions",
        "gpuyield_evictions",
        "gpuyield_yields",
        "gpuyield_yield_seconds",
        "gpuyield_lost_gpu_seconds",
        "gpuyield_livelock_detections",
        "gpuyield_decider_step_seconds",
        "gpuyield_planner_seconds",
        "gpuyield_heartbeats",
        "gpuyield_dead_letters",
        "gpuyield_alerts_firing",
        "gpuyield_alerts",
        "gpuyield_consumer_lag_messages",
    } <= families


def test_heartbeats_are_counted_by_the_partition_they_came_from() -> None:
    m = WorkerMetrics(prefix="run7.")
    m.heartbeats_read([3, 3, 5, 3])
    m.heartbeats_read([5])
    assert value(m, "gpuyield_heartbeats_total", partition="3") == 3
    assert value(m, "gpuyield_heartbeats_total", partition="5") == 2
    assert value(m, "gpuyield_heartbeats_total", partition="0") == 0
