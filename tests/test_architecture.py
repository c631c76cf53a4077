"""The architecture is a checked contract, not a picture.

- Import layers (import-linter, configured in pyproject.toml): the CLI on top,
  the planner below it, the wire models at the bottom; pure cores import no
  I/O framework.
- The folders the user asked for (``schemas/``, ``agents/``, ``streams/``) are
  installed as ``gpuyield.schemas``, ``gpuyield.agents`` and
  ``gpuyield.streams``: generic names like ``agents`` (the import name of
  ``openai-agents``) can neither shadow ours nor be shadowed by ours.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {
    "gpuyield": "cli",
    "gpuyield.schemas": "schemas",
    "gpuyield.agents": "agents",
    "gpuyield.streams": "streams",
}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_import_layers_hold() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(linter), str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_package_folder_is_installed() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == MAPPED
    listed = set(setuptools["packages"])
    for package, folder in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            name = ".".join((package, *parts))
            assert name in listed, (
                f"{name} ({init.parent}) is missing from [tool.setuptools].packages"
            )


def test_our_distribution_installs_only_the_gpuyield_top_level_name() -> None:
    provided = {
        name
        for name, dists in importlib.metadata.packages_distributions().items()
        if "gpuyield" in dists
    }
    assert provided == {"gpuyield"}


def test_a_foreign_agents_package_and_ours_live_side_by_side(tmp_path: Path) -> None:
    for name in ("agents", "schemas", "streams"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"OWNER = 'someone else: {name}'\n")
    probe = (
        "import agents, schemas, streams\n"
        "from gpuyield.agents.planner import plan\n"
        "from gpuyield.schemas import Snapshot\n"
        "import gpuyield.agents\n"
        'assert agents.OWNER == "someone else: agents", agents.__file__\n'
        'assert schemas.OWNER == "someone else: schemas"\n'
        "assert gpuyield.agents.__file__ != agents.__file__\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_the_planner_imports_no_io_framework() -> None:
    probe = (
        "import sys\n"
        "import gpuyield.agents.planner\n"
        "bad = sorted(m for m in ('faust', 'aiokafka', 'redis', 'kubernetes', 'torch', 'rich',"
        " 'typer', 'logging') if m in sys.modules)\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
