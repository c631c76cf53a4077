"""The resume pass's capacity check, answered from free GPUs kept per node (issue 14).

While a suspended gang cannot fit, the decider used to build the planner's
whole snapshot on every input that moved a pod (54 ms at 1,000 nodes, 0.65 s
at 10,000) to learn three numbers: whether the free GPUs could hold the job
(``could_place_on_free_gpus``), how many are free (``free_gpus``) and what it
holds against lighter resumes (``hold_for``). ``FreeCapacity`` keeps the
free GPUs per node in the index and must give the very answers the snapshot
gives, on any cluster: checked here on generated ones (cordoned and
overcommitted nodes, nodes without GPUs or without a record, leaving pods,
reservations for others, holds, queue capabilities, node records the step
wrote), and end to end against the decider that builds the snapshot.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

from cluster_objects import event
from harness import NOW, apply_writes
from hypothesis import given, settings
from hypothesis import strategies as st
from test_capacity_memos import Builds, builds  # noqa: F401 -- the fixture
from test_decider_index import outcome_digest

from gpuyield.agents.controller import cluster, free_capacity
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, step
from gpuyield.agents.controller.free_capacity import node_facts
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import (
    GROUP,
    NODE,
    POD,
    QUEUE,
    RESERVATION,
    SUSPENDED,
    GroupRecord,
    NodeRecord,
    Overlay,
    PodRecord,
    QueueRecord,
    ReservationRecord,
    SuspendedRecord,
)
from gpuyield.agents.planner.session import could_place_on_free_gpus
from gpuyield.schemas import JobState
from gpuyield.schemas.kube_objects import JOB_NAME, a_gpu_node, a_pod
from gpuyield.schemas.messages import KubeEventType, Tick

NODES = [f"gpu-{i:02d}" for i in range(6)]
GHOST = "gpu-gone"  # a node pods name that the table has no record of
QUEUES = ["research", "production"]

node_records = st.fixed_dictionaries(
    {"gpus": st.sampled_from([0, 4, 8, 8, 16]), "schedulable": st.booleans()}
)
pods = st.lists(
    st.fixed_dictionaries(
        {
            "gpus": st.sampled_from([1, 2, 4, 8]),
            "node": st.one_of(st.none(), st.sampled_from([*NODES, GHOST])),
            "terminating": st.booleans(),
        }
    ),
    min_size=1,
    max_size=4,
)
jobs = st.lists(
    st.fixed_dictionaries(
        {
            "queue": st.sampled_from(QUEUES),
            "min_member": st.one_of(st.none(), st.integers(1, 4)),
            "pods": pods,
            "suspended": st.booleans(),
        }
    ),
    min_size=1,
    max_size=7,
)
clusters = st.fixed_dictionaries(
    {
        "nodes": st.dictionaries(st.sampled_from(NODES), node_records, min_size=1),
        "jobs": jobs,
        "capability": st.one_of(st.none(), st.integers(0, 40)),
        "reservations": st.lists(
            st.tuples(
                st.integers(0, 8),  # whose: a job of the cluster, or one not in it
                st.dictionaries(st.sampled_from(NODES), st.integers(1, 16), max_size=3),
                st.booleans(),  # expired
            ),
            max_size=3,
        ),
        "held": st.dictionaries(st.sampled_from(NODES), st.integers(1, 8), max_size=2),
        "written": st.dictionaries(
            st.sampled_from([*NODES, GHOST]), st.one_of(st.none(), node_records), max_size=2
        ),
    }
)


def table(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The decider's records for ``spec``, and node records a step writes over them."""
    records: dict[str, Any] = {}
    for name, facts in spec["nodes"].items():
        records[NODE + name] = NodeRecord(**facts).dump()
    records[QUEUE + "research"] = QueueRecord(
        weight=1, capability=spec["capability"], guarantee=0, reclaimable=True
    ).dump()  # production has no record: the snapshot's default queue, no capability
    for j, job in enumerate(spec["jobs"]):
        name = f"job-{j}"
        records[f"{GROUP}lab/{name}-pg"] = GroupRecord(
            namespace="lab", job=name, queue=job["queue"], min_member=job["min_member"],
            phase="Pending", unschedulable=False, created_at=NOW - 600,
        ).dump()  # fmt: skip
        for p, pod in enumerate(job["pods"]):
            records[f"{POD}lab/{name}-worker-{p}"] = PodRecord(
                namespace="lab", job=name, group=f"{name}-pg", gpus=pod["gpus"],
                node=pod["node"], phase="Running" if pod["node"] else "Pending",
                terminating=pod["terminating"] and pod["node"] is not None,
                unschedulable=False,
            ).dump()  # fmt: skip
        if job["suspended"]:
            records[f"{SUSPENDED}lab/{name}"] = SuspendedRecord(
                since=NOW - 300, decision="d"
            ).dump()
    for r, (whose, nodes, expired) in enumerate(spec["reservations"]):
        records[f"{RESERVATION}lab/job-{whose}"] = ReservationRecord(
            nodes=nodes, until=NOW - 1 if expired else NOW + 60 + r
        ).dump()
    written = {
        NODE + name: None if facts is None else NodeRecord(**facts).dump()
        for name, facts in spec["written"].items()
    }
    return records, written


