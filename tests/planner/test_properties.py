"""Properties every plan has, whatever the cluster (contract rules 1-5 and readings).

Each property is checked on small random clusters (``strategies.any_cases``).
The facts a property needs (W_eff, cooldown, queue usage, ...) come from the
brute-force reference, which is written from the contract, not from the planner.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from builders import a_job, a_node, a_snapshot
from hypothesis import given, settings

from gpuyield.agents.planner import UnknownPreemptor, plan
from gpuyield.agents.planner.session import could_place_on_free_gpus
from gpuyield.schemas import Job, Plan, Snapshot
from planner import reference as ref
from planner.strategies import Case, any_cases, examples

FEW = settings(max_examples=examples(60), deadline=None)
SOME = settings(max_examples=examples(150), deadline=None)


def planned(case: Case) -> tuple[Snapshot, Plan]:
    return case.snapshot, plan(case.snapshot, case.preemptor)


def context(snapshot: Snapshot, result: Plan) -> str:
    return f"\nplan: {result.model_dump_json(indent=1)}\nsnapshot: {snapshot.model_dump_json()}"


def victim_jobs(snapshot: Snapshot, result: Plan) -> list[Job]:
    jobs = []
    for victim in result.victims:
        job = snapshot.job(victim.job)
        assert job is not None, f"victim {victim.job!r} is not a job of the snapshot"
        jobs.append(job)
    return jobs


def evicted_pods(result: Plan) -> set[str]:
    return {pod for victim in result.victims for pod in victim.pods}


def usage_after(snapshot: Snapshot, result: Plan, preemptor: Job) -> dict[str, int]:
    """Each queue's usage after the plan (reading 5): evicted pods gone, pods placed."""
    gone = evicted_pods(result)
    held: dict[str, int] = {}
    for job in snapshot.jobs:
        for pod in ref.holding_pods(job):
            if pod.name not in gone:
                held[job.queue] = held.get(job.queue, 0) + pod.gpus
    placed = sum(p.gpus for p in ref.pods_to_place(preemptor))
    held[preemptor.queue] = held.get(preemptor.queue, 0) + placed
    return ref.queue_usage(snapshot, held)


def usage_before(snapshot: Snapshot) -> dict[str, int]:
    held: dict[str, int] = {}
    for job in snapshot.jobs:
        held[job.queue] = held.get(job.queue, 0) + sum(p.gpus for p in ref.holding_pods(job))
    return ref.queue_usage(snapshot, held)


def the_preemptor(snapshot: Snapshot, result: Plan) -> Job:
    assert result.preemptor is not None
    job = snapshot.job(result.preemptor)
    assert job is not None
    return job


# --------------------------------------------------------------------------- rule 1


def _never_a_victim(
    predicate: Callable[[Job, Snapshot], bool], what: str
) -> Callable[[Case], None]:
    def check(case: Case) -> None:
        snapshot, result = planned(case)
        for job in victim_jobs(snapshot, result):
            assert not predicate(job, snapshot), f"{job.name} {what}" + context(snapshot, result)

    return check


@SOME
@given(any_cases())
def test_a_victim_is_never_a_job_that_is_not_preemptable(case: Case) -> None:
    _never_a_victim(lambda job, _: not job.preemptable, "is not preemptable")(case)


@SOME
@given(any_cases())
def test_a_victim_is_never_in_its_cooldown(case: Case) -> None:
    _never_a_victim(ref.in_cooldown, "is in its cooldown")(case)


@SOME
@given(any_cases())
def test_a_victim_is_never_at_its_eviction_limit(case: Case) -> None:
    _never_a_victim(ref.at_eviction_limit, "is at its eviction limit")(case)


@SOME
@given(any_cases())
def test_the_preemptor_and_jobs_holding_no_gpus_are_never_victims(case: Case) -> None:
    snapshot, result = planned(case)
    for job in victim_jobs(snapshot, result):
        assert job.name != result.preemptor, "the preemptor evicts itself" + context(
            snapshot, result
        )
        assert ref.holding_pods(job), f"{job.name} holds no GPUs" + context(snapshot, result)


# --------------------------------------------------------------------------- rules 2, 3


