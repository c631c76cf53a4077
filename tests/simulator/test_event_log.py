"""``gpuyield simulate --archive``: a simulated run as the controller's inputs, in the archive.

The log must be one the live system could have written: every object added
before it changes and gone after it is deleted, no node holding more GPUs
than it has, each job's heartbeats moving forward; and it must be one the
controller's own tools read unchanged: ``gpuyield replay`` derives decisions
from it without rejecting an input or raising an invalid-input alert, the
victims it picks are jobs the log shows running where it says, and
``gpuyield audit`` tells a job's history from it.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuyield.agents.controller.progress import ForwardRule
from gpuyield.agents.controller.replay import Derivation, derive
from gpuyield.agents.simulator import POLICIES, Simulation, run_policy
from gpuyield.agents.simulator.event_log import (
    HEARTBEATS,
    JOB_PROGRESS,
    KUBE_EVENTS,
    TOPICS,
    YIELD_ACKS,
    EventLog,
    LogMessage,
    LogOptions,
    Progress,
    progress_at,
)
from gpuyield.agents.simulator.jobs import JobKind, JobSpec
from gpuyield.agents.simulator.recorded import recorded_workload
from gpuyield.agents.simulator.state import Phase, SimJob, SimPod
from gpuyield.agents.simulator.workload import generate
from gpuyield.cli import app
from gpuyield.replay_command import read_record  # the CLI's own reading of an archive
from gpuyield.schemas import Queue
from gpuyield.schemas.decoding import decode
from gpuyield.schemas.labels import JOB_LABEL
from gpuyield.schemas.messages import (
    CommandAction,
    Heartbeat,
    JobProgress,
    KubeEvent,
    KubeEventType,
    KubeKind,
    RoundOutcome,
    YieldAck,
)
from gpuyield.schemas.scenario import Scenario, WorkloadMix
from gpuyield.schemas.snapshot import GpuAmount, GpuLimit
from gpuyield.streams.archive import Archive, ArchiveWriter
from gpuyield.streams.partitioning import partition_for
from gpuyield.streams.topics import registry

GPUS_PER_NODE = 8

SCENARIO = Scenario(
    nodes=8,
    gpus_per_node=GPUS_PER_NODE,
    days=1.0,
    warmup_h=6.0,
    seed=1,
    queues=(
        Queue(
            name="production",
            weight=80,
            guarantee=GpuAmount(gpu=32),
            capability=GpuLimit(gpu=32),
            reclaimable=False,
        ),
        Queue(
            name="shared",
            weight=40,
            guarantee=GpuAmount(gpu=16),
            capability=GpuLimit(gpu=64),
            reclaimable=True,
        ),
    ),
    workload=(
        WorkloadMix(
            queue="production",
            kind="production",
            jobs_per_day=10,
            priority=1000,
            pods=(1, 2),
            duration_h_median=2,
            sla_factor=(1.5, 3.0),
        ),
        WorkloadMix(
            queue="shared",
            kind="shared",
            jobs_per_day=30,
            priority=100,
            pods=(1, 2, 4),
            duration_h_median=4,
        ),
    ),
)
"""Eight nodes, a production queue that reclaims from a busy shared one: yields happen."""

OPTIONS = LogOptions(heartbeat_s=1800.0, tick_s=300.0)


def simulate(policy: str, options: LogOptions = OPTIONS) -> tuple[Any, list[LogMessage]]:
    messages: list[LogMessage] = []
    jobs = generate(SCENARIO, random.Random(SCENARIO.seed))
    result = run_policy(SCENARIO, jobs, policy, observer=EventLog(messages.append, options))
    return result, messages


def write(messages: list[LogMessage], where: Path) -> str:
    layout = {spec.name: spec.partitions for spec in registry()}
    writer = ArchiveWriter(
        Archive(str(where)),
        {topic: layout[topic] for topic in TOPICS},
        lambda key, count: partition_for(key, range(count)),
        flush_records=500,
    )
    for m in messages:
        writer.add(m.topic, m.key, m.value, round(m.at * 1000))
    writer.close()
    return str(where)


@pytest.fixture(scope="module")
def gpuyield_run() -> tuple[Any, list[LogMessage]]:
    return simulate("gpuyield")


@pytest.fixture(scope="module", params=["gpuyield", "volcano-native"])
def any_run(
    request: pytest.FixtureRequest, gpuyield_run: tuple[Any, list[LogMessage]]
) -> tuple[Any, list[LogMessage]]:
    """A graceful run and a stock one (its kills restart jobs: pods deleted and created)."""
    return gpuyield_run if request.param == "gpuyield" else simulate(request.param)


@pytest.fixture(scope="module")
def gpuyield_archive(
    gpuyield_run: tuple[Any, list[LogMessage]], tmp_path_factory: pytest.TempPathFactory
) -> str:
    return write(gpuyield_run[1], tmp_path_factory.mktemp("sim-archive"))


def kube_events(messages: list[LogMessage]) -> Iterator[KubeEvent]:
    for m in messages:
        if m.topic == KUBE_EVENTS:
            yield decode(KubeEvent, m.value)


@pytest.mark.parametrize("policy", ["gpuyield", "volcano-native"])
def test_a_run_has_the_same_figures_with_or_without_its_event_log(policy: str) -> None:
    jobs = generate(SCENARIO, random.Random(SCENARIO.seed))
    without = run_policy(SCENARIO, jobs, policy)
    with_log, messages = simulate(policy)
    assert with_log.metrics == without.metrics
    assert messages


def test_the_same_run_writes_the_same_log() -> None:
    assert simulate("volcano-native")[1] == simulate("volcano-native")[1]


def test_every_object_is_added_before_it_changes_and_is_gone_after_it_is_deleted(
    any_run: tuple[Any, list[LogMessage]],
) -> None:
    present: dict[str, str | None] = {}  # key -> uid
    uids: set[str] = set()
    for event in kube_events(any_run[1]):
        uid = event.object["metadata"].get("uid")
        if event.type is KubeEventType.ADDED:
            assert event.key not in present, f"{event.key} added twice"
            assert uid is None or uid not in uids, f"{event.key} created again with its old uid"
            present[event.key] = uid
            if uid is not None:
                uids.add(uid)
        else:
            assert event.key in present, f"{event.type} of {event.key}, never added"
            assert present[event.key] == uid, f"{event.key} changed its uid without a deletion"
            if event.type is KubeEventType.DELETED:
                del present[event.key]
    kinds = {key.split("/", 1)[0] for key in present}
    assert kinds <= {"Node", "Queue", "Job", "Pod", "PodGroup"}


def test_no_node_ever_holds_more_gpus_than_it_has(
    any_run: tuple[Any, list[LogMessage]],
) -> None:
    nodes: set[str] = set()
    pods: dict[str, tuple[str, int]] = {}
    busiest = 0

    def check() -> None:
        nonlocal busiest
        used: dict[str, int] = defaultdict(int)
        for node, gpus in pods.values():
            used[node] += gpus
        for node, gpus in used.items():
            assert node in nodes, f"a pod runs on {node}, which no Node event announced"
            assert gpus <= GPUS_PER_NODE, f"{node} holds {gpus} GPUs"
        busiest = max(busiest, *used.values(), 0)

    at = None
    for event in kube_events(any_run[1]):
        if event.observed_at != at:
            check()  # between instants: within one, a pod may come before another goes
            at = event.observed_at
        if event.kind is KubeKind.NODE:
            nodes.add(event.name)
        if event.kind is not KubeKind.POD:
            continue
        spec = event.object["spec"]
        if event.type is KubeEventType.DELETED or not spec.get("nodeName"):
            pods.pop(event.key, None)
        else:
            gpus = int(spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
            pods[event.key] = (spec["nodeName"], gpus)
    check()
    assert busiest == GPUS_PER_NODE


def test_each_jobs_heartbeats_move_forward_and_report_checkpoints_already_written(
    gpuyield_run: tuple[Any, list[LogMessage]],
) -> None:
    beats: dict[str, list[Heartbeat]] = defaultdict(list)
    for m in gpuyield_run[1]:
        if m.topic == HEARTBEATS:
            beat = decode(Heartbeat, m.value)
            assert m.key == beat.job.encode()
            assert m.at == beat.sent_at
            beats[beat.job].append(beat)
    assert len(beats) > 20
    for job, seen in beats.items():
        assert [b.sent_at for b in seen] == sorted(b.sent_at for b in seen), job
        # Graceful yields lose no work, so a job's steps never go back.
        assert [b.step for b in seen] == sorted(b.step for b in seen), job
        for b in seen:
            if b.last_checkpoint_at is not None:
                assert b.last_checkpoint_at <= b.sent_at
                assert b.last_checkpoint_step is not None
                assert b.last_checkpoint_step <= b.step
    assert sum(1 for seen in beats.values() for b in seen if b.last_checkpoint_step) > 20


def test_progress_is_forwarded_by_the_configured_rule(
    gpuyield_run: tuple[Any, list[LogMessage]],
) -> None:
    """Forwarding only checkpoints: each job's first summary, then one per new checkpoint."""
    only_checkpoints = ForwardRule(min_progress_delta=1.0, max_silence_s=1e12)
    _, messages = simulate("gpuyield", LogOptions(1800.0, 300.0, forward=only_checkpoints))
    last: dict[str, JobProgress] = {}
    for m in messages:
        if m.topic == JOB_PROGRESS:
            record = decode(JobProgress, m.value)
            before = last.get(record.job)
            assert before is None or record.last_checkpoint_at != before.last_checkpoint_at
            last[record.job] = record
    default = sum(1 for m in gpuyield_run[1] if m.topic == JOB_PROGRESS)
    assert len(last) > 20
    assert sum(1 for m in messages if m.topic == JOB_PROGRESS) < default


