"""A snapshot reusing the last one's models is the snapshot built afresh (``snapshot_parts``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from cluster_objects import node, pod
from harness import NOW, Controller, apply_writes, production_demand, shared_pool
from hypothesis import given, settings
from hypothesis import strategies as st
from test_decider_index import _demand_events, outcome_digest

from gpuyield.agents.controller import cluster
from gpuyield.agents.controller.decider import step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.records import (
    EVICTIONS,
    NODE,
    PROGRESS,
    EvictionsRecord,
    Overlay,
    ProgressRecord,
)
from gpuyield.agents.controller.snapshot_parts import PodTotals, SnapshotParts
from gpuyield.agents.planner import plan
from gpuyield.agents.planner.session import PlanningSession
from gpuyield.schemas import Pod, PodPhase, Snapshot
from gpuyield.schemas.messages import JobProgress
from gpuyield.schemas.snapshot import kept_sums


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


def job_models_built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the jobs whose snapshot model ``cluster._job`` builds from now on."""
    built: list[str] = []
    original = cluster._job

    def counted(view: cluster.JobView, *args: Any) -> Any:
        built.append(view.name)
        return original(view, *args)

    monkeypatch.setattr(cluster, "_job", counted)
    return built


def test_a_restarted_worker_builds_the_models_before_its_first_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RecordIndex.warm`` (the worker calls it after building its index): the first
    plan after a restart builds only the preemptor's model, not every job's, and
    decides byte for byte as a cold index does."""
    c = shared_pool()
    built = job_models_built(monkeypatch)
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


def test_a_steps_own_progress_write_is_seen_and_forgotten_when_the_step_is_dropped() -> None:
    """The index's feed names the jobs whose records it followed; a step's own writes are
    not followed until applied, so the snapshot makes their jobs again, now and next time."""
    c = shared_pool()
    index = RecordIndex.build(c.records, c.config)
    first = cluster.snapshot(
        index.reader(c.records), index.views(), "", NOW, c.config, parts=index.parts
    )
    progress = ProgressRecord(
        job="research/sweep-0", step=900, progress=0.6, first_seen_at=NOW - 3600, updated_at=NOW
    ).dump()
    written = Overlay(c.records, {PROGRESS + "research/sweep-0": progress}, index)
    during = cluster.snapshot(written, index.views(), "", NOW, c.config, parts=index.parts)
    assert during == cluster.snapshot(
        Overlay(c.records, {PROGRESS + "research/sweep-0": progress}),
        cluster.jobs(Overlay(c.records, {}), c.config),
        "",
        NOW,
        c.config,
    )
    assert during != first
    dropped = cluster.snapshot(
        index.reader(c.records), index.views(), "", NOW, c.config, parts=index.parts
    )
    assert dropped == first


def test_an_eviction_still_to_come_enters_the_snapshot_once_its_time_is_past() -> None:
    c = shared_pool()
    index = RecordIndex.build(c.records, c.config)
    evictions = {EVICTIONS + "research/sweep-0": EvictionsRecord(at=(NOW - 60, NOW + 60)).dump()}
    records = {**c.records, **evictions}
    index.apply(evictions, records)

    def evicted_at(at: float) -> tuple[float, ...]:
        snap = cluster.snapshot(
            index.reader(records), index.views(), "", at, c.config, parts=index.parts
        )
        job = snap.job("research/sweep-0")
        assert job is not None
        return job.evictions

    assert evicted_at(NOW) == (NOW - 60,)
    assert evicted_at(NOW + 30) == (NOW - 60,)
    assert evicted_at(NOW + 60) == (NOW - 60, NOW + 60)


views_of = st.dictionaries(
    st.sampled_from([f"ns/job-{i}" for i in range(6)]),
    st.lists(
        st.tuples(
            st.sampled_from(["w-0", "w-1", "w-2"]),
            st.sampled_from([None, "n-0", "n-1", "n-2"]),
            st.sampled_from([0, 1, 8]),
            st.booleans(),
        ),
        max_size=4,
    ),
    max_size=6,
)


def _views(spec: dict[str, list[tuple[str, str | None, int, bool]]]) -> dict[str, FakeView]:
    return {
        name: FakeView(
            name,
            tuple(
                Pod(name=p, node=n, gpus=g, phase=PodPhase.RUNNING)
                for p, n, g, lv in pods
                if not lv
            ),
            tuple(
                Pod(name=p, node=n, gpus=g, phase=PodPhase.RUNNING) for p, n, g, lv in pods if lv
            ),
            "q-" + name[-1],
        )
        for name, pods in spec.items()
    }


@dataclass(frozen=True)
class FakeView:
    name: str
    pods: tuple[Pod, ...]
    leaving: tuple[Pod, ...]
    queue: str


def _totals(totals: PodTotals) -> tuple[object, ...]:
    return totals.held, totals.leaving, totals.placed, totals.shared, totals.queues


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(views_of, st.booleans()), min_size=1, max_size=6))
def test_pod_totals_followed_view_by_view_equal_the_totals_afresh(
    rounds: list[tuple[dict[str, list[tuple[str, str | None, int, bool]]], bool]],
) -> None:
    kept = PodTotals()
    last: dict[str, FakeView] = {}
    for spec, told in rounds:
        views = _views(spec)
        # Unchanged views stay the very objects, as the index keeps them.
        views = {
            name: last[name] if last.get(name) == view else view for name, view in views.items()
        }
        changed = {n for n in views.keys() | last.keys() if last.get(n) is not views.get(n)}
        kept.update(views, changed if told else None)
        afresh = PodTotals()
        afresh.update(views)
        assert _totals(kept) == _totals(afresh)
        last = views


@pytest.mark.parametrize("preemptor", [None, "prod/ft-llama"])
def test_a_planning_session_from_the_decider_s_kept_sums_is_the_session_walked(
    preemptor: str | None,
) -> None:
    """The decider's snapshot carries the sums its parts keep (``kept_sums``); a planner
    session opened on it reads them instead of walking every job, and is the session
    opened on the same snapshot without them."""
    c = shared_pool()
    production_demand(c, "ft-llama", pods=2)
    index = RecordIndex.build(c.records, c.config)
    kept = cluster.snapshot(
        index.reader(c.records), index.views(), preemptor or "", NOW, c.config, parts=index.parts
    )
    walked = Snapshot.model_validate_json(kept.model_dump_json())
    assert kept_sums(kept) is not None
    assert kept_sums(walked) is None
    one, two = PlanningSession.open(kept, preemptor), PlanningSession.open(walked, preemptor)
    assert (one.holders, one.usage, one.node_free, one.free_buckets, one.to_place) == (
        two.holders,
        two.usage,
        two.node_free,
        two.free_buckets,
        two.to_place,
    )
    assert one.holders == len(one.holding) == len(two.holding) > 0
    assert plan(kept, preemptor, explain=True) == plan(walked, preemptor, explain=True)


def test_a_part_made_again_long_after_its_model_was_built_still_reuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the index's feed, a snapshot makes only some jobs' models; when every part is
    made again (a node record went: some pods are on a node the snapshot leaves out), the
    jobs whose pods did not change keep their models, built snapshots before."""
    c = shared_pool()
    records = dict(c.records)
    index = RecordIndex.build(records, c.config)

    def snap(at: float) -> Snapshot:
        return cluster.snapshot(
            index.reader(records), index.views(), "", at, c.config, parts=index.parts
        )

    for second in range(3):
        snap(NOW + second)
    built = job_models_built(monkeypatch)
    gone = {NODE + "gpu-03": None}
    del records[NODE + "gpu-03"]
    index.apply(gone, records)
    after = snap(NOW + 3)
    made = set(built)
    assert after == cluster.snapshot(
        Overlay(records, {}), cluster.jobs(Overlay(records, {}), c.config), "", NOW + 3, c.config
    )
    on_it = {v.name for v in index.views().values() if any(p.node == "gpu-03" for p in v.pods)}
    assert on_it
    assert made == on_it  # its pods there are left out: only these models change