def pod_record(job: str, gpus: int, node: str | None = None) -> dict[str, Any]:
    """A pod of ``lab/<job>`` as the decider stores it (its job label names the job)."""
    return PodRecord(
        namespace="lab", job=job, group=None, gpus=gpus, node=node,
        phase="Running" if node else "Pending", terminating=False, unschedulable=False,
    ).dump()  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(clusters)
def test_the_free_gpus_per_node_answer_as_the_snapshot_does(spec: dict[str, Any]) -> None:
    same_answers_as_the_snapshot(spec)


def same_answers_as_the_snapshot(spec: dict[str, Any]) -> None:
    """For every job of ``spec`` with pods, ``FreeCapacity.room`` answers as its snapshot."""
    config = ControllerConfig()
    base, written = table(spec)
    index = RecordIndex.build(base, config)
    assert index.free is not None
    records = Overlay(base, written)
    views = index.views()
    cluster_gpus = sum(r["gpus"] for k, r in records.items() if k.startswith(NODE))
    capabilities = cluster.queues_of(records, config, cluster_gpus)
    held = spec["held"]
    for view in views.values():
        if not view.pods:
            continue  # the resume pass skips a job with nothing to place
        snapshot = cluster.snapshot(records, views, view.name, NOW, config, held=held)
        queue = capabilities.get(view.queue)
        room = index.free.room(
            view,
            reservations=records.typed_prefix(RESERVATION, ReservationRecord),
            now=NOW,
            held=held,
            written={k[len(NODE) :]: node_facts(v) for k, v in written.items()},
            capability=None if queue is None else queue.capability.gpu,
            need=cluster.gang_gpus(view),
        )
        assert room.could_place == could_place_on_free_gpus(snapshot, view.name), view.name
        assert room.free == cluster.free_gpus(snapshot), view.name
        assert dict(room.hold) == cluster.hold_for(snapshot, view), view.name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from([*NODES, GHOST])), max_size=12))
def test_the_buckets_follow_pods_that_come_and_go(moves: list[tuple[int, str]]) -> None:
    """Pods bound and deleted one by one: the index kept across them answers as one
    built afresh (its buckets updated node by node, not rebuilt), whether the view
    changes are counted when asked or as they come (past the pending limit)."""
    for limit in (free_capacity._PENDING_LIMIT, 0):
        with patch.object(free_capacity, "_PENDING_LIMIT", limit):
            follow(moves)


