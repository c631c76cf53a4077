"""Drive the decider step by step, the way the worker does, and keep what it sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cluster_objects import T0, event, node, pod, pod_group, queue

from gpuyield.agents.controller import yields
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, Outcome, step
from gpuyield.agents.controller.records import YIELD, YieldRecord
from gpuyield.agents.planner import plan
from gpuyield.schemas import Plan, Snapshot
from gpuyield.schemas.messages import (
    Alert,
    Decision,
    KubeEventType,
    Reservation,
    Tick,
    YieldCommand,
)


def apply_writes(records: dict[str, Any], outcome: Outcome) -> None:
    """What the worker's table does with a step's writes: None deletes."""
    for key, value in outcome.writes.items():
        if value is None:
            records.pop(key, None)
        else:
            records[key] = value


class ReadsCounted(dict[str, Any]):
    """The decider's table, noting each record a step reads."""

    def __init__(self, records: dict[str, Any]) -> None:
        super().__init__(records)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


@dataclass
class Controller:
    config: ControllerConfig = field(default_factory=ControllerConfig)
    records: dict[str, Any] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    """The decisions that acted: a yield or a resume (``rounds`` has every one)."""
    rounds: list[Decision] = field(default_factory=list)
    """Every decision on the record, the rounds that found no plan or were skipped too."""
    commands: list[YieldCommand] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    offset: int = 0
    planned_for: list[str | None] = field(default_factory=list)
    """The job each planner call made room for, in order."""

    def planner(self, snapshot: Snapshot, preemptor: str | None = None, **options: Any) -> Plan:
        self.planned_for.append(preemptor)
        return plan(snapshot, preemptor, **options)

    def feed(self, message: Input, origin: str | None = None) -> Outcome:
        self.offset += 1
        outcome = step(
            self.records,
            message,
            origin or f"in/0/{self.offset}",
            self.config,
            planner=self.planner,
        )
        apply_writes(self.records, outcome)
        self.rounds += outcome.decisions
        self.decisions += (d for d in outcome.decisions if d.commands)
        self.commands += outcome.commands
        self.alerts += outcome.alerts
        self.reservations += outcome.reservations
        return outcome

    def add(self, obj: dict[str, Any], at: float) -> Outcome:
        return self.feed(event(obj, at))

    def change(self, obj: dict[str, Any], at: float) -> Outcome:
        return self.feed(event(obj, at, KubeEventType.MODIFIED))

    def delete(self, obj: dict[str, Any], at: float) -> Outcome:
        return self.feed(event(obj, at, KubeEventType.DELETED))

    def tick(self, at: float) -> Outcome:
        return self.feed(Tick(at=at))

    def yields_of(self, job: str) -> list[YieldRecord]:
        """``job``'s yields in the table, oldest first."""
        found = [
            YieldRecord.model_validate(v)
            for k, v in self.records.items()
            if k.startswith(f"{YIELD}{job}/")
        ]
        return sorted(found, key=lambda y: y.issued_at)

    def leaving(self, job: str) -> frozenset[str]:
        """Pods of ``job`` the decider counts as on their way out."""
        return frozenset().union(*(yields.leaving_pods(y) for y in self.yields_of(job)))


NOW = T0 + 6 * 3600  # research has run six hours


def shared_pool(nodes: int = 4, c: Controller | None = None) -> Controller:
    """A 4 x 8-GPU pool: production guaranteed 16 GPUs, research borrowing all 32."""
    c = c if c is not None else Controller()
    at = NOW - 60
    for i in range(nodes):
        c.add(node(f"gpu-{i:02d}"), at)
    c.add(queue("production", weight=4, capability=32, guarantee=16, reclaimable=False), at)
    c.add(queue("research", weight=1, capability=32), at)
    for j in range(nodes // 2):
        name = f"sweep-{j}"
        c.add(pod_group(name, namespace="research", queue="research", min_member=2), at)
        for k in range(2):
            c.add(pod(name, k, namespace="research", node=f"gpu-{2 * j + k:02d}"), at)
    return c


def production_demand(
    c: Controller, name: str = "ft-llama", pods: int = 1, at: float = NOW
) -> None:
    """A production fine-tune Volcano could not place."""
    production_demand_outcome(c, name, pods, at)


def production_demand_outcome(
    c: Controller, name: str = "ft-llama", pods: int = 1, at: float = NOW
) -> Outcome:
    """``production_demand``, returning the outcome of the message that completed it."""
    outcome = c.add(
        pod_group(
            name,
            namespace="prod",
            queue="production",
            min_member=pods,
            phase="Inqueue",
            unschedulable=True,
        ),
        at,
    )
    for k in range(pods):
        outcome = c.add(pod(name, k, namespace="prod", priority=1000), at)
    return outcome
