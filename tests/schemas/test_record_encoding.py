"""A decision record encoded from its models' kept JSON is byte for byte ``encode``'s.

The worker keeps the JSON of the snapshot models its decision records carried
(``schemas.record_encoding.KeptJson``) and encodes only the models that are
new; the bytes must not depend on which of them were kept.
"""

from __future__ import annotations

import gc

from builders import HOUR, NOW, a_job, a_node, a_queue, a_snapshot
from hypothesis import given, settings
from planner.strategies import Case, any_cases, examples

from gpuyield.agents.planner import plan
from gpuyield.schemas import Snapshot
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Decision, RoundOutcome
from gpuyield.schemas.record_encoding import KeptJson, encode_decision


def a_cluster(*, progress: float = 0.4) -> Snapshot:
    return a_snapshot(
        nodes=[a_node("n1", rack="r1"), a_node("n2", rack="r1"), a_node("n3", rack="r2")],
        queues=[a_queue("prod", guarantee=8), a_queue("research")],
        jobs=[
            a_job("research/sweep-17")
            .in_queue("research")
            .priority(10)
            .progress(progress)
            .running(pods=[("n1", 4), ("n1", 4)], started_at=NOW - 5 * HOUR)
            .checkpointed(NOW - HOUR),
            a_job("research/ablation")
            .in_queue("research")
            .priority(20)
            .running(pods=[("n2", 8)], started_at=NOW - 2 * HOUR),
            a_job("prod/fine-tune").in_queue("prod").priority(1000).pending(pods=2, gpus=8),
        ],
    )


def a_decision(snapshot: Snapshot, decision_id: str = "d-1") -> Decision:
    return Decision(
        decision_id=decision_id,
        demand="prod/fine-tune",
        decided_at=NOW,
        snapshot=snapshot,
        plan=plan(snapshot, "prod/fine-tune", explain=True),
        commands=("c-1", "c-2"),
        outcome=RoundOutcome.YIELD,
        reason="evicts research/sweep-17",
        origin="gpuyield.kube-events/0/17",
    )


def test_a_first_record_is_encoded_byte_for_byte() -> None:
    decision = a_decision(a_cluster())

    assert encode_decision(decision, KeptJson()) == encode(decision)


def test_a_record_whose_models_were_kept_is_encoded_byte_for_byte() -> None:
    kept = KeptJson()
    snapshot = a_cluster()
    encode_decision(a_decision(snapshot, "d-1"), kept)

    again = a_decision(snapshot, "d-2")

    assert encode_decision(again, kept) == encode(again)


def test_a_job_that_changed_is_encoded_anew_beside_the_kept_ones() -> None:
    kept = KeptJson()
    before = a_cluster(progress=0.4)
    encode_decision(a_decision(before), kept)
    changed = before.jobs[2].model_copy(update={"progress": 0.9})
    after = before.model_copy(update={"jobs": (*before.jobs[:2], changed)})

    decision = a_decision(after)

    assert encode_decision(decision, kept) == encode(decision)
    assert b'"progress":0.9' in encode_decision(decision, kept)


def test_a_kept_entry_leaves_with_its_model() -> None:
    kept = KeptJson()
    decision = a_decision(a_cluster())
    encode_decision(decision, kept)
    assert len(kept) == 3 + 3  # three nodes, three jobs

    del decision
    gc.collect()

    assert len(kept) == 0


def test_a_skipped_round_has_no_snapshot_to_keep() -> None:
    kept = KeptJson()
    skipped = Decision(
        v=2,
        decision_id="d-9",
        demand="prod/fine-tune",
        decided_at=NOW,
        outcome=RoundOutcome.SKIPPED_COOLDOWN,
        reason="its retry cooldown runs until 1764000600",
    )

    assert encode_decision(skipped, kept) == encode(skipped)
    assert len(kept) == 0


def test_names_with_json_punctuation_and_other_scripts_are_encoded_byte_for_byte() -> None:
    snapshot = a_snapshot(
        nodes=[a_node('n"1},{', rack="r\\1"), a_node("nœud-2")],
        jobs=[
            a_job("prod/fine-tune").priority(1000).pending(pods=1, gpus=8),
            a_job('équipe/"a"},{b').running(pods=[('n"1},{', 8)], started_at=NOW - HOUR),
            a_job("研究/スイープ").running(pods=[("nœud-2", 4)], started_at=NOW - HOUR),
        ],
    )
    kept = KeptJson()
    first, second = a_decision(snapshot, "d-1"), a_decision(snapshot, "d-2")

    assert encode_decision(first, kept) == encode(first)
    assert encode_decision(second, kept) == encode(second)


@settings(max_examples=examples(100), deadline=None)
@given(any_cases(), any_cases())
def test_records_of_any_clusters_in_turn_are_encoded_byte_for_byte(
    first: Case, second: Case
) -> None:
    kept = KeptJson()
    for case in (first, second, first):
        decision = Decision(
            decision_id="d",
            demand=case.preemptor,
            decided_at=NOW,
            snapshot=case.snapshot,
            plan=plan(case.snapshot, case.preemptor, explain=True),
        )
        assert encode_decision(decision, kept) == encode(decision)
