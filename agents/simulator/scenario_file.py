"""Reading a scenario file (``gpuyield simulate --scenario FILE``): JSON or YAML over the default.

Every field is optional: the file is merged over ``default_scenario()``.
Mappings merge key by key (``policy: {alpha: 100}`` keeps the other policy
knobs); lists replace (a file that gives ``queues`` gives all the queues, one
that gives ``workload`` gives the whole workload), because merging lists by
position would silently mix the default's queues with the file's.

Bad input raises ``InputError`` with one line that names the file and the
field path, e.g. ``my.yaml: workload[1].jobs_per_day: input should be greater
than or equal to 0 (got -3)``. Beyond the schema, it rejects what would make a
run meaningless rather than fail: unknown fields (a typo would silently keep
the default), unknown job kinds, pods that cannot fit on a node, jobs larger
than their queue may ever hold, empty ranges, duplicate queues.
"""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.jobs import JobKind
from gpuyield.schemas.errors import InputError, explain_validation_error
from gpuyield.schemas.scenario import Scenario


def read_scenario_file(path: Path, base: Scenario | None = None) -> Scenario:
    """The scenario in ``path`` (the edge: the only function here that touches a file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the scenario: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a scenario file (not UTF-8 text)") from None
    return load_scenario(text, str(path), base)


def load_scenario(text: str, source: str, base: Scenario | None = None) -> Scenario:
    """Parse ``text`` (JSON or YAML) and merge it over ``base`` (the default scenario).

    ``gpuyield simulate`` passes the default scenario with the settings' policy
    knobs in it, so the file's own ``policy`` keys win over the settings.

    ``source`` names the document in messages; a name ending in ``.json``, or a
    text starting with ``{``, is read as JSON (for JSON's precise error
    positions), anything else as YAML. Raises InputError with one line.
    """
    data = _parse(text, source)
    unknown = unknown_field(data, Scenario)
    if unknown is not None:
        raise InputError(f"{source}: {unknown}")
    default = base if base is not None else default_scenario()
    if "queues" in data and "workload" not in data and isinstance(data["queues"], list):
        names = {q.get("name") for q in data["queues"] if isinstance(q, Mapping)}
        lacking = sorted({mix.queue for mix in default.workload} - names)
        if lacking:
            raise InputError(
                f"{source}: queues: the default workload submits to '{lacking[0]}', which these "
                "queues lack (a file that gives queues replaces them all): give a workload too"
            )
    merged = merge(default.model_dump(mode="json"), data)
    try:
        scenario = Scenario.model_validate(merged)
    except ValidationError as exc:
        raise InputError(f"{source}: {explain_validation_error(exc)}") from None
    problem = scenario_problem(scenario)
    if problem is not None:
        raise InputError(f"{source}: {problem}")
    return scenario


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in override.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = merge(below, value)
        else:
            out[key] = value
    return out


def unknown_field(data: object, model: type[BaseModel], path: str = "") -> str | None:
    """The first key of ``data`` that ``model`` (or a model nested in it) does not have.

    Wire models ignore unknown fields so that older readers accept newer
    writers; a scenario is written by hand, where an unknown field is a typo.
    """
    if not isinstance(data, Mapping):
        return None
    fields = model.model_fields
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            return f"{where}: unknown field{hint}"
        nested = _nested_model(fields[key].annotation)
        if nested is None:
            continue
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, item in items:
            found = unknown_field(item, nested, where if i is None else f"{where}[{i}]")
            if found is not None:
                return found
    return None


def scenario_problem(scenario: Scenario) -> str | None:
    """The first thing that makes ``scenario`` unrunnable though well-typed, or None."""
    if not scenario.queues:
        return "queues: at least one queue is needed"
    capability: dict[str, int | None] = {}
    for i, queue in enumerate(scenario.queues):
        if queue.name in capability:
            return f"queues[{i}].name: duplicate queue name '{queue.name}'"
        cap = queue.capability.gpu
        if cap is not None and cap < queue.guarantee.gpu:
            return (
                f"queues[{i}].capability.gpu: {cap} is below the queue's guarantee "
                f"of {queue.guarantee.gpu} GPUs"
            )
        capability[queue.name] = cap
    for i, queue in enumerate(scenario.queues):
        if queue.parent is not None and queue.parent not in capability:
            return f"queues[{i}].parent: unknown queue '{queue.parent}'"
    for i, mix in enumerate(scenario.workload):
        problem = _mix_problem(scenario, mix_index=i, capability=capability.get(mix.queue))
        if problem is not None:
            return problem
    return None


def _mix_problem(scenario: Scenario, *, mix_index: int, capability: int | None) -> str | None:
    mix = scenario.workload[mix_index]
    at = f"workload[{mix_index}]"
    kinds = [kind.value for kind in JobKind]
    if mix.kind not in kinds:
        return f"{at}.kind: must be one of {', '.join(kinds)} (got '{mix.kind}')"
    for j, gpus in enumerate(mix.gpus_per_pod):
        if not 1 <= gpus <= scenario.gpus_per_node:
            return (
                f"{at}.gpus_per_pod[{j}]: {gpus} does not fit a node "
                f"(1 to gpus_per_node = {scenario.gpus_per_node})"
            )
    for j, pods in enumerate(mix.pods):
        if not 1 <= pods <= scenario.nodes:
            return f"{at}.pods[{j}]: {pods} pods: must be 1 to nodes = {scenario.nodes}"
    largest = max(mix.gpus_per_pod) * max(mix.pods)
    if capability is not None and largest > capability:
        return (
            f"{at}: its largest job ({max(mix.pods)} pods x {max(mix.gpus_per_pod)} GPUs) "
            f"exceeds the capability of queue '{mix.queue}' ({capability} GPUs): it could never run"
        )
    for name, bounds in (
        ("checkpoint_interval_min", mix.checkpoint_interval_min),
        ("sla_factor", mix.sla_factor),
    ):
        if bounds is not None and not 0 < bounds[0] <= bounds[1]:
            return f"{at}.{name}: must be [low, high] with 0 < low <= high (got {list(bounds)})"
    return None


def _parse(text: str, source: str) -> Mapping[str, Any]:
    if not text.strip():
        raise InputError(f"{source}: the file is empty, expected a scenario (JSON or YAML)")
    if source.lower().endswith(".json") or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    if data is None:
        raise InputError(f"{source}: holds no scenario (expected fields such as 'days: 7')")
    if not isinstance(data, Mapping):
        raise InputError(
            f"{source}: expected a mapping of scenario fields, got {type(data).__name__}"
        )
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line from a PyYAML error: what went wrong and where."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return str(problem)
    return f"{problem} at line {mark.line + 1} column {mark.column + 1}"


def _nested_model(annotation: object) -> type[BaseModel] | None:
    """The wire model inside a field's annotation (``Policy``, ``tuple[Queue, ...]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin in (tuple, list, Union, types.UnionType):
        for arg in get_args(annotation):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None
