"""From the API server to the yield commands: ``gpuyield watch`` and ``gpuyield worker`` together.

The fake API server speaks the real list/watch protocol; the watcher is the
real command with a kubeconfig pointing at it; the worker is the real
process. Nothing in between is simulated.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.kube_api import FakeKubeApi
from fakes.kube_objects import a_gpu_node, a_queue, a_volcano_job, pod_group_for, pods_for
from fakes.kube_store import resource_of
from fakes.waiting import eventually
from live_worker import GPUYIELD, LiveWorker, decoded, read_until

from gpuyield.schemas.messages import (
    Alert,
    AlertKind,
    AlertState,
    Decision,
    Reservation,
    YieldCommand,
)
from gpuyield.streams.kube_reservations import TAINT_KEY, taint_value
from gpuyield.streams.taints import tolerates

pytestmark = pytest.mark.slow
GPU = "nvidia.com/gpu"


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: gpuyield, user: {token: not-checked}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: gpuyield}}]\n"
        "current-context: fake\n",
        encoding="utf-8",
    )
    return path


def running_job(api: FakeKubeApi, name: str, nodes: list[str]) -> None:
    job = a_volcano_job(name, namespace="research", queue="research", replicas=2, gpus_per_pod=8)
    api.create(job)
    api.create(pod_group_for(job, phase="Running"))
    for pod in pods_for(job, nodes=nodes):
        pod["spec"]["priority"] = 100
        api.create(pod)


def pending_production_job(api: FakeKubeApi, name: str) -> None:
    job = a_volcano_job(name, namespace="prod", queue="production", replicas=1, gpus_per_pod=8)
    api.create(job)
    group = pod_group_for(job, phase="Inqueue")
    group["status"]["conditions"] = [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources"}
    ]
    api.create(group)
    for pod in pods_for(job):
        pod["spec"]["priority"] = 1000
        api.create(pod)


async def test_a_pending_gang_on_the_api_server_becomes_yield_commands_and_job_events(
    worker_factory, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    with FakeKubeApi() as api:
        for i in range(4):
            api.create(a_gpu_node(f"gpu-{i:02d}"))
        api.create(
            a_queue(
                "production", weight=4, capability={GPU: 32}, guarantee={GPU: 16}, reclaimable=False
            )
        )
        api.create(a_queue("research", capability={GPU: 32}))
        running_job(api, "sweep-a", ["gpu-00", "gpu-01"])
        running_job(api, "sweep-b", ["gpu-02", "gpu-03"])
        config = kubeconfig(tmp_path / "kubeconfig", api.url)
        worker: LiveWorker = worker_factory(
            env={"GPUYIELD_KUBE_EVENTS": "true", "GPUYIELD_KUBECONFIG": str(config)}
        )
        with watching(api, worker, kafka_bootstrap, topic_prefix, tmp_path) as watch:
            worker.wait_ready()
            pending_production_job(api, "ft-llama")
            decisions_topic = topic_prefix + "gpuyield.decisions"
            commands_topic = topic_prefix + "gpuyield.yield-commands"
            seen = await read_until(
                kafka_bootstrap,
                [decisions_topic, commands_topic],
                lambda s: len(s[commands_topic]) >= 2,
                settle_s=1.0,
            )
        watch_log = (tmp_path / "watch.log").read_text(errors="replace")
        decisions = [d for d in decoded(seen[decisions_topic], Decision) if d.commands]
        commands = decoded(seen[commands_topic], YieldCommand)
        assert [d.demand for d in decisions] == ["prod/ft-llama"], worker.tail() + watch_log
        victim = decisions[0].plan.victims[0].job
        assert victim in ("research/sweep-a", "research/sweep-b")
        assert {c.job for c in commands} == {victim}
        assert len(commands) == 2
        assert watch.returncode == 0, watch_log
        # Kubernetes' own record: why, on each Volcano Job (kubectl describe vcjob shows it).
        await eventually(lambda: len(_events(api)) >= 2, "the Events")
        by_job = {e["regarding"]["name"]: e for e in _events(api)}
        spared = ({"sweep-a", "sweep-b"} - {victim.split("/")[1]}).pop()
        yielded = by_job[victim.split("/")[1]]
        assert yielded["reason"] == "GracefulYield"
        assert yielded["note"].startswith("yields to prod/ft-llama (preemptor); rule: ")
        job = api.get(a_volcano_job(victim.split("/")[1], namespace="research"))
        assert job is not None
        assert yielded["regarding"]["uid"] == job["metadata"]["uid"]
        assert by_job[spared]["reason"] == "Spared"


def _events(api: FakeKubeApi) -> list[dict[str, Any]]:
    resource = resource_of("events.k8s.io/v1", "Event")
    return [e for _, e in api.call(lambda: api.store.snapshot(resource, "research"))]


def _taint_values(api: FakeKubeApi, name: str) -> list[str]:
    node = api.get(a_gpu_node(name))
    assert node is not None
    return [t["value"] for t in node["spec"].get("taints", []) if t["key"] == TAINT_KEY]


async def test_the_freed_nodes_are_reserved_for_the_preemptor_until_volcano_places_it(
    worker_factory, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    with FakeKubeApi() as api:
        for i in range(4):
            api.create(a_gpu_node(f"gpu-{i:02d}"))
        api.create(
            a_queue(
                "production", weight=4, capability={GPU: 32}, guarantee={GPU: 16}, reclaimable=False
            )
        )
        api.create(a_queue("research", capability={GPU: 32}))
        running_job(api, "sweep-a", ["gpu-00", "gpu-01"])
        running_job(api, "sweep-b", ["gpu-02", "gpu-03"])
        config = kubeconfig(tmp_path / "kubeconfig", api.url)
        worker: LiveWorker = worker_factory(
            env={"GPUYIELD_KUBE_RESERVATIONS": "true", "GPUYIELD_KUBECONFIG": str(config)}
        )
        with watching(api, worker, kafka_bootstrap, topic_prefix, tmp_path):
            worker.wait_ready()
            pending_production_job(api, "ft-llama")
            commands_topic = topic_prefix + "gpuyield.yield-commands"
            reservations_topic = topic_prefix + "gpuyield.reservations"
            seen = await read_until(
                kafka_bootstrap,
                [commands_topic, reservations_topic],
                lambda s: len(s[commands_topic]) >= 2,
            )
            assert len(seen[commands_topic]) == 2, worker.tail()
            (hold,) = decoded(seen[reservations_topic], Reservation)
            # Applied before the commands went out: in place once they can be read.
            held = sorted(hold.nodes)
            value = taint_value(["prod/ft-llama"])
            assert [_taint_values(api, n) for n in held] == [[value]] * len(held), worker.tail()
            others = sorted({f"gpu-{i:02d}" for i in range(4)} - set(held))
            assert all(not _taint_values(api, n) for n in others)
            ((_, pending),) = api.call(lambda: api.store.snapshot(resource_of("v1", "Pod"), "prod"))
            assert all(tolerates(pending, api.get(a_gpu_node(n)) or {}) for n in held)

            # Volcano places the preemptor: its PodGroup runs, and the hold is released.
            ((_, group),) = api.call(
                lambda: api.store.snapshot(
                    resource_of("scheduling.volcano.sh/v1beta1", "PodGroup"), "prod"
                )
            )
            api.modify(group, lambda g: g["status"].update(phase="Running", conditions=[]))
            seen = await read_until(
                kafka_bootstrap,
                [reservations_topic],
                lambda s: any(b'"released"' in r for r in s[reservations_topic]),
            )
            await eventually(
                lambda: all(not _taint_values(api, n) for n in held), "the taints to go"
            )
        states = [r.state.value for r in decoded(seen[reservations_topic], Reservation)]
        assert states == ["held", "released"]


@contextlib.contextmanager
def watching(
    api: FakeKubeApi, worker: LiveWorker, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``gpuyield watch`` on ``api`` for the block, publishing where ``worker`` reads."""
    config = kubeconfig(tmp_path / "kubeconfig", api.url)
    env = {
        **os.environ,
        "GPUYIELD_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "GPUYIELD_TOPIC_PREFIX": topic_prefix,
        "GPUYIELD_REDIS_URL": worker.redis_url,
        "GPUYIELD_STATE_DIR": str(tmp_path / "watch"),
    }
    with (tmp_path / "watch.log").open("ab") as log:
        watch = subprocess.Popen(
            [GPUYIELD, "watch", "--kubeconfig", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield watch
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.wait(20)


def evicted_by_volcano(pod: dict[str, Any]) -> None:
    """What Volcano's evictor writes on its victim's status before it deletes it."""
    conditions = [c for c in pod["status"]["conditions"] if c["type"] != "Ready"]
    pod["status"]["conditions"] = [
        *conditions,
        {
            "type": "Ready",
            "status": "False",
            "reason": "Evict",
            "message": "Pod is evicted, because of reclaim",
        },
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "volcano: preempting to accommodate a higher priority pod",
        },
    ]


async def test_a_pod_volcano_reclaims_on_the_api_server_raises_volcano_evicting(
    worker_factory, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    with FakeKubeApi() as api:
        for i in range(2):
            api.create(a_gpu_node(f"gpu-{i:02d}"))
        api.create(a_queue("research", capability={GPU: 16}))
        running_job(api, "sweep-a", ["gpu-00", "gpu-01"])
        worker: LiveWorker = worker_factory()
        with watching(api, worker, kafka_bootstrap, topic_prefix, tmp_path) as watch:
            worker.wait_ready()
            job = a_volcano_job("sweep-a", namespace="research", replicas=2, gpus_per_pod=8)
            victim = pods_for(job, nodes=["gpu-00", "gpu-01"])[0]
            api.modify(victim, evicted_by_volcano)
            api.delete(victim)
            alerts_topic = topic_prefix + "gpuyield.alerts"
            seen = await read_until(
                kafka_bootstrap,
                [alerts_topic],
                lambda s: bool(s[alerts_topic]),
                settle_s=2.0,
            )
        alerts = decoded(seen[alerts_topic], Alert)
        watch_log = (tmp_path / "watch.log").read_text(errors="replace")
        assert [(a.kind, a.state) for a in alerts] == [
            (AlertKind.VOLCANO_EVICTING, AlertState.FIRING)
        ], worker.tail() + watch_log
        assert alerts[0].job == "research/sweep-a"
        assert alerts[0].details["action"] == "reclaim"
        assert alerts[0].details["pod"] == f"research/{victim['metadata']['name']}"
        assert watch.returncode == 0, watch_log
