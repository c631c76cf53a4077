"""The taint rule Volcano's predicates plugin applies (upstream ``ToleratesTaint`` + filter)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyield.streams.taints import tolerates, toleration_matches, untolerated

RESERVED = {"key": "gpuyield.io/reserved", "value": "abc", "effect": "NoSchedule"}


def pod(*tolerations: dict) -> dict:
    return {"spec": {"tolerations": list(tolerations)}}


def node(*taints: dict) -> dict:
    return {"spec": {"taints": list(taints)}}


def test_a_pod_without_tolerations_is_kept_off_a_no_schedule_node() -> None:
    assert not tolerates(pod(), node(RESERVED))


def test_a_matching_equal_toleration_lets_the_pod_on() -> None:
    assert tolerates(pod({**RESERVED, "operator": "Equal"}), node(RESERVED))


def test_an_equal_toleration_with_another_value_does_not() -> None:
    assert not tolerates(pod({**RESERVED, "operator": "Equal", "value": "xyz"}), node(RESERVED))


def test_an_empty_operator_means_equal() -> None:
    assert tolerates(pod(dict(RESERVED)), node(RESERVED))
    assert not tolerates(pod({**RESERVED, "value": "xyz"}), node(RESERVED))


def test_exists_ignores_the_value() -> None:
    toleration = {"key": RESERVED["key"], "operator": "Exists", "effect": "NoSchedule"}
    assert tolerates(pod(toleration), node(RESERVED))


def test_exists_with_no_key_tolerates_every_taint() -> None:
    assert tolerates(
        pod({"operator": "Exists"}), node(RESERVED, {"key": "x", "effect": "NoExecute"})
    )


def test_an_empty_effect_matches_every_effect_and_another_effect_does_not() -> None:
    assert tolerates(pod({**RESERVED, "effect": ""}), node(RESERVED))
    assert not tolerates(pod({**RESERVED, "effect": "NoExecute"}), node(RESERVED))


def test_prefer_no_schedule_never_keeps_a_pod_off() -> None:
    assert tolerates(pod(), node({**RESERVED, "effect": "PreferNoSchedule"}))


def test_every_filtering_taint_must_be_tolerated() -> None:
    other = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    assert untolerated([RESERVED], [RESERVED, other]) == [other]


@pytest.mark.parametrize("operator", ["Lt", "Gt", "In"])
def test_an_unknown_operator_tolerates_nothing(operator: str) -> None:
    assert not toleration_matches({**RESERVED, "operator": operator}, RESERVED)


@given(
    key=st.sampled_from(["a", "b", ""]),
    value=st.sampled_from(["x", "y", ""]),
    effect=st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", ""]),
    operator=st.sampled_from(["Equal", "Exists", ""]),
)
def test_a_toleration_matching_a_taint_also_matches_it_with_its_effect_left_empty(
    key: str, value: str, effect: str, operator: str
) -> None:
    toleration = {"key": key, "value": value, "effect": effect, "operator": operator}
    for taint_effect in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
        taint = {"key": "a", "value": "x", "effect": taint_effect}
        if toleration_matches(toleration, taint):
            assert toleration_matches({**toleration, "effect": ""}, taint)
