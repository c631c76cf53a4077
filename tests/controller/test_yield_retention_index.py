"""Done yields are kept a day and read only when their day is over.

Every input used to read every yield record the table kept (``_housekeeping``
and the demands' ``yielding_for``). The index knows the open yields and when
each done one ended; a step reads those, and the done ones whose retention
may be over. Specified against the decider without it (an index built
afresh for each step): byte-identical outcomes, the same yields forgotten.
"""

from __future__ import annotations

from typing import Any

from cluster_objects import pod
from harness import NOW, Controller, apply_writes, production_demand, shared_pool
from test_decider import ack
from test_decider_index import outcome_digest

from gpuyield.agents.controller.decider import Input, step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import YIELD
from gpuyield.schemas.messages import Tick, YieldOutcome

DAY = 86_400.0


def a_finished_yield() -> Controller:
    """A production demand's victim checkpointed, and its pods are gone: the yield is done."""
    c = shared_pool()
    production_demand(c)
    for i in range(len(c.commands)):  # one command per node of the victim
        ack(c, i, NOW + 40, YieldOutcome.CHECKPOINTED)
    for command in list(c.commands):
        namespace, job = command.job.split("/")
        for name in command.pods:
            c.delete(pod(job, int(name.rsplit("-", 1)[1]), namespace=namespace), NOW + 45)
    c.tick(NOW + 60)
    assert all(y["done_at"] is not None for y in yields(c.records).values())
    return c


def yields(records: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in records.items() if k.startswith(YIELD)}


def test_a_done_yield_is_known_to_the_index_with_when_it_ended() -> None:
    c = a_finished_yield()
    [(key, record)] = yields(c.records).items()
    index = RecordIndex.build(c.records, c.config)
    tail = key[len(YIELD) :]
    assert index.open_yields == set()
    assert index.done_yields == {tail: record["done_at"]}
    assert index.yields_to_visit(record["done_at"]) == set()  # ended at, not before
    assert index.yields_to_visit(record["done_at"] + 1) == {tail}


def test_the_done_yield_is_forgotten_after_its_day_as_without_the_index() -> None:
    c = a_finished_yield()
    records = dict(c.records)
    config = c.config
    carried = RecordIndex.build(records, config)
    ticks: list[Input] = [Tick(at=NOW + h * 3600) for h in (1, 12, 23, 24, 25, 26)]
    forgotten_at = None
    for n, message in enumerate(ticks, start=1):
        origin = f"in/0/{900 + n}"
        fresh = step(records, message, origin, config, index=RecordIndex.build(records, config))
        outcome = step(records, message, origin, config, index=carried)
        assert outcome_digest(outcome) == outcome_digest(fresh), f"tick {n}"
        apply_writes(records, outcome)
        carried.apply(outcome.writes, records)
        if forgotten_at is None and not yields(records):
            forgotten_at = message.at
    assert forgotten_at is not None
    assert forgotten_at == NOW + 25 * 3600  # done at +60 s: past its day at +25 h, not +24 h
    assert carried.done_yields == {}
    assert carried.state() == RecordIndex.build(records, config).state()
