"""``gpuyield config``: the effective settings, and where each value came from.

Every variable the settings read (the edge's and the policy knobs), with
the value in effect, written the way its variable takes it, and its source:
``default``, ``env`` or ``file:<path>`` (the settings file named by
``--config`` or ``GPUYIELD_CONFIG``). Secrets show as asterisks. A bad value
fails like every other command that reads the settings: exit 2, one line
naming the variable. ``--json`` gives the same as a document for scripts::

    {"config_file": null,
     "settings": {"GPUYIELD_ALPHA": {"value": 150.0, "source": "default",
                                     "field": "controller.policy.alpha"}, ...}}

``settings_markdown`` renders the README's table of every setting from the
model, so the table cannot drift from the code (``tests/test_config_command.py``).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuyield.cli_options import SettingsFile
from gpuyield.schemas.config import knob_value
from gpuyield.service_io import traced_settings_or_fail
from gpuyield.streams.settings import (
    BLOCKS,
    PROFILE_DEFAULTS,
    KafkaProfile,
    LoadedSettings,
    SettingSpec,
    env_value,
    setting_specs,
)


def config_command(
    config: SettingsFile = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the settings as JSON instead of a table.")
    ] = False,
) -> None:
    """Print the effective settings and where each came from (default, env, file:PATH)."""
    loaded = traced_settings_or_fail(config)
    if as_json:
        sys.stdout.write(json.dumps(config_document(loaded), indent=2) + "\n")
        return
    Console().print(config_table(loaded))


def config_document(loaded: LoadedSettings) -> dict[str, Any]:
    """The ``--json`` document: every variable's value (JSON-typed, secrets masked) and source."""
    dumped = loaded.settings.model_dump(mode="json")  # SecretStr dumps as asterisks
    return {
        "config_file": str(loaded.config_file) if loaded.config_file is not None else None,
        "settings": {
            spec.env: {
                "value": knob_value_json(dumped, spec.path),
                "source": loaded.sources[spec.env],
                "field": ".".join(spec.path),
            }
            for spec in setting_specs()
        },
    }


def knob_value_json(dumped: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = dumped
    for part in path:
        value = value[part]
    return value


def config_table(loaded: LoadedSettings) -> Table:
    where = f" (settings file {loaded.config_file})" if loaded.config_file else ""
    table = Table(title=f"gpuyield settings{where}")
    table.add_column("variable", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", no_wrap=True)
    specs = setting_specs()
    for i, spec in enumerate(specs):
        value = knob_value(loaded.settings, spec.path)
        shown = (
            Text("unset", style="dim") if value is None else Text(env_value(value), style="bold")
        )
        source = loaded.sources[spec.env]
        next_group = _group(specs[i + 1]) if i + 1 < len(specs) else None
        table.add_row(
            spec.env,
            shown,
            Text(source, style="dim" if source == "default" else "green"),
            end_section=next_group not in (None, _group(spec)),
        )
    return table


def _group(spec: SettingSpec) -> str:
    """The block a setting belongs to (the edge's own fields are one group)."""
    return spec.path[0] if spec.path[0] in BLOCKS else ""


# --- the README's table ------------------------------------------------------------------


def _code(value: Any) -> str:
    text = env_value(value)
    if value is None:
        return "unset"
    if not text:
        return "empty"
    return f"`{text}`"


def default_text(spec: SettingSpec) -> str:
    """The default as the README shows it: per profile where it has one per profile."""
    name = spec.path[-1]
    if spec.path[0] not in BLOCKS and name in PROFILE_DEFAULTS[KafkaProfile.KAFKA]:
        kafka = PROFILE_DEFAULTS[KafkaProfile.KAFKA][name]
        tansu = PROFILE_DEFAULTS[KafkaProfile.TANSU][name]
        return f"{_code(kafka)} (Kafka), {_code(tansu)} (Tansu)"
    if name == "state_dir":
        return "`$XDG_STATE_HOME/gpuyield`"
    return _code(spec.field.get_default(call_default_factory=True))


def settings_markdown() -> str:
    """The README's settings table, from the model: variable, default, meaning."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for spec in setting_specs():
        meaning = spec.description.replace("|", "\\|")
        lines.append(f"| `{spec.env}` | {default_text(spec)} | {meaning} |")
    return "\n".join(lines) + "\n"