@SOME
@given(any_cases())
def test_a_same_queue_victim_always_weighs_strictly_less_than_the_preemptor(case: Case) -> None:
    snapshot, result = planned(case)
    if not result.victims:
        return
    pre = the_preemptor(snapshot, result)
    w_pre = ref.preemptor_weight(pre, snapshot)
    for job in victim_jobs(snapshot, result):
        if job.queue == pre.queue:
            w = ref.w_eff(job, snapshot)
            assert w < w_pre, f"{job.name}: W_eff {w} >= {w_pre}" + context(snapshot, result)


@SOME
@given(any_cases())
def test_a_victim_is_never_in_an_ancestor_or_a_descendant_of_the_preemptors_queue(
    case: Case,
) -> None:
    snapshot, result = planned(case)
    if not result.victims:
        return
    pre = the_preemptor(snapshot, result)
    for job in victim_jobs(snapshot, result):
        kind = ref.relation(snapshot, pre.queue, job.queue).kind
        assert kind != "kin", f"{job.name} in {job.queue}" + context(snapshot, result)


@SOME
@given(any_cases())
def test_reclaim_keeps_every_queue_on_both_branches_on_its_side_of_its_guarantee(
    case: Case,
) -> None:
    """Reading 6 / decision 11, per cross-queue victim with its own lowest common ancestor."""
    snapshot, result = planned(case)
    if not result.victims:
        return
    pre = the_preemptor(snapshot, result)
    queues = {q.name: q for q in snapshot.queues}
    before, after = usage_before(snapshot), usage_after(snapshot, result, pre)
    for job in victim_jobs(snapshot, result):
        rel = ref.relation(snapshot, pre.queue, job.queue)
        if rel.kind != "reclaim":
            continue
        for q in rel.q_branch:
            assert after[q] <= queues[q].guarantee.gpu, (
                f"{job.name}: preemptor's branch queue {q} ends at {after[q]} GPUs, "
                f"above its guarantee" + context(snapshot, result)
            )
        for v in rel.v_branch:
            assert queues[v].reclaimable, f"{job.name}: {v} not reclaimable" + context(
                snapshot, result
            )
            assert before[v] > queues[v].guarantee.gpu, (
                f"{job.name}: {v} was not above its guarantee" + context(snapshot, result)
            )
            assert after[v] >= queues[v].guarantee.gpu, (
                f"{job.name}: {v} taken below its guarantee" + context(snapshot, result)
            )


@SOME
@given(any_cases())
def test_a_victim_is_protected_exactly_when_it_is_a_reclaim_victim_not_lighter_than_the_preemptor(
    case: Case,
) -> None:
    snapshot, result = planned(case)
    if not result.victims:
        return
    pre = the_preemptor(snapshot, result)
    w_pre = ref.preemptor_weight(pre, snapshot)
    for victim, job in zip(result.victims, victim_jobs(snapshot, result), strict=True):
        reclaim = ref.relation(snapshot, pre.queue, job.queue).kind == "reclaim"
        expected = reclaim and ref.w_eff(job, snapshot) >= w_pre
        assert victim.protected == expected, victim.job + context(snapshot, result)
    assert result.objective.protected_victims == sum(v.protected for v in result.victims)


# --------------------------------------------------------------------------- rule 4


@SOME
@given(any_cases())
def test_a_victim_job_keeps_none_or_at_least_min_available_of_its_pods_holding_gpus(
    case: Case,
) -> None:
    snapshot, result = planned(case)
    for victim, job in zip(result.victims, victim_jobs(snapshot, result), strict=True):
        holding = {p.name for p in ref.holding_pods(job)}
        evicted = set(victim.pods)
        assert evicted, f"{job.name} is a victim with no pod evicted" + context(snapshot, result)
        assert evicted <= holding, (
            f"{job.name}: evicts {sorted(evicted - holding)}, which hold no GPUs"
            + context(snapshot, result)
        )
        left = len(holding - evicted)
        assert left == 0 or left >= ref.gang_min(job), (
            f"{job.name}: {left} pods left, min_available {ref.gang_min(job)}"
            + context(snapshot, result)
        )
        assert victim.whole_job == (left == 0), job.name + context(snapshot, result)


# --------------------------------------------------------------------------- rule 5


