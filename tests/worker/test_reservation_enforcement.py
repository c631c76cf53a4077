"""The worker's reservation shell: the decider's holds to the API server, failures to alerts.

``enforce_reservations`` against the fake API server, with the decider's
table as plain records and the step's ``Reservation`` messages as the decider
emits them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from fakes.kube_api import FakeKubeApi
from fakes.kube_objects import a_gpu_node, a_volcano_job, pods_for
from live_worker import GPUYIELD

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.worker.reservations import ReservationSync, enforce_reservations, holds_of
from gpuyield.schemas.messages import AlertKind, Reservation, ReservationState
from gpuyield.streams.kube_reservations import TAINT_KEY, ReservationEnforcer, taint_value

NOW = 1_764_000_000.0


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        for i in range(3):
            api.create(a_gpu_node(f"gpu-{i:02d}"))
        job = a_volcano_job("ft-llama", namespace="prod", queue="production", replicas=1)
        api.create(job)
        for pod in pods_for(job):
            api.create(pod)
        yield api


@pytest.fixture
def sync(kube_api: FakeKubeApi) -> Iterator[ReservationSync]:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    yield ReservationSync(ReservationEnforcer(client, clock=lambda: NOW), reconcile_every_s=30)
    client.close()


def held(job: str, nodes: dict[str, int]) -> Reservation:
    return Reservation(
        job=job,
        state=ReservationState.HELD,
        nodes=nodes,
        until=NOW + 600,
        decision_id="d-1",
        at=NOW,
    )


def record(nodes: dict[str, int]) -> dict:
    return {"nodes": nodes, "until": NOW + 600, "decision": "d-1"}


def our_taint(api: FakeKubeApi, name: str) -> str | None:
    node = api.get(a_gpu_node(name))
    assert node is not None
    values = [t["value"] for t in node["spec"].get("taints", []) if t["key"] == TAINT_KEY]
    return values[0] if values else None


async def test_without_kubernetes_access_nothing_is_enforced(kube_api: FakeKubeApi) -> None:
    before = len(kube_api.requests)

    alerts = await enforce_reservations(
        ReservationSync(None), {}, [held("prod/ft-llama", {"gpu-00": 8})], NOW
    )

    assert alerts == []
    assert len(kube_api.requests) == before


async def test_the_first_step_after_a_start_reconciles_with_the_table(
    kube_api: FakeKubeApi, sync: ReservationSync
) -> None:
    kube_api.modify(  # left by the owner that crashed: nobody holds gpu-02 any more
        a_gpu_node("gpu-02"),
        lambda n: n["spec"]["taints"].append(
            {"key": TAINT_KEY, "value": "0123456789abcdef0123", "effect": "NoSchedule"}
        ),
    )

    alerts = await enforce_reservations(
        sync, {"reservation/prod/ft-llama": record({"gpu-00": 8})}, [], NOW
    )

    assert alerts == []
    assert our_taint(kube_api, "gpu-00") == taint_value(["prod/ft-llama"])
    assert our_taint(kube_api, "gpu-02") is None


async def test_between_reconciles_a_step_applies_its_own_holds(
    kube_api: FakeKubeApi, sync: ReservationSync
) -> None:
    await enforce_reservations(sync, {}, [], NOW)  # the start's reconcile: nothing held

    await enforce_reservations(sync, {}, [held("prod/ft-llama", {"gpu-01": 8})], NOW + 5)

    assert our_taint(kube_api, "gpu-01") == taint_value(["prod/ft-llama"])


async def test_a_failed_hold_is_an_alert_naming_the_job_and_the_nodes(
    kube_api: FakeKubeApi, sync: ReservationSync
) -> None:
    await enforce_reservations(sync, {}, [], NOW)
    kube_api.fail_next(status=503, verb="patch")

    alerts = await enforce_reservations(sync, {}, [held("prod/ft-llama", {"gpu-01": 8})], NOW + 5)

    (alert,) = alerts
    assert alert.kind is AlertKind.RESERVATION_FAILED
    assert alert.job == "prod/ft-llama"
    assert "gpu-01" in alert.message
    assert "HTTP 503" in alert.details["error"]


async def test_a_failed_hold_is_retried_by_the_next_reconcile(
    kube_api: FakeKubeApi, sync: ReservationSync
) -> None:
    await enforce_reservations(sync, {}, [], NOW)
    kube_api.fail_next(status=503, verb="patch")
    table = {"reservation/prod/ft-llama": record({"gpu-01": 8})}
    await enforce_reservations(sync, table, [held("prod/ft-llama", {"gpu-01": 8})], NOW + 5)

    await enforce_reservations(sync, table, [], NOW + 31)

    assert our_taint(kube_api, "gpu-01") == taint_value(["prod/ft-llama"])


def test_unreadable_reservation_records_are_skipped() -> None:
    records = {
        "reservation/prod/ft-llama": record({"gpu-00": 8}),
        "reservation/prod/broken": {"nodes": {"gpu-01": 8}},  # no until
        "demand/prod/ft-llama": {"victims": []},
    }

    assert [h.job for h in holds_of(records)] == ["prod/ft-llama"]


class UnlistedTable(dict[str, Any]):
    """A big live table: its records may be read by key, never walked whole."""

    def items(self) -> Any:
        raise AssertionError("the whole table was walked")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the whole table was listed")


def test_with_the_deciders_index_only_the_reservation_records_are_read() -> None:
    records = {
        "reservation/prod/ft-llama": record({"gpu-00": 8}),
        "reservation/prod/ft-mistral": record({"gpu-01": 8, "gpu-02": 8}),
        "demand/prod/ft-llama": {"victims": []},
        "node/gpu-00": {"gpus": 8},
    }
    index = RecordIndex.build(records, ControllerConfig())

    holds = holds_of(UnlistedTable(records), index)

    assert holds == holds_of(records)
    assert [h.job for h in holds] == ["prod/ft-llama", "prod/ft-mistral"]


def test_a_worker_told_to_enforce_without_a_usable_kubeconfig_exits_2_naming_it(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "GPUYIELD_KUBE_RESERVATIONS": "true",
        "GPUYIELD_KUBECONFIG": str(tmp_path / "missing"),
        "GPUYIELD_STATE_DIR": str(tmp_path / "state"),
    }

    result = subprocess.run(
        [GPUYIELD, "worker"], env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 2
    assert result.stderr.startswith("gpuyield: GPUYIELD_KUBE_RESERVATIONS is on")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "state" / "endpoints.json").exists()  # no service was started
