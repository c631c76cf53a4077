"""The node agent's Prometheus families: its commands' phases and the outcomes it reports.

Every phase change of a command goes through the ledger (``claim`` makes a
``received`` record, ``save`` writes each later phase), so a ledger that
counts what it writes sees every transition without the executor knowing:

- ``gpuyield_node_phase_transitions_total{phase}``: records that entered a phase;
- ``gpuyield_node_commands_in_flight{phase}``: commands of this agent in each
  phase now (not ``done``);
- ``gpuyield_node_acks_total{outcome}``: acks this agent settled, by outcome
  (the worker's ``gpuyield_yields_total`` counts them once cluster-wide);
- ``gpuyield_dead_letters_total{topic}``: commands this agent could not read;
- ``gpuyield_consumer_lag_messages{topic}``: messages not read yet on the topics
  it reads: its partition of ``gpuyield.yield-commands`` (a yield waits there
  for the agent), and the ``gpuyield.heartbeats`` partitions it follows while
  it yields a job (0 when it follows none).

A restarted agent starts from zero and learns its in-flight records back
from ``Ledger.in_flight`` (``recovered``).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge
from redis.asyncio import Redis

from gpuyield.agents.node.ledger import WEEK_S, Ledger
from gpuyield.agents.node.records import Phase, YieldRecord
from gpuyield.schemas.messages import YieldCommand, YieldOutcome
from gpuyield.streams.metrics import NAMESPACE, ConsumerLag, process_families, topic_label


class NodeMetrics:
    """The families of one node agent, on their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = "") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.prefix = prefix
        r = self.registry
        process_families(r)
        self.transitions = Counter(
            "node_phase_transitions_total",
            "Yield and resume commands that entered a phase on this node agent.",
            ["phase"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.in_flight = Gauge(
            "node_commands_in_flight",
            "Commands this node agent is carrying out, by phase.",
            ["phase"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.acks = Counter(
            "node_acks_total",
            "Commands this node agent settled, by outcome.",
            ["outcome"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.dead_letters = Counter(
            "dead_letters_total",
            "Messages sent to the dead-letter topic, by the topic they came from.",
            ["topic"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.lag = ConsumerLag(r)
        self._phase_of: dict[str, Phase] = {}
        for phase in Phase:
            self.transitions.labels(phase=phase.value)
            if phase is not Phase.DONE:
                self.in_flight.labels(phase=phase.value).set(0)
        for outcome in YieldOutcome:
            self.acks.labels(outcome=outcome.value)

    def recovered(self, records: Iterable[YieldRecord]) -> None:
        """A restarted agent's in-flight records, as the ledger holds them."""
        for record in records:
            self._move(record.command_id, record.phase, count=False)

    def entered(self, record: YieldRecord) -> None:
        """``record`` was written in its (possibly new) phase."""
        if self._phase_of.get(record.command_id) is record.phase:
            return  # the same phase written again (a retry): no transition
        self._move(record.command_id, record.phase, count=True)
        if record.phase is Phase.DONE and record.ack is not None:
            self.acks.labels(outcome=record.ack.outcome.value).inc()

    def dead_letter(self, topic: str) -> None:
        self.dead_letters.labels(topic=topic_label(topic, self.prefix)).inc()

    def behind(self, topic: str, partition: int, messages: int | None) -> None:
        """A partition this agent reads has ``messages`` not read yet (None: not known)."""
        self.lag.observe(topic_label(topic, self.prefix), partition, messages)

    def released(self, topic: str, partition: int) -> None:
        """This agent reads the partition no more."""
        self.lag.forget(topic_label(topic, self.prefix), partition)

    def _move(self, command_id: str, phase: Phase, *, count: bool) -> None:
        old = self._phase_of.pop(command_id, None)
        if old is not None and old is not Phase.DONE:
            self.in_flight.labels(phase=old.value).dec()
        if count:
            self.transitions.labels(phase=phase.value).inc()
        if phase is not Phase.DONE:
            self._phase_of[command_id] = phase
            self.in_flight.labels(phase=phase.value).inc()


class MeteredLedger(Ledger):
    """A ``Ledger`` that tells ``NodeMetrics`` each phase it writes."""

    def __init__(
        self,
        redis: Redis,
        node: str,
        metrics: NodeMetrics,
        *,
        prefix: str = "gpuyield",
        ttl_s: int = WEEK_S,
    ) -> None:
        super().__init__(redis, node, prefix=prefix, ttl_s=ttl_s)
        self.metrics = metrics

    async def claim(self, command: YieldCommand, now: float) -> tuple[YieldRecord, bool]:
        record, new = await super().claim(command, now)
        if new:
            self.metrics.entered(record)
        return record, new

    async def save(self, record: YieldRecord) -> None:
        await super().save(record)
        self.metrics.entered(record)

    async def in_flight(self) -> list[YieldRecord]:
        records = await super().in_flight()
        self.metrics.recovered(records)
        return records
