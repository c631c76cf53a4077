"""The simulator's workload from a recorded run (``gpuyield simulate --from-archive DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.jobs import JobKind
from gpuyield.agents.simulator.recorded import NothingRecorded, recorded_workload
from gpuyield.cli import app
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.kube_objects import (
    a_gpu_node,
    a_pod,
    a_queue,
    a_volcano_job,
    event,
)
from gpuyield.schemas.messages import JobProgress, JobProgressBatch, KubeEvent, KubeEventType
from gpuyield.streams.archive import Archive, ArchivedMessage

T0 = 1_764_460_800.0
H = 3600.0
GPU = "nvidia.com/gpu"


def phases(
    name: str, queue: str, timeline: list[tuple[float, str]], **shape: int
) -> list[KubeEvent]:
    """A Volcano Job's watch events: created at the first time, then each phase change."""
    namespace = "prod" if queue.startswith("prod") else "research"
    first = timeline[0][0]
    return [
        event(
            a_volcano_job(
                name, namespace=namespace, queue=queue, phase=phase, created_at=first, **shape
            ),
            at,
            KubeEventType.ADDED if i == 0 else KubeEventType.MODIFIED,
        )
        for i, (at, phase) in enumerate(timeline)
    ]


def a_recorded_run() -> tuple[list[KubeEvent], list[JobProgress]]:
    events = [event(a_gpu_node(f"gpu-{i}"), T0) for i in range(3)]
    events += [
        event(a_queue("production", weight=4, guarantee={GPU: 16}, reclaimable=False), T0),
        event(a_queue("research", capability={GPU: 24}), T0),
    ]
    # Ran 1 h, suspended 30 min, ran 1 h more, completed: 2 h of work.
    events += phases(
        "sweep",
        "research",
        [
            (T0, "Pending"),
            (T0 + 60, "Running"),
            (T0 + 60 + H, "Aborted"),
            (T0 + 60 + 1.5 * H, "Running"),
            (T0 + 60 + 2.5 * H, "Completed"),
        ],
        replicas=2,
        gpus_per_pod=8,
        min_available=1,
    )
    # Submitted 10 min in, running for the record's last hour, a quarter done.
    events += phases(
        "ft-llama",
        "production",
        [(T0 + 600, "Pending"), (T0 + 60 + 1.5 * H, "Running")],
        replicas=1,
        gpus_per_pod=4,
    )
    pod = a_pod(
        "ft-llama-worker-0",
        namespace="prod",
        node="gpu-2",
        gpus=4,
        priority=1000,
        labels={"volcano.sh/job-name": "ft-llama"},
    )
    events.append(event(pod, T0 + 60 + 1.5 * H))
    events.append(event(a_gpu_node("gpu-0"), T0 + 60 + 2.5 * H, KubeEventType.MODIFIED))
    progress = [
        JobProgress(
            job="prod/ft-llama",
            step=250,
            progress=0.25,
            checkpoint_interval_s=900.0,
            first_seen_at=T0 + 1.5 * H,
            updated_at=T0 + 2.5 * H,
        )
    ]
    return events, progress


def test_a_completed_job_s_work_is_the_time_it_ran() -> None:
    events, progress = a_recorded_run()
    workload = recorded_workload(events, progress, default_scenario())
    sweep = next(j for j in workload.jobs if j.name == "research/sweep")
    assert sweep.duration_s == 2 * H
    assert (sweep.pods, sweep.gpus_per_pod, sweep.min_available) == (2, 8, 1)
    assert sweep.submit_s == 0.0
    assert sweep.kind is JobKind.RESEARCH
    assert "research/sweep" not in workload.estimated


def test_a_job_still_running_is_estimated_from_its_progress() -> None:
    events, progress = a_recorded_run()
    workload = recorded_workload(events, progress, default_scenario())
    llama = next(j for j in workload.jobs if j.name == "prod/ft-llama")
    assert llama.duration_s == pytest.approx(4 * H)  # 1 h for a quarter of the work
    assert llama.submit_s == 600.0
    assert llama.checkpoint_interval_s == 900.0
    assert llama.kind is JobKind.PRODUCTION
    assert workload.estimated == ["prod/ft-llama"]


def test_the_cluster_is_the_recorded_one() -> None:
    events, progress = a_recorded_run()
    scenario = recorded_workload(events, progress, default_scenario()).scenario
    assert (scenario.nodes, scenario.gpus_per_node) == (3, 8)
    assert [q.name for q in scenario.queues] == ["production", "research"]
    assert scenario.queues[0].guarantee.gpu == 16
    assert scenario.queues[1].capability.gpu == 24
    assert scenario.days == pytest.approx((60 + 2.5 * H) / 86400)
    assert scenario.warmup_h == 0.0


def test_a_record_without_jobs_is_nothing_to_simulate() -> None:
    events = [event(a_gpu_node("gpu-0"), T0)]
    with pytest.raises(NothingRecorded, match="no Volcano Job"):
        recorded_workload(events, [], default_scenario())


def test_simulate_from_an_archive_runs_the_recorded_jobs(tmp_path: Path) -> None:
    events, progress = a_recorded_run()
    archive = Archive(str(tmp_path / "archive"))
    archive.write(
        [
            ArchivedMessage("gpuyield.kube-events", 0, i, None, None, encode(e))
            for i, e in enumerate(events)
        ]
    )
    archive.write(
        [
            ArchivedMessage("gpuyield.job-progress", 0, i, None, None, encode(p))
            for i, p in enumerate(progress)
        ]
    )
    result = CliRunner().invoke(
        app,
        ["simulate", "--from-archive", archive.url, "--policies", "gpuyield", "--json"],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["scenario"]["nodes"] == 3
    assert doc["policies"]["gpuyield"]["jobs_completed"] >= 1


def simulated_from(directory: Path, events: list[KubeEvent], progress: list[bytes]) -> object:
    archive = Archive(str(directory))
    archive.write(
        [
            ArchivedMessage("gpuyield.kube-events", 0, i, None, None, encode(e))
            for i, e in enumerate(events)
        ]
    )
    archive.write(
        [
            ArchivedMessage("gpuyield.job-progress", 0, i, None, None, raw)
            for i, raw in enumerate(progress)
        ]
    )
    result = CliRunner().invoke(
        app, ["simulate", "--from-archive", archive.url, "--policies", "gpuyield", "--json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_progress_archived_in_batches_simulates_as_the_same_summaries_one_by_one(
    tmp_path: Path,
) -> None:
    events, recorded = a_recorded_run()
    at = T0 + 2 * H  # half an hour after it started, a tenth done
    earlier = recorded[0].model_copy(update={"step": 100, "progress": 0.1, "updated_at": at})
    progress = [earlier, *recorded]
    one_by_one = simulated_from(tmp_path / "bare", events, [encode(p) for p in progress])
    halves = (progress[: len(progress) // 2], progress[len(progress) // 2 :])
    batches = [encode(JobProgressBatch(summaries=tuple(half))) for half in halves if half]
    assert len(batches) == 2
    assert simulated_from(tmp_path / "batched", events, batches) == one_by_one


def test_simulate_from_an_empty_archive_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["simulate", "--from-archive", str(tmp_path), "--json"])
    assert result.exit_code == 2
    assert "nothing to simulate" in result.stderr
