"""Cooldowns per demand: one shortage never triggers a second round while yields are in flight.

Kueue's expectations store, as a pure value: when the planner decides for a
preemptor, the yields it issued are *expected*; until every one is observed
(acknowledged, or its deadline passed) the same preemptor is not planned
for again. After that a per-demand cooldown keeps a still-unplaced
preemptor from triggering a new round immediately.
"""

from __future__ import annotations

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

    def may_plan(self, preemptor: str, now: float) -> bool:
        flight = self.in_flight.get(preemptor)
        if flight is not None and flight.victims and now < flight.deadline:
            return False
        last = self.last_round.get(preemptor)
        return last is None or now - last >= self.cooldown_s

    def decided(
        self, preemptor: str, victims: frozenset[str], now: float, deadline: float
    ) -> DemandLedger:
        flights = dict(self.in_flight)
        flights[preemptor] = InFlight(victims, deadline, now)
        rounds = dict(self.last_round)
        rounds[preemptor] = now
        return replace(self, in_flight=flights, last_round=rounds)

    def tried(self, preemptor: str, now: float) -> DemandLedger:
        """A round found no plan: retry only after the cooldown (state may change by then)."""
        rounds = dict(self.last_round)
        rounds[preemptor] = now
        return replace(self, last_round=rounds)

    def acknowledged(self, preemptor: str, victim: str) -> DemandLedger:
        flight = self.in_flight.get(preemptor)
        if flight is None or victim not in flight.victims:
            return self  # redelivered or unknown: nothing changes twice
        flights = dict(self.in_flight)
        flights[preemptor] = replace(flight, victims=flight.victims - {victim})
        return replace(self, in_flight=flights)

    def settled(self, preemptor: str) -> DemandLedger:
        """The preemptor was placed (or gave up): forget its round."""
        if preemptor not in self.in_flight and preemptor not in self.last_round:
            return self
        flights = {k: v for k, v in self.in_flight.items() if k != preemptor}
        rounds = {k: v for k, v in self.last_round.items() if k != preemptor}
        return replace(self, in_flight=flights, last_round=rounds)

    def waiting_on(self, preemptor: str) -> frozenset[str]:
        flight = self.in_flight.get(preemptor)
        return flight.victims if flight is not None else frozenset()
