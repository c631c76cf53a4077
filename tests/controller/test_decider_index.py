"""The decider's incremental index changes nothing it decides (issue 14).

``step`` keeps its job views, key order and demand bookkeeping in a
``RecordIndex`` next to the table instead of rebuilding them from the whole
table on every input. These tests hold it to the decisions of the decider
that rebuilt everything:

- recordings (``data/decider_reference*.jsonl.gz``, made by
  ``bench/decider_reference.py`` before the index existed) of a stand-in
  cluster's watch events, progress, acks and ticks, with each step's outcome
  as a SHA-256 digest: replayed through today's ``step``, carrying one index
  across all of them as the worker does, every outcome must be byte-identical.
  Their digests were made again once (December 2026, ``--redigest``: the same
  inputs through ``step`` without an index) when plans that a count proves
  impossible stopped being searched and say so in other words: replayed side
  by side with that count switched off, the old digests matched at every step,
  and with it on 114 of 5,602 steps differed, only in the wording of infeasible
  plans and of their ``demand-unservable`` alerts (tables, commands and holds
  identical at every step);
- random message sequences (hypothesis): the index carried across steps and
  updated from each step's writes equals one built afresh from the table, and
  gives the same outcomes as a fresh one;
- the index's job views equal ``cluster.jobs``, the full rebuild, after every step,
  each job's run start read from its own pods equals the one read from all pods, and
  the jobs retention looks at are those with records that ``cluster.known_jobs`` misses.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cluster_objects import pod, pod_group
from harness import NOW, apply_writes, production_demand, shared_pool
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpuyield.agents.controller import cluster, incidents
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, Outcome, step
from gpuyield.agents.controller.index import RETAINED, RecordIndex
from gpuyield.agents.controller.records import Overlay
from gpuyield.schemas.messages import (
    Alert,
    AlertKind,
    AlertState,
    JobProgress,
    KubeEvent,
    Tick,
    YieldAck,
    YieldOutcome,
)

DATA = Path(__file__).parent / "data"
KINDS: dict[str, type[Input]] = {
    "kube": KubeEvent,
    "progress": JobProgress,
    "ack": YieldAck,
    "tick": Tick,
}


def outcome_digest(outcome: Outcome) -> str:
    """What ``bench/decider_reference.py`` recorded for one step."""
    text = json.dumps(
        {
            "writes": outcome.writes,
            "decisions": [d.model_dump_json() for d in outcome.decisions],
            "commands": [c.model_dump_json() for c in outcome.commands],
            "alerts": [a.model_dump_json() for a in outcome.alerts],
            "reservations": [r.model_dump_json() for r in outcome.reservations],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("recording", sorted(p.name for p in DATA.glob("decider_reference*")))
def test_a_recorded_stream_gives_byte_identical_outcomes_through_the_index(
    recording: str,
) -> None:
    config = ControllerConfig()
    records: dict[str, Any] = {}
    index = RecordIndex.build(records, config)
    decided = 0
    with gzip.open(DATA / recording, "rt") as lines:
        for line in lines:
            entry = json.loads(line)
            message = KINDS[entry["kind"]].model_validate_json(entry["message"])
            outcome = step(records, message, entry["origin"], config, index=index)
            assert outcome_digest(outcome) == entry["digest"], (
                f"{entry['origin']}: {entry['kind']} gave another outcome than recorded"
            )
            apply_writes(records, outcome)
            index.apply(outcome.writes, records)
            decided += len(outcome.decisions)
    assert decided > 0  # the recording exercises the decisions, not only the inputs


Op = tuple[str, int, int]

ops = st.lists(
    st.tuples(
        st.sampled_from(["demand", "ack", "gone", "tick", "placed", "progress"]),
        st.integers(0, 5),
        st.integers(1, 400),
    ),
    min_size=1,
    max_size=25,
)


def play(script: list[Op]) -> None:
    """Play ``script`` on a 4-node pool twice over: with an index carried across the steps,
    and with one built afresh from the table for each step, without the free GPUs per node
    (its resume checks build the snapshot); both must agree throughout."""
    c = shared_pool()
    config = c.config
    records = dict(c.records)
    carried = RecordIndex.build(records, config)
    t = NOW
    commands: list[Any] = []
    n = 0
    for kind, k, dt in script:
        t += dt
        messages: list[Input] = []
        if kind == "demand":
            messages = _demand_events(f"ft-{k}", 1 + k % 2, t)
        elif kind == "ack" and commands:
            command = commands[k % len(commands)]
            messages = [YieldAck(command_id=command.command_id, decision_id=command.decision_id,
                                 node=command.node, job=command.job,
                                 outcome=YieldOutcome.CHECKPOINTED, acked_at=t)]  # fmt: skip
        elif kind == "gone" and commands:
            command = commands[k % len(commands)]
            namespace, job = command.job.split("/")
            messages = [
                _event(pod(job, int(name.rsplit("-", 1)[1]), namespace=namespace,
                           node=command.node), t, deleted=True)
                for name in command.pods
            ]  # fmt: skip
        elif kind == "placed":
            messages = [_event(pod_group(f"ft-{k}", namespace="prod", queue="production"), t)]
        elif kind == "progress":
            # first seen at one of two times: mostly the same as the job's record (a
            # forward its view does not read), now and then another (one it does)
            messages = [JobProgress(job=f"prod/ft-{k}", step=k * 10, progress=0.1 * k,
                                    checkpoint_interval_s=60.0,
                                    last_checkpoint_at=t - dt / 2 if dt % 3 else None,
                                    first_seen_at=NOW + 60 * (dt % 7 == 0),
                                    updated_at=t)]  # fmt: skip
        else:
            messages = [Tick(at=t)]
        for message in messages:
            n += 1
            origin = f"in/0/{n}"
            reference = RecordIndex.build(records, config, free_capacity=False)
            fresh = step(records, message, origin, config, index=reference)
            outcome = step(records, message, origin, config, index=carried)
            assert outcome_digest(outcome) == outcome_digest(fresh)
            apply_writes(records, outcome)
            carried.apply(outcome.writes, records)
            commands += outcome.commands
            rebuilt = RecordIndex.build(records, config)
            assert carried.state() == rebuilt.state()
            views = cluster.jobs(Overlay(records, {}), config)
            assert dict(carried.views()) == views
            assert incidents.run_starts(
                Overlay(records, {}), views, carried.pods_of
            ) == incidents.run_starts(Overlay(records, {}), views)
            retained = {k.split("/", 1)[1] for k in records if k.startswith(RETAINED)}
            assert carried.unnamed == retained - cluster.known_jobs(Overlay(records, {}))
            for preemptor in ("", f"prod/ft-{k}"):  # the parts' feed against a snapshot afresh
                kept = _snapshot(carried.reader(records), carried.views(), preemptor, t, config,
                                 parts=carried.parts)  # fmt: skip
                assert kept == _snapshot(Overlay(records, {}), views, preemptor, t, config)


def _snapshot(*args: Any, **kwargs: Any) -> object:
    """``cluster.snapshot``, or the error it raised (a snapshot the records cannot make)."""
    try:
        return cluster.snapshot(*args, **kwargs)
    except ValidationError as exc:
        return str(exc)


def _event(obj: dict[str, Any], at: float, *, deleted: bool = False) -> KubeEvent:
    from cluster_objects import event

    from gpuyield.schemas.messages import KubeEventType

    return event(obj, at, KubeEventType.DELETED if deleted else KubeEventType.MODIFIED)


def _demand_events(name: str, pods: int, at: float) -> list[Input]:
    """The watch events of ``production_demand``, captured from a throwaway controller."""
    c = shared_pool()
    before = c.offset
    sent: list[Input] = []
    original = c.feed

    def capture(message: Input, origin: str | None = None) -> Any:
        sent.append(message)
        return original(message, origin)

    c.feed = capture  # type: ignore[method-assign]
    production_demand(c, name, pods=pods, at=at)
    assert c.offset > before
    return sent


@settings(max_examples=40, deadline=None)
@given(ops)
def test_an_index_kept_across_steps_equals_one_rebuilt_from_the_table(script: list[Op]) -> None:
    play(script)


@dataclass
class Carried:
    """The 4-node pool's table with an index carried across steps, as the worker keeps them."""

    config: ControllerConfig
    records: dict[str, Any]
    index: RecordIndex

    @classmethod
    def pool(cls) -> Carried:
        c = shared_pool()
        records = dict(c.records)
        return cls(c.config, records, RecordIndex.build(records, c.config))

    def feed(self, message: Input, n: int) -> Outcome:
        """Step ``message``, then apply its writes to the table and the index."""
        outcome = step(self.records, message, f"in/0/{n}", self.config, index=self.index)
        apply_writes(self.records, outcome)
        self.index.apply(outcome.writes, self.records)
        return outcome

    def rebuilt(self) -> dict[str, Any]:
        return RecordIndex.build(self.records, self.config).state()


