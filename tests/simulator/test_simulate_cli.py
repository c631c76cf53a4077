"""``gpuyield simulate`` on a trace: ``--trace-start`` moves the replayed window; policies."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuyield.cli import app

TRACE = (
    "job_id,submit_s,duration_s,num_gpus,queue\n"
    "early,0,3600,8,lab\n"
    "warm,80000,10000,8,prod\n"
    "inside,90000,1800,8,prod\n"
    "late,300000,600,8,lab\n"
)
MAP = "prod=production-core,lab=research-elastic"


def _run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    result = CliRunner().invoke(app, ["simulate", "--nodes", "2", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_trace_start_replays_the_window_after_it(tmp_path: Path) -> None:
    code, out, err = _run(
        tmp_path,
        *("--trace", str(tmp_path / "trace.csv"), "--queue-map", MAP),
        *("--trace-start", "1", "--days", "1", "--policies", "gpuyield", "--json"),
    )
    assert code == 0, err
    metrics = json.loads(out)["policies"]["gpuyield"]
    # "inside" (at 90,000 s, one day after "early") is the window's one production job;
    # "warm" was submitted in the day of warm-up before it: played (it finishes inside the
    # window, so it counts as completed there) but not judged.
    assert metrics["production_jobs"] == 1
    assert metrics["jobs_completed"] == 2


def test_trace_start_needs_a_trace(tmp_path: Path) -> None:
    code, out, err = _run(tmp_path, "--trace-start", "3")
    assert code == 2
    assert out == ""
    assert err == "gpuyield: --trace-start: only meaningful with --trace\n"


def test_the_four_policies_run_side_by_side_on_one_trace(tmp_path: Path) -> None:
    policies = "volcano-native,volcano-gang,gpuyield,gpuyield-unreserved"
    code, out, err = _run(
        tmp_path,
        *("--trace", str(tmp_path / "trace.csv"), "--queue-map", MAP),
        *("--days", "4", "--policies", policies, "--json"),
    )
    assert code == 0, err
    assert list(json.loads(out)["policies"]) == policies.split(",")


def test_the_default_comparison_leaves_the_ablation_out(tmp_path: Path) -> None:
    code, out, err = _run(
        tmp_path, *("--trace", str(tmp_path / "trace.csv"), "--queue-map", MAP), "--json"
    )
    assert code == 0, err
    assert list(json.loads(out)["policies"]) == ["volcano-native", "volcano-gang", "gpuyield"]


def test_policies_run_side_by_side_give_the_figures_of_a_run_one_after_another() -> None:
    """A busy day of the default scenario (evictions, restarts, yields) in worker processes."""
    policies = "volcano-native,volcano-gang,gpuyield"
    runs = [
        CliRunner().invoke(
            app,
            ["simulate", "--days", "1", "--policies", policies, "--json", "--parallel", workers],
            catch_exceptions=False,
        )
        for workers in ("1", "3")
    ]
    serial, parallel = runs
    assert serial.exit_code == 0, serial.stderr
    assert parallel.exit_code == 0, parallel.stderr
    figures = json.loads(parallel.stdout)["policies"]
    assert list(figures) == policies.split(",")
    assert figures["volcano-native"]["evictions"] > 0
    assert parallel.stdout == serial.stdout
