"""Kubernetes Events from the decisions: why a Volcano Job yielded, was spared, or resumed."""

from __future__ import annotations

from harness import NOW, production_demand, shared_pool

from gpuyield.agents.controller.job_events import (
    GRACEFUL_YIELD,
    NOTE_LIMIT,
    RESUMED,
    SPARED,
    closest_spared,
    decision_events,
    micro_time,
)
from gpuyield.schemas.messages import RoundOutcome
from gpuyield.schemas.plan import Candidate

UIDS = {"research/sweep-0": "uid-sweep-0", "research/sweep-1": "uid-sweep-1"}


def test_a_yield_writes_graceful_yield_on_the_victim_with_the_preemptor_and_the_rule() -> None:
    c = shared_pool()
    production_demand(c)
    [decision] = c.decisions
    victim = decision.plan.victims[0]
    events = decision_events([decision], UIDS.get, "worker-0")
    [yielded] = [e for e in events if e["reason"] == GRACEFUL_YIELD]
    namespace, _, name = victim.job.partition("/")
    assert yielded["regarding"] == {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "namespace": namespace,
        "name": name,
        "uid": UIDS[victim.job],
    }
    assert yielded["metadata"]["namespace"] == namespace
    assert yielded["note"].startswith("yields to prod/ft-llama (preemptor); rule: ")
    assert victim.reason in yielded["note"]
    assert f"{victim.lost_gpu_seconds:.0f} GPU-seconds lost" in yielded["note"]
    assert yielded["related"]["name"] == "ft-llama"
    assert yielded["eventTime"] == micro_time(decision.decided_at)
    assert yielded["reportingInstance"] == "worker-0"
    assert yielded["type"] == "Normal"


def test_the_candidate_the_plan_kept_gets_spared_with_its_rule() -> None:
    c = shared_pool()
    production_demand(c)
    [decision] = c.decisions
    spared_jobs = {x.job for x in decision.plan.candidates if x.outcome == "spared"}
    assert spared_jobs == {"research/sweep-1"}
    events = decision_events([decision], UIDS.get, "worker-0")
    spared = [e for e in events if e["reason"] == SPARED]
    assert {f"{e['regarding']['namespace']}/{e['regarding']['name']}" for e in spared} == (
        spared_jobs
    )
    assert all(
        "spared when prod/ft-llama (preemptor) needed GPUs; rule: " in e["note"] for e in spared
    )


def closeness(candidate: Candidate) -> tuple[bool, float, str]:
    """The order the planner's objective would take kept candidates in."""
    return (candidate.protected, candidate.lost_gpu_seconds, candidate.job)


def test_spared_goes_only_to_the_kept_candidates_the_plan_came_closest_to_taking() -> None:
    c = shared_pool(nodes=12)  # six research gangs; production takes one
    production_demand(c)
    [decision] = c.decisions
    kept = [x for x in decision.plan.candidates if x.outcome == "spared"]
    assert len(kept) == 5
    events = decision_events([decision], UIDS.get, "worker-0", spared_limit=2)
    spared = [e for e in events if e["reason"] == SPARED]
    closest = sorted(kept, key=closeness)[:2]
    assert {f"research/{e['regarding']['name']}" for e in spared} == {x.job for x in closest}


def test_with_no_spared_events_a_decision_writes_only_its_yields() -> None:
    c = shared_pool(nodes=12)
    production_demand(c)
    [decision] = c.decisions
    events = decision_events([decision], UIDS.get, "worker-0", spared_limit=0)
    assert [e["reason"] for e in events] == [GRACEFUL_YIELD] * len(decision.plan.victims)
    assert {f"research/{e['regarding']['name']}" for e in events} == {
        v.job for v in decision.plan.victims
    }


def test_a_protected_candidate_is_spared_after_every_unprotected_one() -> None:
    c = shared_pool(nodes=12)
    production_demand(c)
    [decision] = c.decisions
    plan = decision.plan
    kept = [x for x in plan.candidates if x.outcome == "spared"]
    # the costliest kept candidate, marked protected: it now comes last however cheap
    costly = max(kept, key=closeness)
    cheapest = min(kept, key=closeness)
    protected = [x.model_copy(update={"protected": x.job == cheapest.job}) for x in plan.candidates]
    marked = decision.model_copy(update={"plan": plan.model_copy(update={"candidates": protected})})
    chosen = closest_spared(marked, len(kept) - 1)
    assert cheapest.job not in chosen
    assert costly.job in chosen


def test_rounds_that_did_not_act_write_no_events() -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 5)
    skipped = [d for d in c.rounds if d.outcome is RoundOutcome.SKIPPED_YIELDING]
    assert skipped
    assert decision_events(skipped, UIDS.get, "worker-0") == []


def test_the_same_decision_makes_events_of_the_same_names() -> None:
    c = shared_pool()
    production_demand(c)
    first = decision_events(c.decisions, UIDS.get, "worker-0")
    again = decision_events(c.decisions, UIDS.get, "worker-1")
    assert [e["metadata"]["name"] for e in first] == [e["metadata"]["name"] for e in again]
    assert len({e["metadata"]["name"] for e in first}) == len(first)


def test_an_unknown_uid_leaves_the_reference_without_one() -> None:
    c = shared_pool()
    production_demand(c)
    events = decision_events(c.decisions, lambda job: None, "worker-0")
    assert all("uid" not in e["regarding"] for e in events)


def test_a_resume_writes_resumed_on_the_job() -> None:
    c = shared_pool()
    production_demand(c)
    [decision] = c.decisions
    resumed = decision.model_copy(
        update={
            "outcome": RoundOutcome.RESUME,
            "demand": "research/sweep-0",
            "reason": "fits again without evicting anyone; resumes from its last checkpoint",
        }
    )
    [event] = decision_events([resumed], UIDS.get, "worker-0")
    assert event["reason"] == RESUMED
    assert event["regarding"]["uid"] == "uid-sweep-0"
    assert "resumes from its last checkpoint" in event["note"]


def test_a_note_is_cut_to_the_api_s_limit() -> None:
    c = shared_pool()
    production_demand(c)
    [decision] = c.decisions
    long = decision.model_copy(update={"outcome": RoundOutcome.RESUME, "reason": "é" * 2000})
    [event] = decision_events([long], UIDS.get, "worker-0")
    assert len(event["note"].encode()) <= NOTE_LIMIT