def test_only_the_graceful_policy_acknowledges_yields(
    gpuyield_run: tuple[Any, list[LogMessage]],
) -> None:
    result, messages = gpuyield_run
    acks = [decode(YieldAck, m.value) for m in messages if m.topic == YIELD_ACKS]
    assert acks
    assert result.metrics.evictions
    assert {a.outcome.value for a in acks} == {"checkpointed"}
    assert not [m for m in simulate("volcano-native")[1] if m.topic == YIELD_ACKS]


@pytest.fixture(scope="module")
def derivation(gpuyield_archive: str) -> Derivation:
    """The decider's steps over the whole log, read as ``gpuyield replay`` reads an archive."""
    table = Archive(gpuyield_archive).read().to_pydict()
    record = read_record(
        zip(table["topic"], table["partition"], table["offset"], table["value"], strict=True), ""
    )
    return derive(record)


def test_replay_reads_the_log_unchanged_and_derives_without_rejecting_an_input(
    gpuyield_archive: str,
) -> None:
    until = str(OPTIONS.epoch + 3600)  # the first hours: the CLI's reading, not the decider's
    args = ["replay", "--archive", gpuyield_archive, "--until", until, "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["journalled"] is False
    assert report["recorded"] is False
    assert report["steps"] > 100
    assert report["rejected_inputs"] == 0
    assert report["differences"] == 0
    assert all(i["status"] == "derived" for i in report["items"])


def test_the_decider_raises_no_invalid_input_alert_on_the_whole_log(
    derivation: Derivation,
) -> None:
    assert derivation.rejected == 0
    assert "invalid-input" not in derivation.alerts
    assert derivation.decisions


def test_the_decider_evicts_only_jobs_the_log_shows_running_where_it_sends_the_command(
    derivation: Derivation, gpuyield_run: tuple[Any, list[LogMessage]]
) -> None:
    yields = [c for c in derivation.commands.values() if c.action is CommandAction.YIELD]
    assert yields, "the decider evicts for production on this log"
    assert {d.outcome for d in derivation.decisions.values()} >= {RoundOutcome.YIELD}

    running: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    opened: dict[str, tuple[str, str, float]] = {}
    for event in kube_events(gpuyield_run[1]):
        if event.kind is not KubeKind.POD:
            continue
        node = event.object["spec"].get("nodeName")
        job = f"{event.namespace}/{event.object['metadata']['labels'][JOB_LABEL]}"
        if event.type is not KubeEventType.DELETED and node and event.key not in opened:
            opened[event.key] = (job, node, event.observed_at)
        elif event.type is KubeEventType.DELETED and event.key in opened:
            job, node, since = opened.pop(event.key)
            running[(job, node)].append((since, event.observed_at))
    for job, node, since in opened.values():
        running[(job, node)].append((since, math.inf))
    for command in yields:
        spans = running[(command.job, command.node)]
        assert any(a <= command.issued_at <= b for a, b in spans), command


def test_an_audit_tells_a_yielded_jobs_history_from_the_log(
    gpuyield_archive: str, gpuyield_run: tuple[Any, list[LogMessage]]
) -> None:
    ack = next(decode(YieldAck, m.value) for m in gpuyield_run[1] if m.topic == YIELD_ACKS)
    result = CliRunner().invoke(app, ["audit", ack.job, "--archive", gpuyield_archive, "--json"])
    assert result.exit_code == 0, result.output
    history = json.loads(result.output)
    assert history["submitted_at"] is not None
    assert history["started_at"] is not None
    assert history["progress"]["heartbeats"] > 0
    assert history["suspended_at"], "the yield suspended it (its Volcano Job was Aborted)"
    acked = [y for y in history["yields"] if y["command_id"] == ack.command_id]
    assert acked
    assert acked[0]["outcome"] == "checkpointed"
    assert acked[0]["checkpoint_step"] == ack.checkpoint_step
    assert acked[0]["command_recorded"] is False


def test_simulate_writes_one_archive_per_policy_and_never_over_another(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(SCENARIO.model_copy(update={"days": 0.25}).model_dump_json())
    out = tmp_path / "logs"
    args = ["simulate", "--scenario", str(scenario), "--archive", str(out), "--heartbeat-s", "900"]
    args += ["--policies", "volcano-native,gpuyield"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    for policy in ("volcano-native", "gpuyield"):
        assert f"{out / policy}: " in result.output  # its summary line
        assert Archive(str(out / policy)).read([KUBE_EVENTS]).num_rows > 0

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2
    assert "already holds gpuyield.kube-events: write to a new directory" in again.output


def test_the_tick_and_heartbeat_periods_need_an_archive() -> None:
    result = CliRunner().invoke(app, ["simulate", "--days", "0.1", "--tick-s", "5"])
    assert result.exit_code == 2
    assert "--heartbeat-s and --tick-s: only meaningful with --archive" in result.output


@given(
    running_pods=st.integers(0, 4),
    work=st.floats(0, 3600),
    run_clock=st.floats(0, 7200),
    interval=st.floats(60, 3600),
    dt=st.floats(0, 20_000),
)
def test_a_jobs_work_read_between_changes_is_what_the_engine_would_compute(
    running_pods: int, work: float, run_clock: float, interval: float, dt: float
) -> None:
    """``progress_at`` reads the engine's own arithmetic without advancing the job."""
    spec = JobSpec(
        name="shared-00001",
        queue="shared",
        kind=JobKind.SHARED,
        submit_s=0.0,
        pods=4,
        gpus_per_pod=8,
        min_available=2,
        duration_s=10_000.0,
        checkpoint_interval_s=interval,
        priority=100,
    )
    job = SimJob(
        spec=spec,
        pods=[SimPod(i, node=i if i < running_pods else None) for i in range(4)],
        phase=Phase.RUNNING,
        work=work,
        checkpoint_work=work / 2,
        last_update=1000.0,
        run_clock=run_clock,
        last_checkpoint_at=900.0,
    )
    read = progress_at(job, 1000.0 + dt)
    sim = Simulation(SCENARIO, [], POLICIES["volcano-gang"](SCENARIO))
    advanced = copy.deepcopy(job)
    sim.now = 1000.0 + dt
    sim._advance(advanced)
    assert read == Progress(advanced.work, advanced.checkpoint_work, advanced.last_checkpoint_at)
    assert job.work == work  # read, not advanced


def test_the_log_can_be_simulated_again_with_its_cluster_and_jobs(
    gpuyield_run: tuple[Any, list[LogMessage]],
) -> None:
    """``simulate --from-archive`` on a simulated log: the closed loop gets the same pool."""
    messages = gpuyield_run[1]
    progress = [decode(JobProgress, m.value) for m in messages if m.topic == JOB_PROGRESS]
    found = recorded_workload(kube_events(messages), progress, SCENARIO)
    assert (found.scenario.nodes, found.scenario.gpus_per_node) == (8, GPUS_PER_NODE)
    assert found.scenario.queues == SCENARIO.queues
    submitted = generate(SCENARIO, random.Random(SCENARIO.seed))
    horizon = SCENARIO.days * 86400
    assert {j.name.split("/", 1)[1] for j in found.jobs} == {
        j.name for j in submitted if j.submit_s <= horizon
    }
    by_name = {j.name: j for j in submitted}
    for job in found.jobs:
        original = by_name[job.name.split("/", 1)[1]]
        assert (job.queue, job.pods, job.gpus_per_pod, job.priority) == (
            original.queue,
            original.pods,
            original.gpus_per_pod,
            original.priority,
        )