def test_writes_other_than_the_last_steps_are_followed_from_the_table() -> None:
    """A step leaves its records laid over the views for ``apply``; when the caller drops
    that outcome (a dead-lettered input) and applies other writes, the views follow those."""
    t = Carried.pool()
    for n, message in enumerate(_demand_events("ft-9", 2, NOW + 5)):
        t.feed(message, n)
    gone = [_event(pod("ft-9", i, namespace="prod"), NOW + 9, deleted=True) for i in (0, 1)]
    step(t.records, gone[0], "in/0/10", t.config, index=t.index)  # its outcome is lost
    outcome = step(t.records, gone[1], "in/0/11", t.config)  # the other pod's, stepped elsewhere
    apply_writes(t.records, outcome)
    t.index.apply(outcome.writes, t.records)
    assert [p.name for p in t.index.views()["prod/ft-9"].pods] == ["ft-9-worker-0"]
    assert t.index.state() == t.rebuilt()


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs whose views the index computes from here on, in order."""
    names: list[str] = []
    compute = RecordIndex._compute

    def counted(self: RecordIndex, name: str, *args: Any) -> Any:
        names.append(name)
        return compute(self, name, *args)

    monkeypatch.setattr(RecordIndex, "_compute", counted)
    return names


def test_applying_a_steps_own_writes_recomputes_no_view(computed: list[str]) -> None:
    """The step computed the views of the jobs its writes touch; applying those very
    writes keeps them, and the index equals one built from the table after them."""
    t = Carried.pool()
    for n, message in enumerate(_demand_events("ft-9", 2, NOW + 5)):
        outcome = step(t.records, message, f"in/0/{n}", t.config, index=t.index)
        assert any(k.startswith(("pod/", "group/")) for k in outcome.writes)
        in_step = len(computed)
        apply_writes(t.records, outcome)
        t.index.apply(outcome.writes, t.records)
        assert len(computed) == in_step, f"{message}: apply recomputed {computed[in_step:]}"
        assert t.index.state() == t.rebuilt()


def test_a_step_whose_outcome_is_dropped_leaves_the_views_of_the_table_it_read() -> None:
    """Nothing applies the step's writes (its input went to dead letters): whatever reads
    the index next, the next step included, sees the table as it is."""
    t = Carried.pool()
    *first, last = _demand_events("ft-9", 1, NOW + 5)
    for n, message in enumerate(first):
        t.feed(message, n)
    dropped = step(t.records, last, "in/0/9", t.config, index=t.index)  # the demand's pod
    assert any(k.startswith("pod/") for k in dropped.writes)
    later = Tick(at=NOW + 60)
    outcome = step(t.records, later, "in/0/10", t.config, index=t.index)
    assert outcome_digest(outcome) == outcome_digest(step(t.records, later, "in/0/10", t.config))
    assert dict(t.index.views()) == cluster.jobs(Overlay(t.records, {}), t.config)
    assert t.index.state() == t.rebuilt()


def forward(
    job: str, n: int, checkpoint_at: float, first_seen: float, at: float | None = None
) -> JobProgress:
    """Job ``job``'s ``n``-th summary, sent at ``at`` (by default ``n`` seconds after NOW)."""
    return JobProgress(job=job, step=100 * n, progress=0.01 * n, checkpoint_interval_s=600.0,
                       last_checkpoint_at=checkpoint_at, first_seen_at=first_seen,
                       updated_at=NOW + n if at is None else at)  # fmt: skip