def follow(moves: list[tuple[int, str]]) -> None:
    base: dict[str, Any] = {NODE + n: NodeRecord(gpus=8, schedulable=True).dump() for n in NODES}
    base[f"{SUSPENDED}lab/wide"] = SuspendedRecord(since=NOW - 300, decision="d").dump()
    for p in range(3):
        base[f"{POD}lab/wide-worker-{p}"] = pod_record("wide", 8)
    config = ControllerConfig()
    carried = RecordIndex.build(base, config)
    assert carried.free is not None
    for k, (slot, on) in enumerate(moves):
        key = f"{POD}lab/filler-worker-{slot}"
        value = None
        if key not in base:
            value = pod_record(f"filler-{slot % 3}", 1 + slot % 4, on)
        writes = {key: value}
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
        carried.apply(writes, base)
        rebuilt = RecordIndex.build(base, config)
        assert rebuilt.free is not None
        view = carried.views()["lab/wide"]
        ask = {"reservations": [], "now": NOW, "held": {}, "written": {}, "capability": None,
               "need": 24}  # fmt: skip
        assert carried.free.room(view, **ask) == rebuilt.free.room(view, **ask), f"move {k}"
        assert carried.free.state() == rebuilt.free.state()


def test_a_parked_gang_costs_no_snapshot_while_pods_come_and_go(builds: Builds) -> None:  # noqa: F811
    """A gang of whole nodes, suspended on a full cluster: small pods bound and deleted
    here and there free GPUs, never a whole node. The decider that builds the snapshot
    builds one per input to learn that; with the free GPUs per node it builds none, and
    every outcome is byte-identical."""
    config = ControllerConfig()
    records: dict[str, Any] = {}
    for n in NODES:
        records[NODE + n] = NodeRecord(gpus=8, schedulable=True).dump()
        records[f"{POD}lab/fill-{n}-worker-0"] = pod_record(f"fill-{n}", 7, n)
    records[f"{SUSPENDED}lab/wide"] = SuspendedRecord(since=NOW - 3600, decision="d").dump()
    for p in range(2):
        records[f"{POD}lab/wide-worker-{p}"] = pod_record("wide", 8)
    carried = RecordIndex.build(records, config)
    assert carried.views()["lab/wide"].state is JobState.SUSPENDED
    messages: list[Input] = []
    for k in range(12):
        at = NOW + 30 * k
        small = a_pod(
            f"small-{k}", namespace="lab", node=NODES[k % len(NODES)], gpus=1,
            labels={JOB_NAME: f"small-{k}"},
        )  # fmt: skip
        added, gone = event(small, at), event(small, at + 10, KubeEventType.DELETED)
        messages += [added, gone, Tick(at=at + 20)]
    fast = reference = 0
    for k, message in enumerate(messages):
        origin = f"in/0/{k}"
        before = len(builds)
        expected = step(
            records, message, origin, config,
            index=RecordIndex.build(records, config, free_capacity=False),
        )  # fmt: skip
        reference += len(builds) - before
        before = len(builds)
        outcome = step(records, message, origin, config, index=carried)
        fast += len(builds) - before
        assert outcome_digest(outcome) == outcome_digest(expected), f"input {k}: {message}"
        apply_writes(records, outcome)
        carried.apply(outcome.writes, records)
    assert reference >= len(messages)
    assert fast == 0


def test_a_node_record_the_step_writes_is_read_before_the_table_holds_it() -> None:
    """A node uncordoned in this very step: its GPUs count for the resume at once."""
    config = ControllerConfig()
    records: dict[str, Any] = {
        NODE + "gpu-00": NodeRecord(gpus=8, schedulable=False).dump(),
        f"{SUSPENDED}lab/wide": SuspendedRecord(since=NOW - 3600, decision="d").dump(),
        f"{POD}lab/wide-worker-0": pod_record("wide", 8),
    }
    index = RecordIndex.build(records, config)
    message = event(a_gpu_node("gpu-00", gpus=8), NOW + 5, KubeEventType.MODIFIED)
    outcome = step(records, message, "in/0/1", config, index=index)
    assert [c.job for c in outcome.commands] == ["lab/wide"]


