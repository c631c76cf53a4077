"""The CLI imports only what the command it runs uses (behaviour, not timing).

Each command's module is loaded when that command runs (``gpuyield.cli``'s
``COMMANDS``), so ``gpuyield --help`` and ``gpuyield plan`` start without
Faust, aiokafka, the Kubernetes client, Redis or torch. Each check runs a
fresh interpreter and looks at its ``sys.modules``: in this test process
other tests have long imported everything. How long start-up takes is
measured by ``bench/bench_startup.py``, not here.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyield.cli import COMMANDS, app

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fragmented.json"
HEAVY = ("faust", "aiokafka", "torch", "kubernetes", "redis", "kafka", "pyarrow", "matplotlib")
"""Packages that only the streaming, Kubernetes, archive, trainer or report commands use."""


def heavy_modules_after(code: str) -> list[str]:
    """The heavy packages a fresh interpreter has imported after running ``code``."""
    probe = (
        "import contextlib, io, json, sys\n"
        f"with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    {code}\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_importing_the_cli_imports_no_command_module() -> None:
    assert heavy_modules_after("import gpuyield.cli") == []


def test_gpuyield_help_imports_no_command_module() -> None:
    assert heavy_modules_after("from gpuyield.cli import main; main(['--help'])") == []


def test_gpuyield_plan_imports_the_planner_only() -> None:
    code = f"from gpuyield.cli import main; main(['plan', {str(EXAMPLE)!r}])"
    assert heavy_modules_after(code) == []


def test_a_settings_command_imports_no_broker_client() -> None:
    """``config`` reads the settings (``service_io``), whose metrics and topic registry
    used to import aiokafka's admin client for names alone."""
    assert heavy_modules_after("from gpuyield.cli import main; main(['config', '--help'])") == []


def test_a_command_still_loads_its_module_when_it_runs() -> None:
    """The checks above can fail: ``status --help`` loads its module, which imports Redis."""
    assert "redis" in heavy_modules_after(
        "from gpuyield.cli import main; main(['status', '--help'])"
    )


def docstring_first_line(target: str) -> str | None:
    """The first docstring line of ``module:function``, read from its source (not imported)."""
    module, _, name = target.partition(":")
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} not found"
    assert spec.origin is not None, f"{module} has no source"
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            doc = ast.get_docstring(node)
            return doc.splitlines()[0] if doc else None
    return None


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_help_line_is_its_function_docstring(name: str) -> None:
    lazy = COMMANDS[name]
    assert docstring_first_line(lazy.target) == lazy.help


def test_help_lists_every_command_in_order() -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    listed = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("│ ")]
    commands = [word for word in listed if word in COMMANDS]
    assert commands == list(COMMANDS)
