"""``gpuyield demo`` as a user runs it: the figures, and nothing left running afterwards.

Every process the demo starts inherits its environment, so a marker variable
set for the demo finds them all in ``/proc`` (broker, Redis, worker, trainers,
stand-ins), including any that outlived it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuyield.schemas.simulation import PolicyMetrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")
MARK = "GPUYIELD_DEMO_TEST_MARK"


def started_by(mark: str, state: Path) -> list[int]:
    """PIDs of live processes the demo started: their environment carries ``MARK=mark``,
    or they work in its state directory.

    The second is for Valkey, which writes its process title over its environment
    (the mark is gone from ``/proc/PID/environ`` a moment after it starts) and runs
    in its data directory under the demo's working directory.
    """
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if needle in environ.split(b"\0") or cwd.is_relative_to(state):
            found.append(int(entry.name))
    return found


def commands(pids: list[int]) -> list[str]:
    """What each process runs (for the failure message), ``?`` for one gone meanwhile."""
    shown = []
    for pid in pids:
        try:
            shown.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            shown.append("?")
    return shown


def demo_env(tmp_path: Path, mark: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYIELD_")}
    return {**env, "GPUYIELD_STATE_DIR": str(tmp_path), MARK: mark, "COLUMNS": "160"}


def wait_for(condition: object, timeout_s: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


@dataclass(frozen=True)
class DemoRun:
    result: subprocess.CompletedProcess[str]
    state: Path
    archive: Path
    mark: str


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One short demo, as a user runs it, keeping its archive (the run is the expensive part)."""
    mark = secrets.token_hex(8)
    state = tmp_path_factory.mktemp("state")
    archive = tmp_path_factory.mktemp("kept") / "archive"
    result = subprocess.run(
        [
            *(GPUYIELD, "demo", "--json", "--duration-s", "12", "--seed", "3"),
            *("--archive", str(archive)),
        ],
        capture_output=True,
        text=True,
        env=demo_env(state, mark),
        timeout=280,
        check=False,
    )
    return DemoRun(result, state, archive, mark)


def test_the_demo_prints_its_figures_as_json_and_leaves_no_process_behind(
    demo_run: DemoRun,
) -> None:
    result = demo_run.result
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"decisions", "yields", "lost_gpu_seconds", "policies"}
    assert set(document["yields"]) == {"commands", "checkpointed", "exited", "hard_killed"}
    assert document["decisions"] >= 1
    assert document["yields"]["commands"] >= 1
    assert document["yields"]["checkpointed"] >= 1
    assert document["yields"]["hard_killed"] == 0
    assert 0 <= document["lost_gpu_seconds"] <= 100  # at most a few seconds of a few GPUs
    assert set(document["policies"]) == {"volcano-native", "volcano-gang", "gpuyield"}
    for metrics in document["policies"].values():
        assert set(metrics) == set(PolicyMetrics.model_fields)
    assert document["policies"]["gpuyield"]["lost_gpu_hours_per_day"] == 0.0
    assert started_by(demo_run.mark, demo_run.state) == []
    assert list(demo_run.state.iterdir()) == []  # its working directory is removed


def test_replaying_the_demo_s_archive_gives_zero_differences(demo_run: DemoRun) -> None:
    assert demo_run.result.returncode == 0, demo_run.result.stderr
    replay = subprocess.run(
        [GPUYIELD, "replay", "--archive", str(demo_run.archive), "--json"],
        capture_output=True,
        text=True,
        env=demo_env(demo_run.state, demo_run.mark),
        timeout=120,
        check=False,
    )
    assert replay.returncode == 0, replay.stdout[-2000:] + replay.stderr
    report = json.loads(replay.stdout)
    assert report["differences"] == 0
    assert report["journalled"]
    decisions = [i for i in report["items"] if i["kind"] == "decision"]
    assert {i["status"] for i in report["items"]} == {"identical"}
    acted = [d for d in decisions if d["outcome"] in ("yield", "resume")]
    assert len(acted) == json.loads(demo_run.result.stdout)["decisions"]  # the demo's own count
    assert any(d["outcome"] == "yield" for d in acted)


def test_ctrl_c_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    mark = secrets.token_hex(8)
    with subprocess.Popen(  # the pipes are closed on leaving, whatever failed
        [GPUYIELD, "demo", "--duration-s", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=demo_env(tmp_path, mark),
        # As a terminal starts it: a test run launched in the background (`cmd &` in a
        # script) hands its children SIGINT ignored, and Ctrl-C would then reach nothing.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as demo:
        try:

            def pods_running() -> bool:
                assert demo.poll() is None, demo.communicate()
                return len(list(tmp_path.glob("gpuyield-demo-*/logs/*.log"))) >= 5

            wait_for(pods_running, 120, "the research pods to start")
            # The demo (the worker and node agents run inside it), the broker, Valkey and
            # pods: pods come and go (stand-ins finish, research yields), so at least two.
            wait_for(
                lambda: len(started_by(mark, tmp_path)) >= 5, 60, "the broker, Valkey and pods"
            )
            demo.send_signal(signal.SIGINT)  # what a terminal sends on Ctrl-C
            _, err = demo.communicate(timeout=90)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.communicate()
    assert demo.returncode == 130, err
    assert "interrupted" in err.decode()
    left = started_by(mark, tmp_path)
    assert left == [], commands(left)
    assert list(tmp_path.iterdir()) == []
