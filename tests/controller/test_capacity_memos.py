"""What a snapshot answered about capacity is remembered until what it read changes.

While no suspended job fits, every input used to build each candidate's whole
snapshot again to learn that (0.65 s at 10,000 nodes); while two partial
gangs wait without blocking each other, every input built one to learn there
is no deadlock. At the same epochs of the records those answers come from
(``decider.CAPACITY_READS``), and before the next reservation expires, the
decider's index answers instead. Specified against the decider without the
memos (an index built afresh for each step, as a restarted worker's): the
outcomes must be byte-identical, and a snapshot is built only when the
records it reads changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cluster_objects import event, pod
from harness import NOW, Controller, apply_writes
from test_decider_index import outcome_digest
from test_decider_live_path import suspended_trio
from test_gang_deadlock import GANGS, deadlocked

from gpuyield.agents.controller import cluster
from gpuyield.agents.controller.deadlock import NO_PREEMPTOR
from gpuyield.agents.controller.decider import Input, step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import ReservationRecord
from gpuyield.schemas.messages import CommandAction, JobProgress, KubeEventType, Tick

Builds = list[str]


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Builds:
    """The preemptor of every snapshot the decider builds."""
    made: Builds = []
    original = cluster.snapshot

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(args[2])
        return original(*args, **kwargs)

    monkeypatch.setattr(cluster, "snapshot", counted)
    return made


def quiet_inputs(start: float, count: int) -> list[Input]:
    """Ticks and the production fine-tune's progress: nothing that frees or takes a GPU."""
    out: list[Input] = []
    for i in range(count):
        at = start + 20 * i
        if i % 3 == 0:
            out.append(Tick(at=at))
        else:
            out.append(
                JobProgress(
                    job="prod/ft-wide",
                    step=100 * i,
                    progress=0.01 * i,
                    checkpoint_interval_s=600.0,
                    first_seen_at=NOW + 50,
                    updated_at=at,
                )
            )
    return out


def finished_fine_tune(at: float) -> list[Input]:
    """ft-wide completes: its four pods leave, and the research jobs fit again."""
    gone = [
        event(
            pod("ft-wide", k, namespace="prod", priority=1000, node=f"gpu-0{k}"),
            at,
            KubeEventType.DELETED,
        )
        for k in range(4)
    ]
    return [*gone, Tick(at=at + 1)]


def play(
    messages: list[Input],
    builds: Builds,
    c: Controller | None = None,
    counted: Callable[[str], bool] = lambda preemptor: preemptor.startswith("research/"),
) -> tuple[int, int, list[Any]]:
    """Step ``messages`` from ``c`` (the suspended trio) twice: carried index, and the
    reference: an index built afresh for each step, without its free GPUs per node (every
    resume check then builds its snapshot).

    Returns the snapshots built for the ``counted`` preemptors (the suspended
    research jobs) with the carried index and with fresh ones, and the commands
    (the same for both: their outcomes are compared).
    """
    c = suspended_trio() if c is None else c
    records = dict(c.records)
    config = c.config
    carried = RecordIndex.build(records, config)
    step(records, Tick(at=NOW + 55), "in/0/0", config, index=carried)  # warm: not counted
    remembered = afresh = 0
    commands: list[Any] = []
    for n, message in enumerate(messages, start=1):
        origin = f"in/0/{n}"
        before = len(builds)
        reference = RecordIndex.build(records, config, free_capacity=False)
        fresh = step(records, message, origin, config, index=reference)
        afresh += sum(1 for b in builds[before:] if counted(b))
        before = len(builds)
        outcome = step(records, message, origin, config, index=carried)
        remembered += sum(1 for b in builds[before:] if counted(b))
        assert outcome_digest(outcome) == outcome_digest(fresh), f"input {n}: {message}"
        apply_writes(records, outcome)
        carried.apply(outcome.writes, records)
        commands += outcome.commands
    return remembered, afresh, commands


def test_while_nothing_it_reads_changes_the_resume_pass_builds_no_snapshot(
    builds: Builds,
) -> None:
    remembered, afresh, commands = play(quiet_inputs(NOW + 700, 30), builds)
    assert afresh >= 30  # without the memo, every input builds for the suspended jobs
    assert remembered <= 3  # with it, only the first after the warm-up may
    assert commands == []  # nobody fits: nothing resumes either way


def test_a_freed_node_is_seen_at_once_and_the_job_resumes_as_without_the_memo(
    builds: Builds,
) -> None:
    quiet = quiet_inputs(NOW + 700, 9)
    remembered, afresh, commands = play([*quiet, *finished_fine_tune(NOW + 900)], builds)
    assert remembered < afresh
    # each pod that leaves frees a node: the research jobs resume one per step
    assert commands
    assert {c.action for c in commands} == {CommandAction.RESUME}
    assert all(c.job.startswith("research/") for c in commands)


def test_the_memo_lapses_when_a_reservation_expires(builds: Builds) -> None:
    """A hold for another preemptor that expires frees GPUs with no record written:
    the memo answers only until the first expiry it saw. (Counted with the snapshots the
    resume checks build: the index keeps no free GPUs per node here, so each check that
    the memo does not answer builds one.)"""
    c = suspended_trio()
    records = dict(c.records)
    records["reservation/prod/ft-other"] = ReservationRecord(
        nodes={"gpu-00": 8}, until=NOW + 800
    ).dump()
    index = RecordIndex.build(records, c.config, free_capacity=False)
    for n, at in enumerate((NOW + 700, NOW + 750, NOW + 790, NOW + 810), start=1):
        before = len(builds)
        outcome = step(records, Tick(at=at), f"in/0/{n}", c.config, index=index)
        apply_writes(records, outcome)
        index.apply(outcome.writes, records)
        built = sum(1 for b in builds[before:] if b.startswith("research/"))
        if n == 1:
            assert index.resume_memo is not None
            assert index.resume_memo.until == NOW + 800
        elif at < NOW + 800:
            assert built == 0, f"tick at +{at - NOW:.0f} s"
        else:
            assert built > 0  # the hold expired: the snapshots are built again


def test_partial_gangs_that_do_not_block_each_other_are_not_looked_at_again(
    builds: Builds,
) -> None:
    """Two gangs each one pod short, and a free node either could take: no deadlock
    (Volcano completes one there), and nothing changes while only time passes."""
    c = deadlocked(nodes=7)
    progress = [
        JobProgress(
            job=f"train/{GANGS[0]}",
            step=300 + i,
            progress=0.02,
            first_seen_at=NOW - 4000,
            updated_at=NOW + 20 * i,
        )
        for i in range(1, 21)
    ]
    remembered, afresh, commands = play(
        progress, builds, c, counted=lambda preemptor: preemptor == NO_PREEMPTOR
    )
    assert afresh >= 20  # without the memo, every input looked for the deadlock again
    assert remembered <= 1
    assert commands == []