@SOME
@given(any_cases())
def test_a_feasible_plan_places_every_pod_on_a_schedulable_node_with_room_for_it(
    case: Case,
) -> None:
    snapshot, result = planned(case)
    if not result.feasible:
        return
    pre = the_preemptor(snapshot, result)
    to_place = {p.name: p.gpus for p in ref.pods_to_place(pre)}
    assert set(result.placement) == set(to_place), "placement is not the pods to place" + context(
        snapshot, result
    )
    nodes = {n.name: n for n in snapshot.nodes}
    gone = evicted_pods(result)
    used = dict.fromkeys(nodes, 0)
    for job in snapshot.jobs:
        for pod in ref.holding_pods(job):
            if pod.name not in gone and pod.node is not None:
                used[pod.node] += pod.gpus
    for pod_name, node_name in result.placement.items():
        where = f"{pod_name} on {node_name}"
        assert node_name in nodes, f"{where}: unknown node" + context(snapshot, result)
        assert nodes[node_name].schedulable, f"{where}: unschedulable" + context(snapshot, result)
        used[node_name] += to_place[pod_name]
    for name, node in nodes.items():
        assert used[name] <= node.gpus, f"{name} over-committed" + context(snapshot, result)


@SOME
@given(any_cases())
def test_pods_of_the_same_size_are_placed_in_name_order_on_nodes_in_node_order(
    case: Case,
) -> None:
    """Identical pods are interchangeable: the plan states their nodes one way, the readable one."""
    snapshot, result = planned(case)
    pre = the_preemptor(snapshot, result)
    order = {n.name: i for i, n in enumerate(snapshot.nodes)}
    by_size: dict[int, list[str]] = {}
    for pod in sorted(ref.pods_to_place(pre), key=lambda p: p.name):
        if pod.name in result.placement:
            by_size.setdefault(pod.gpus, []).append(result.placement[pod.name])
    for gpus, nodes in by_size.items():
        ranks = [order[node] for node in nodes]
        assert ranks == sorted(ranks), f"{gpus}-GPU pods out of node order" + context(
            snapshot, result
        )


@SOME
@given(any_cases())
def test_the_preemptors_queue_and_its_ancestors_stay_within_their_capability(
    case: Case,
) -> None:
    """Rule 5, reading 6 and decision 10 (whatever the action, 'none' included)."""
    snapshot, result = planned(case)
    if not result.feasible or result.preemptor is None:
        return
    pre = the_preemptor(snapshot, result)
    queues = {q.name: q for q in snapshot.queues}
    after = usage_after(snapshot, result, pre)
    for q in ref.queue_chain(snapshot, pre.queue):
        cap = queues[q].capability.gpu
        assert cap is None or after[q] <= cap, f"{q}: {after[q]} > {cap}" + context(
            snapshot, result
        )


@SOME
@given(any_cases())
def test_an_infeasible_plan_evicts_nothing_and_places_nothing(case: Case) -> None:
    snapshot, result = planned(case)
    if result.feasible:
        return
    assert result.victims == (), context(snapshot, result)
    assert result.placement == {}, context(snapshot, result)
    assert result.action == "none", context(snapshot, result)
    assert result.lost_gpu_seconds == 0.0, context(snapshot, result)


# --------------------------------------------------------------------------- plan shape


@SOME
@given(any_cases())
def test_the_action_names_where_the_victims_come_from(case: Case) -> None:
    snapshot, result = planned(case)
    pre = the_preemptor(snapshot, result)
    kinds = {job.queue == pre.queue for job in victim_jobs(snapshot, result)}
    expected = {frozenset(): "none", frozenset({True}): "preempt", frozenset({False}): "reclaim"}
    assert result.action == expected.get(frozenset(kinds), "mixed"), context(snapshot, result)


