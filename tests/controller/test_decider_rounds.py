"""Every round on the record: each round that considered a demand is one ``Decision``.

Yields and resumes, and also the rounds that found no plan (it fits without
evictions, or nothing can serve it) and the rounds that were skipped (its
victims still leaving, GPUs held for it, its retry cooldown), each with its
outcome and reason. A skip is recorded once, not on every input that meets it.
"""

from __future__ import annotations

import json
import re

import pytest
from cluster_objects import node, pod, pod_group
from harness import NOW, Controller, production_demand, shared_pool

from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import Decision, RoundOutcome, YieldAck, YieldOutcome


def unschedulable(c: Controller, name: str, at: float, gpus: int = 8) -> None:
    c.add(
        pod_group(name, namespace="prod", queue="production", phase="Inqueue", unschedulable=True),
        at,
    )
    c.add(pod(name, 0, namespace="prod", priority=1000, gpus=gpus), at)


def outcomes(c: Controller, demand: str) -> list[RoundOutcome | None]:
    return [d.outcome for d in c.rounds if d.demand == demand]


def test_a_demand_that_fits_without_evictions_is_a_no_victims_decision_with_its_plan() -> None:
    c = shared_pool()
    c.add(node("gpu-04"), NOW)
    unschedulable(c, "ft-small", NOW, gpus=4)
    [decision] = c.rounds
    assert decision.outcome is RoundOutcome.NO_VICTIMS
    assert decision.v == 1
    assert decision.plan is not None
    assert decision.plan.feasible
    assert not decision.plan.victims
    assert decision.snapshot is not None
    assert decision.commands == ()
    assert "left to Volcano" in decision.reason
    assert c.decisions == []  # nothing acted on


def test_a_demand_nothing_can_serve_is_an_unservable_decision() -> None:
    c = shared_pool()
    unschedulable(c, "ft-huge", NOW, gpus=64)  # more than a node has
    [decision] = c.rounds
    assert decision.outcome is RoundOutcome.UNSERVABLE
    assert decision.plan is not None
    assert not decision.plan.feasible
    assert decision.reason.startswith("no plan, even evicting every eligible job")


def test_the_cooldown_after_a_round_is_that_rounds_own_and_the_next_round_is_recorded() -> None:
    c = shared_pool()
    c.add(node("gpu-04"), NOW)
    unschedulable(c, "ft-small", NOW, gpus=4)
    for seconds in range(2, 30, 2):  # ticks inside the retry cooldown
        c.tick(NOW + seconds)
    assert outcomes(c, "prod/ft-small") == [RoundOutcome.NO_VICTIMS]
    c.tick(NOW + c.config.demand_retry_s + 1)
    assert outcomes(c, "prod/ft-small") == [RoundOutcome.NO_VICTIMS, RoundOutcome.NO_VICTIMS]


def test_a_preemptor_whose_victims_are_leaving_is_skipped_once_with_the_reason() -> None:
    c = shared_pool()
    production_demand(c)
    for seconds in (5, 10, 15):
        c.tick(NOW + seconds)
    assert outcomes(c, "prod/ft-llama") == [RoundOutcome.YIELD, RoundOutcome.SKIPPED_YIELDING]
    skipped = c.rounds[-1]
    assert skipped.v == 2
    assert skipped.snapshot is None
    assert skipped.plan is None
    assert skipped.reason == "the victims of its previous round are still leaving"
    assert skipped.decided_at == NOW + 5


def test_once_its_victims_are_gone_the_preemptor_waits_on_its_held_gpus_recorded_once() -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 5)
    for command in list(c.commands):
        c.feed(
            YieldAck(
                command_id=command.command_id,
                decision_id=command.decision_id,
                node=command.node,
                job=command.job,
                outcome=YieldOutcome.CHECKPOINTED,
                checkpoint_step=1200,
                acked_at=NOW + 40,
            )
        )
    for k in range(2):  # the victim's pods are gone
        c.delete(pod("sweep-0", k, namespace="research", node=f"gpu-0{k}"), NOW + 41)
    for seconds in (45, 50, 55):
        c.tick(NOW + seconds)
    assert outcomes(c, "prod/ft-llama") == [
        RoundOutcome.YIELD,
        RoundOutcome.SKIPPED_YIELDING,
        RoundOutcome.SKIPPED_HELD,
    ]
    assert "held until Volcano places it" in c.rounds[-1].reason


def test_every_decision_names_the_input_whose_step_made_it() -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 5)
    assert [d.origin for d in c.rounds] == [f"in/0/{c.offset - 1}", f"in/0/{c.offset}"]


def test_a_yield_decision_is_still_a_v1_document_a_v1_reader_takes() -> None:
    c = shared_pool()
    production_demand(c)
    [decision] = c.decisions
    assert decision.v == 1
    assert decision.outcome is RoundOutcome.YIELD
    assert decode(Decision, encode(decision)) == decision


def test_a_skipped_round_reads_back_as_the_same_v2_decision() -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 5)
    skipped = c.rounds[-1]
    assert decode(Decision, encode(skipped)) == skipped


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"v": 1}, "a v1 decision carries its snapshot and plan"),
        ({"v": 3}, "unknown format version 3 for Decision (this reader knows 1, 2)"),
        ({"v": True}, "unknown format version true"),
    ],
)
def test_a_decision_whose_version_does_not_fit_its_content_is_refused(
    change: dict[str, object], problem: str
) -> None:
    c = shared_pool()
    production_demand(c)
    c.tick(NOW + 5)
    doc = c.rounds[-1].model_dump(mode="json") | change
    with pytest.raises(MessageError, match=re.escape(problem)):
        decode(Decision, json.dumps(doc))