def test_a_forward_its_view_does_not_read_is_noted_without_recomputing_the_view(
    computed: list[str],
) -> None:
    """A job's view reads only whether it has a progress record and when it was first
    seen; a forward that keeps both (nearly every one) updates what the job's notes read,
    its checkpoint's due time, and recomputes nothing."""
    t = Carried.pool()
    job = "research/sweep-0"
    t.feed(forward(job, 1, NOW - 30, NOW - 60), 1)  # the job's first record: its view reads it
    due = t.index.checkpoint_due[job]
    computed.clear()
    t.feed(forward(job, 2, NOW + 2, NOW - 60), 2)  # a newer checkpoint, first seen as before
    assert computed == []
    assert t.index.checkpoint_due[job] == due + 32
    assert t.index.state() == t.rebuilt()
    t.feed(forward(job, 3, NOW + 2, NOW - 10), 3)  # what the view reads moved
    assert job in computed
    assert t.index.state() == t.rebuilt()


def test_a_fresh_checkpoint_resolves_a_stale_checkpoint_alert_through_a_carried_index() -> None:
    """The forward that ends a checkpoint-stale incident is one its job's view does not
    read: the incident's memo must still see that the job's notes changed."""
    t = Carried.pool()
    job = "research/sweep-0"
    alerts: list[Alert] = []

    def feed(message: Input, n: int) -> None:
        outcome = t.feed(message, n)
        alerts.extend(a for a in outcome.alerts if a.kind == AlertKind.CHECKPOINT_STALE)

    feed(forward(job, 1, NOW - 1000, NOW - 7200), 1)
    feed(Tick(at=NOW + 10), 2)  # 1,010 s: under three intervals
    feed(Tick(at=NOW + 20), 3)  # the memo: nothing ended, nothing to look at again
    feed(Tick(at=NOW + 900), 4)
    feed(Tick(at=NOW + 910), 5)  # the alert is open and, at this tick, remembered as such
    assert [a.state for a in alerts] == [AlertState.FIRING]
    feed(forward(job, 2, NOW + 950, NOW - 7200, at=NOW + 951), 6)
    assert [a.state for a in alerts] == [AlertState.FIRING, AlertState.RESOLVED]


def test_the_indexs_views_give_values_and_items_in_name_order_as_the_mapping_does() -> None:
    c = shared_pool()
    production_demand(c)
    records = dict(c.records)
    views = RecordIndex.build(records, c.config).views()
    names = list(views)
    assert names == sorted(names)
    assert len(names) >= 3
    assert list(views.values()) == [views[name] for name in names]
    assert list(views.items()) == [(name, views[name]) for name in names]
    assert views == cluster.jobs(Overlay(records, {}), c.config)
