"""Cooldowns per demand: one shortage never triggers a second round while yields are in flight.

Kueue's expectations store, as a pure value: when the planner decides for a
preemptor, the yields it issued are *expected*; until every one is observed
(acknowledged, or its deadline passed) the same preemptor is not planned
for again. After that a per-demand cooldown keeps a still-unplaced
preemptor from triggering a new round immediately.

Optionally (``backoff_max_s``), a demand whose rounds keep finding no plan
is retried less and less often: the cooldown doubles with each failed round
in a row, up to ``backoff_max_s``, as the Kubernetes scheduler backs off an
unschedulable pod. A decided or settled round starts it afresh. A queue's
backlog of jobs that no eviction may serve (above their queue's guarantee,
nothing lighter to preempt) otherwise costs one planner call per job per
cooldown, for as long as the backlog lasts.

A demand with an SLA (``planner.urgency``) is neither cooled down nor
backed off: it may be planned again ``sla_retry_s`` after its last round
(the next scheduling cycle in the simulator). Production jobs are few (their
queue's capability bounds them), and every round one of them skips is
budget it does not have; stock Volcano tries every starving job each cycle.
A round still in flight holds it back all the same: planning again while its
victims' pods leave would evict twice for one shortage.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class InFlight:
    victims: frozenset[str]
    deadline: float
    decided_at: float


@dataclass(frozen=True, slots=True)
class DemandLedger:
    cooldown_s: float = 300.0
    in_flight: Mapping[str, InFlight] = field(default_factory=dict)
    last_round: Mapping[str, float] = field(default_factory=dict)
    backoff_max_s: float | None = None  # None: the cooldown never grows
    failures: Mapping[str, int] = field(default_factory=dict)  # failed rounds in a row
    sla_retry_s: float = 0.0  # the retry delay of a demand with an SLA

    def may_plan(self, preemptor: str, now: float, *, sla: bool = False) -> bool:
        flight = self.in_flight.get(preemptor)
        if flight is not None and flight.victims and now < flight.deadline:
            return False
        last = self.last_round.get(preemptor)
        return last is None or now - last >= self.retry_after(preemptor, sla=sla)

    def held_until(self, preemptor: str, *, sla: bool = False) -> float:
        """A time before which ``may_plan`` stays False while ``preemptor``'s entries stay
        as they are (-inf: none). Its retry delay is counted a millionth short, so that
        no rounding of ``last + delay`` makes it late; ``may_plan`` has the last word."""
        until = -math.inf
        flight = self.in_flight.get(preemptor)
        if flight is not None and flight.victims:
            until = flight.deadline
        last = self.last_round.get(preemptor)
        if last is not None:
            delay = self.retry_after(preemptor, sla=sla)
            until = max(until, last + delay - 1e-6 * (abs(last) + abs(delay) + 1.0))
        return until

    def retry_after(self, preemptor: str, *, sla: bool = False) -> float:
        """Seconds after its last round before ``preemptor`` (``sla``: with an SLA) may be
        planned for again."""
        if sla:
            return min(self.cooldown_s, self.sla_retry_s)
        failed = self.failures.get(preemptor, 0)
        if self.backoff_max_s is None or failed <= 1:
            return self.cooldown_s
        return min(self.backoff_max_s, self.cooldown_s * 2.0 ** (failed - 1))

    def decided(
        self, preemptor: str, victims: frozenset[str], now: float, deadline: float
    ) -> DemandLedger:
        flights = dict(self.in_flight)
        flights[preemptor] = InFlight(victims, deadline, now)
        rounds = dict(self.last_round)
        rounds[preemptor] = now
        failures = {k: v for k, v in self.failures.items() if k != preemptor}
        return replace(self, in_flight=flights, last_round=rounds, failures=failures)

    def tried(self, preemptor: str, now: float) -> DemandLedger:
        """A round found no plan: retry only after the cooldown (state may change by then)."""
        rounds = dict(self.last_round)
        rounds[preemptor] = now
        if self.backoff_max_s is None:
            return replace(self, last_round=rounds)
        failures = dict(self.failures)
        failures[preemptor] = failures.get(preemptor, 0) + 1
        return replace(self, last_round=rounds, failures=failures)

    def acknowledged(self, preemptor: str, victim: str) -> DemandLedger:
        flight = self.in_flight.get(preemptor)
        if flight is None or victim not in flight.victims:
            return self  # redelivered or unknown: nothing changes twice
        flights = dict(self.in_flight)
        flights[preemptor] = replace(flight, victims=flight.victims - {victim})
        return replace(self, in_flight=flights)

    def settled(self, preemptor: str) -> DemandLedger:
        """The preemptor was placed (or gave up): forget its round."""
        if (
            preemptor not in self.in_flight
            and preemptor not in self.last_round
            and preemptor not in self.failures
        ):
            return self
        flights = {k: v for k, v in self.in_flight.items() if k != preemptor}
        rounds = {k: v for k, v in self.last_round.items() if k != preemptor}
        failures = {k: v for k, v in self.failures.items() if k != preemptor}
        return replace(self, in_flight=flights, last_round=rounds, failures=failures)

    def waiting_on(self, preemptor: str) -> frozenset[str]:
        flight = self.in_flight.get(preemptor)
        return flight.victims if flight is not None else frozenset()