@SOME
@given(any_cases())
def test_the_victims_figures_add_up_to_the_plans(case: Case) -> None:
    snapshot, result = planned(case)
    pods = {p.name: p for j in snapshot.jobs for p in j.pods}
    for victim, job in zip(result.victims, victim_jobs(snapshot, result), strict=True):
        assert victim.queue == job.queue, context(snapshot, result)
        assert victim.gpus == sum(pods[p].gpus for p in victim.pods), context(snapshot, result)
        lost = sum(ref.pod_lost_work(pods[p], job, snapshot.now) for p in victim.pods)
        assert victim.lost_gpu_seconds == pytest.approx(lost, rel=1e-9, abs=1e-6)
        assert victim.w_eff == pytest.approx(ref.w_eff(job, snapshot), rel=1e-9, abs=1e-9)
        assert victim.grace_s == snapshot.policy.grace_s
    total = sum(v.lost_gpu_seconds for v in result.victims)
    assert result.lost_gpu_seconds == pytest.approx(total, rel=1e-9, abs=1e-6)
    assert result.objective.lost_gpu_seconds == pytest.approx(total, rel=1e-9, abs=1e-6)
    assert result.objective.victim_jobs == len(result.victims)
    assert len({v.job for v in result.victims}) == len(result.victims), "a job listed twice"


# --------------------------------------------------------------------------- purity


@FEW
@given(any_cases())
def test_planning_does_not_modify_the_snapshot(case: Case) -> None:
    before = case.snapshot.model_dump(mode="json")
    plan(case.snapshot, case.preemptor)
    assert case.snapshot.model_dump(mode="json") == before


@FEW
@given(any_cases())
def test_a_deep_copy_of_the_snapshot_gives_the_same_plan(case: Case) -> None:
    twin = copy.deepcopy(case.snapshot)
    reread = Snapshot.model_validate_json(case.snapshot.model_dump_json())
    first = plan(case.snapshot, case.preemptor).model_dump_json()
    assert plan(twin, case.preemptor).model_dump_json() == first
    assert plan(reread, case.preemptor).model_dump_json() == first


@FEW
@given(any_cases())
def test_the_same_snapshot_always_gives_byte_identical_plans(case: Case) -> None:
    first = plan(case.snapshot, case.preemptor).model_dump_json()
    assert plan(case.snapshot, case.preemptor).model_dump_json() == first


@FEW
@given(any_cases())
def test_the_plan_survives_a_round_trip_through_json(case: Case) -> None:
    result = plan(case.snapshot, case.preemptor)
    assert Plan.model_validate_json(result.model_dump_json()) == result


# --------------------------------------------------------------------------- preemptor


@FEW
@given(any_cases())
def test_without_a_name_the_preemptor_is_the_pending_job_the_contract_chooses(
    case: Case,
) -> None:
    result = plan(case.snapshot)
    expected = ref.choose_preemptor(case.snapshot, None)
    assert result.preemptor == (expected.name if expected else None), context(case.snapshot, result)


def test_an_unknown_preemptor_is_a_value_error_naming_it() -> None:
    snapshot = a_snapshot(nodes=[a_node("n1")], jobs=[a_job("a").pending(pods=1, gpus=1)])
    with pytest.raises(UnknownPreemptor, match="nobody"):
        plan(snapshot, "nobody")
    assert issubclass(UnknownPreemptor, ValueError)


def test_without_any_pending_job_the_plan_has_no_preemptor_and_is_feasible() -> None:
    """Decision 6."""
    snapshot = a_snapshot(
        nodes=[a_node("n1")],
        jobs=[a_job("a").running(pods=[("n1", 8)])],
    )
    result = plan(snapshot)
    assert result.preemptor is None
    assert result.action == "none"
    assert result.feasible
    assert result.victims == ()


# --------------------------------------------------------------------------- the free-GPU pre-check


@SOME
@given(any_cases())
def test_a_plan_without_victims_places_pods_only_where_the_free_gpus_could_hold_them(
    case: Case,
) -> None:
    """``could_place_on_free_gpus`` is a necessary condition: the decider skips the
    planner for resumes on its word, so it may never say no to a plan with no victim.

    Checked on the case as drawn (a full cluster, mostly) and with every other
    job gone (room everywhere, so plans without victims are common).
    """
    alone = tuple(j for j in case.snapshot.jobs if j.name == case.preemptor)
    for snapshot in (case.snapshot, case.snapshot.model_copy(update={"jobs": alone})):
        result = plan(snapshot, case.preemptor)
        if result.feasible and not result.victims and result.placement:
            assert could_place_on_free_gpus(snapshot, case.preemptor), context(snapshot, result)
