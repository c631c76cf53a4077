"""Volcano Jobs aborted by someone else: shown by ``gpuyield status``, adopted only when asked."""

from __future__ import annotations

from typing import Any

from cluster_objects import node, pod, pod_group, queue
from harness import NOW, Controller, ReadsCounted, production_demand, shared_pool
from rich.console import Console

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.live_view import live_view
from gpuyield.schemas.messages import CommandAction, Tick, YieldAck, YieldOutcome
from gpuyield.status_command import render


def volcano_job(name: str, namespace: str, phase: str, *, replicas: int = 2) -> dict[str, Any]:
    container = {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "queue": "research",
            "minAvailable": replicas,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
        "status": {"state": {"phase": phase}},
    }


def aborted_by_an_operator(config: ControllerConfig) -> Controller:
    """Two free 8-GPU nodes and a research gang someone ran ``vcctl job suspend`` on."""
    c = Controller(config=config)
    at = NOW - 60
    for i in range(2):
        c.add(node(f"gpu-{i:02d}"), at)
    c.add(queue("research", capability=16), at)
    c.add(
        pod_group(
            "ablation", namespace="research", queue="research", min_member=2, phase="Pending"
        ),
        at,
    )
    c.add(volcano_job("ablation", "research", "Aborted"), at)
    return c


def resumes(c: Controller) -> list[str]:
    return [cmd.job for cmd in c.commands if cmd.action is CommandAction.RESUME]


def test_status_lists_a_job_aborted_outside_gpuyield() -> None:
    c = aborted_by_an_operator(ControllerConfig())
    view = live_view(c.records, c.config, NOW)
    assert view["aborted_outside"] == [
        {"job": "research/ablation", "phase": "Aborted", "queue": "research", "adopted": False}
    ]
    console = Console(record=True, width=160)
    render(console, view, NOW)
    text = console.export_text()
    assert "Aborted outside gpuyield" in text
    assert "research/ablation" in text
    assert "left alone" in text


def test_by_default_gpuyield_leaves_a_job_aborted_by_someone_else_alone() -> None:
    c = aborted_by_an_operator(ControllerConfig())
    c.tick(NOW + 3600)
    assert resumes(c) == []
    assert "suspended/research/ablation" not in c.records


def test_when_asked_gpuyield_adopts_it_and_resumes_it_like_its_own() -> None:
    c = aborted_by_an_operator(ControllerConfig(adopt_aborted_jobs=True))
    assert c.records["suspended/research/ablation"]["adopted"] is True
    c.tick(NOW + 1)
    assert resumes(c) == ["research/ablation"]
    view = live_view(c.records, c.config, NOW + 1)
    assert view["aborted_outside"][0]["adopted"] is True


def test_an_adopted_job_is_resumed_once() -> None:
    c = aborted_by_an_operator(ControllerConfig(adopt_aborted_jobs=True))
    for dt in (1, 60, 120):
        c.tick(NOW + dt)
    assert resumes(c) == ["research/ablation"]


def test_a_job_gpuyield_suspended_itself_is_not_listed_as_aborted_outside() -> None:
    c = shared_pool()
    c.config = ControllerConfig(adopt_aborted_jobs=True)
    production_demand(c)
    victim = c.commands[0].job
    # The node agent aborts the job before its pods go: the watch sees Aborting mid-yield.
    c.change(volcano_job(victim.split("/")[1], "research", "Aborting"), NOW + 5)
    assert live_view(c.records, c.config, NOW + 5)["aborted_outside"] == []
    for command in [cmd for cmd in c.commands if cmd.job == victim]:
        c.feed(
            YieldAck(
                command_id=command.command_id,
                node=command.node,
                job=command.job,
                outcome=YieldOutcome.CHECKPOINTED,
                acked_at=NOW + 40,
            )
        )
    c.change(volcano_job(victim.split("/")[1], "research", "Aborted"), NOW + 41)
    assert live_view(c.records, c.config, NOW + 41)["aborted_outside"] == []
    assert c.records[f"suspended/{victim}"].get("adopted", False) is False


def test_a_running_job_is_never_listed() -> None:
    c = shared_pool()
    c.add(volcano_job("sweep-0", "research", "Running"), NOW)
    c.add(pod("sweep-0", 0, namespace="research", node="gpu-00"), NOW)
    assert live_view(c.records, c.config, NOW)["aborted_outside"] == []


def test_looking_for_jobs_to_adopt_reads_only_the_aborted_ones() -> None:
    """Every input used to read every Volcano Job's record to find the aborted ones
    (30,000 at 10,000 nodes); the decider's index knows which they are."""
    c = aborted_by_an_operator(ControllerConfig())  # not adopted yet
    for i in range(40):
        c.add(volcano_job(f"sweep-{i}", "research", "Running", replicas=0), NOW - 30)
    table = ReadsCounted(c.records)
    config = ControllerConfig(adopt_aborted_jobs=True)
    index = RecordIndex.build(c.records, config)

    outcome = step(table, Tick(at=NOW + 1), "in/0/1", config, index=index)

    assert outcome.writes["suspended/research/ablation"]["adopted"] is True
    assert not [key for key in table.read if key.startswith("vjob/research/sweep-")]