def _one_gang(
    nodes: dict[str, tuple[int, list[tuple[int, bool]]]], wide: list[int]
) -> dict[str, Any]:
    """A cluster spec: per node its GPUs and its pods (GPUs, leaving); and a suspended
    gang of ``wide`` GPUs per pod."""
    placed = [
        {"queue": "research", "min_member": None, "suspended": False,
         "pods": [{"gpus": g, "node": name, "terminating": leaving}]}
        for name, (_, pods) in nodes.items()
        for g, leaving in pods
    ]  # fmt: skip
    gang = {
        "queue": "production", "min_member": None, "suspended": True,
        "pods": [{"gpus": g, "node": None, "terminating": False} for g in wide],
    }  # fmt: skip
    return {
        "nodes": {name: {"gpus": gpus, "schedulable": True} for name, (gpus, _) in nodes.items()},
        "jobs": [*placed, gang],
        "capability": None,
        "reservations": [],
        "held": {},
        "written": {},
    }


def test_a_full_node_counts_towards_what_a_gang_could_ever_run_on() -> None:
    """gpu-00 is full, gpu-01 has 4 free: a gang of 4 + 8 could run once gpu-00 empties,
    so it holds gpu-01's 4 (the snapshot closes only an overcommitted node)."""
    spec = _one_gang({"gpu-00": (8, [(8, False)]), "gpu-01": (8, [(4, False)])}, [8, 4])
    same_answers_as_the_snapshot(spec)
    index = RecordIndex.build(table(spec)[0], ControllerConfig())
    assert index.free is not None
    view = index.views()[f"lab/job-{len(spec['jobs']) - 1}"]
    ask: dict[str, Any] = {"reservations": [], "now": NOW, "held": {}, "written": {},
                           "capability": None}  # fmt: skip
    assert dict(index.free.room(view, need=12, **ask).hold) == {"gpu-01": 4}


def test_a_nomination_is_served_first_by_the_pods_leaving_its_node() -> None:
    """Another preemptor's 8 GPUs nominated on gpu-00 come out of the 8 its leaving pod
    will free: the 8 free beside them stay free for the suspended job."""
    spec = _one_gang({"gpu-00": (16, [(8, True)])}, [8])
    spec["reservations"] = [(99, {"gpu-00": 8}, False)]
    same_answers_as_the_snapshot(spec)
    base, _ = table(spec)
    index = RecordIndex.build(base, ControllerConfig())
    assert index.free is not None
    view = index.views()[f"lab/job-{len(spec['jobs']) - 1}"]
    room = index.free.room(
        view,
        reservations=[("lab/job-99", ReservationRecord(nodes={"gpu-00": 8}, until=NOW + 60))],
        now=NOW,
        held={},
        written={},
        capability=None,
        need=8,
    )
    assert room.free == 8
    assert room.could_place


def test_what_waits_for_a_resume_check_stays_bounded_while_none_comes() -> None:
    """Weeks without a suspended job: nodes that come and go under new names (spot
    capacity) and jobs that start and end must not pile up waiting to be counted."""
    config = ControllerConfig()
    records: dict[str, Any] = {}
    index = RecordIndex.build(records, config)
    assert index.free is not None
    for k in range(3000):
        name, job = f"spot-{k}", f"lab/burst-{k}"
        created = {
            NODE + name: NodeRecord(gpus=8, schedulable=True).dump(),
            f"{POD}{job}-worker-0": pod_record(f"burst-{k}", 8, name),
        }
        records.update(created)
        index.apply(created, records)
        gone = dict.fromkeys(created)
        for key in gone:
            del records[key]
        index.apply(gone, records)
    assert index.free.held_back <= 2 * 1024
    assert index.free.state() == RecordIndex.build(records, config).free.state()  # type: ignore[union-attr]
