"""Scenario files: JSON or YAML, each field optional over the default, one line when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.scenario_file import load_scenario, merge, read_scenario_file
from gpuyield.schemas import InputError


def _error(text: str, source: str = "s.yaml") -> str:
    with pytest.raises(InputError) as info:
        load_scenario(text, source)
    return str(info.value)


def test_an_empty_json_object_is_the_default_scenario() -> None:
    assert load_scenario("{}", "s.json") == default_scenario()


def test_a_partial_json_file_keeps_every_other_default() -> None:
    scenario = load_scenario('{"days": 3, "seed": 9}', "s.json")
    assert (scenario.days, scenario.seed) == (3.0, 9)
    assert scenario.model_copy(update={"days": 14.0, "seed": 0}) == default_scenario()


def test_a_partial_yaml_file_merges_nested_mappings() -> None:
    scenario = load_scenario("nodes: 16\npolicy:\n  alpha: 10\n", "s.yaml")
    assert scenario.nodes == 16
    assert scenario.policy.alpha == 10
    assert scenario.policy.beta == default_scenario().policy.beta
    assert scenario.queues == default_scenario().queues


def test_yaml_is_read_when_the_name_says_nothing() -> None:
    assert load_scenario("days: 2", "-").days == 2
    assert load_scenario('{"days": 2}', "-").days == 2


def test_queues_and_workload_given_replace_the_defaults() -> None:
    text = """
queues:
  - {name: a, capability: {gpu: 64}}
  - {name: b}
workload:
  - {queue: a, kind: production, jobs_per_day: 4, pods: [1, 2]}
"""
    scenario = load_scenario(text, "s.yaml")
    assert [q.name for q in scenario.queues] == ["a", "b"]
    assert len(scenario.workload) == 1
    assert scenario.workload[0].pods == (1, 2)


def test_merge_replaces_lists_and_merges_mappings() -> None:
    base = {"a": {"x": 1, "y": 2}, "l": [1, 2, 3]}
    assert merge(base, {"a": {"y": 5}, "l": [9]}) == {"a": {"x": 1, "y": 5}, "l": [9]}


@pytest.mark.parametrize(
    ("text", "source", "message"),
    [
        ("", "s.yaml", "s.yaml: the file is empty, expected a scenario (JSON or YAML)"),
        ("# only a comment\n", "s.yaml", "s.yaml: holds no scenario"),
        ("[1, 2]", "s.yaml", "s.yaml: expected a mapping of scenario fields, got list"),
        ('{"days": 3,}', "s.json", "s.json: not valid JSON: Expecting property name"),
        ("days: [\n", "s.yaml", "s.yaml: not valid YAML:"),
        ("nodes: 0", "s.yaml", "s.yaml: nodes: input should be greater than or equal to 1"),
        ("days: soon", "s.yaml", "s.yaml: days: input should be a valid number"),
        ("nodse: 4", "s.yaml", "s.yaml: nodse: unknown field (did you mean 'nodes'?)"),
        ("policy: {alpah: 1}", "s.yaml", "s.yaml: policy.alpah: unknown field (did you mean"),
        (
            "workload: [{queue: shared, kind: shared, jobs_per_day: -1}]",
            "s.yaml",
            "s.yaml: workload[0].jobs_per_day: input should be greater than or equal to 0",
        ),
        (
            "workload: [{queue: nowhere, kind: shared, jobs_per_day: 1}]",
            "s.yaml",
            "s.yaml: workload[0].queue: unknown queue 'nowhere'",
        ),
        (
            "workload: [{queue: shared, kind: batch, jobs_per_day: 1}]",
            "s.yaml",
            "s.yaml: workload[0].kind: must be one of production, research, shared (got 'batch')",
        ),
        (
            "workload: [{queue: shared, kind: shared, jobs_per_day: 1, gpus_per_pod: [16]}]",
            "s.yaml",
            "s.yaml: workload[0].gpus_per_pod[0]: 16 does not fit a node",
        ),
        (
            "workload: [{queue: shared, kind: shared, jobs_per_day: 1, pods: [65]}]",
            "s.yaml",
            "s.yaml: workload[0].pods[0]: 65 pods: must be 1 to nodes = 64",
        ),
        (
            "workload: [{queue: research-elastic, kind: research, jobs_per_day: 1, pods: [32]}]",
            "s.yaml",
            "s.yaml: workload[0]: its largest job (32 pods x 8 GPUs) exceeds the capability",
        ),
        (
            "workload: [{queue: shared, kind: shared, jobs_per_day: 1, "
            "checkpoint_interval_min: [60, 20]}]",
            "s.yaml",
            "s.yaml: workload[0].checkpoint_interval_min: must be [low, high]",
        ),
        (
            "workload: [{queue: shared, kind: shared, jobs_per_day: 1, jobs_a_day: 3}]",
            "s.yaml",
            "s.yaml: workload[0].jobs_a_day: unknown field",
        ),
        (
            "queues: [{name: a}, {name: a}]\nworkload: []",
            "s.yaml",
            "s.yaml: queues[1].name: duplicate queue name 'a'",
        ),
        (
            "queues: [{name: a, guarantee: {gpu: 8}, capability: {gpu: 4}}]\nworkload: []",
            "s.yaml",
            "s.yaml: queues[0].capability.gpu: 4 is below the queue's guarantee of 8 GPUs",
        ),
        ("queues: []\nworkload: []", "s.yaml", "s.yaml: queues: at least one queue is needed"),
        (
            "queues: [{name: a}]",
            "s.yaml",
            "s.yaml: queues: the default workload submits to 'production-core'",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_field(text: str, source: str, message: str) -> None:
    got = _error(text, source)
    assert got.startswith(message), got
    assert "\n" not in got


def test_read_scenario_file_reads_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text('{"days": 5}')
    (tmp_path / "s.yml").write_text("days: 6\n")
    assert read_scenario_file(tmp_path / "s.json").days == 5
    assert read_scenario_file(tmp_path / "s.yml").days == 6


def test_an_unreadable_scenario_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the scenario"):
        read_scenario_file(tmp_path / "absent.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="not UTF-8"):
        read_scenario_file(tmp_path / "bin.yaml")
