"""A snapshot reusing the last one's models is the snapshot built afresh (``snapshot_parts``)."""

from __future__ import annotations

from typing import Any

import pytest
from cluster_objects import node, pod
from harness import NOW, Controller, apply_writes, shared_pool
from test_decider_index import _demand_events, outcome_digest

from gpuyield.agents.controller import cluster
from gpuyield.agents.controller.decider import step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import Overlay
from gpuyield.agents.controller.snapshot_parts import SnapshotParts
from gpuyield.schemas import Snapshot
from gpuyield.schemas.messages import JobProgress


def build(c: Controller, at: float, parts: SnapshotParts | None = None) -> Snapshot:
    records = Overlay(c.records, {})
    views = cluster.jobs(records, c.config)
    return cluster.snapshot(records, views, "prod/waiting", at, c.config, parts=parts)


def test_a_job_whose_progress_changed_is_rebuilt_and_the_others_are_reused() -> None:
    c = shared_pool()
    parts = SnapshotParts()
    before = build(c, NOW, parts)
    c.feed(
        JobProgress(
            job="research/sweep-0",
            step=900,
            progress=0.6,
            first_seen_at=NOW - 3600,
            updated_at=NOW + 10,
        )
    )
    after = build(c, NOW + 10, parts)
    assert after == build(c, NOW + 10)
    sweep0, sweep1 = (after.job(f"research/sweep-{i}") for i in range(2))
    assert sweep0 is not None
    assert sweep0.progress == 0.6
    assert sweep0 is not before.job("research/sweep-0")
    assert sweep1 is before.job("research/sweep-1")


def test_a_node_whose_record_changed_is_rebuilt() -> None:
    c = shared_pool()
    parts = SnapshotParts()
    build(c, NOW, parts)
    c.change(node("gpu-03", ready=False), NOW + 5)
    after = build(c, NOW + 5, parts)
    assert after == build(c, NOW + 5)
    assert [n.name for n in after.nodes if not n.schedulable] == ["gpu-03"]


def test_a_pod_whose_name_another_namespace_shares_is_renamed_in_a_reused_snapshot() -> None:
    c = shared_pool()
    parts = SnapshotParts()
    build(c, NOW, parts)
    # a pod of another namespace named as sweep-0's first pod: both are written namespace/name
    c.add(pod("sweep-0", 0, namespace="other", node="gpu-02"), NOW + 5)
    after = build(c, NOW + 5, parts)
    assert after == build(c, NOW + 5)
    sweep0 = after.job("research/sweep-0")
    assert sweep0 is not None
    assert sweep0.pods[0].name.startswith("research/")


def test_a_restarted_worker_builds_the_models_before_its_first_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RecordIndex.warm`` (the worker calls it after building its index): the first
    plan after a restart builds only the preemptor's model, not every job's, and
    decides byte for byte as a cold index does."""
    c = shared_pool()
    built: list[str] = []
    original = cluster._job

    def counted(view: cluster.JobView, *args: Any) -> Any:
        built.append(view.name)
        return original(view, *args)

    monkeypatch.setattr(cluster, "_job", counted)
    cold = RecordIndex.build(c.records, c.config)
    warm = RecordIndex.build(c.records, c.config)
    warm.warm(c.records)
    assert set(built) == {"research/sweep-0", "research/sweep-1"}  # the jobs holding GPUs

    records = dict(c.records)
    planned = 0
    for n, message in enumerate(_demand_events("ft-llama", 2, NOW + 30)):
        expected = step(records, message, f"in/0/{n}", c.config, index=cold)
        del built[:]
        outcome = step(records, message, f"in/0/{n}", c.config, index=warm)
        assert outcome_digest(outcome) == outcome_digest(expected)
        if any(d.plan is not None for d in outcome.decisions):
            planned += 1
            assert set(built) == {"prod/ft-llama"}
        apply_writes(records, outcome)
        cold.apply(outcome.writes, records)
        warm.apply(outcome.writes, records)
    assert planned == 1


def test_a_shared_pod_name_renames_the_pods_of_the_jobs_that_share_it_and_no_others() -> None:
    c = shared_pool()
    c.add(pod("sweep-0", 0, namespace="other", node="gpu-02"), NOW + 5)
    records = Overlay(c.records, {})
    views = cluster.jobs(records, c.config)
    snap = cluster.snapshot(records, views, "prod/waiting", NOW + 5, c.config)
    renamed = {p.name for j in snap.jobs for p in j.pods if "/" in p.name}
    assert renamed == {"research/sweep-0-worker-0", "other/sweep-0-worker-0"}
    sweep1 = snap.job("research/sweep-1")
    assert sweep1 is not None
    assert sweep1.pods == views["research/sweep-1"].pods
