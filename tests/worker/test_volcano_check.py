"""The worker's start-up check of Volcano: an alert when Volcano preempts beside gpuyield.

The API server is the fake one (the real protocol over a socket); the check is
the function ``gpuyield worker`` runs, and at the end the real ``gpuyield
worker`` process, publishing on the session's broker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from fakes.kube_api import FakeKubeApi
from fakes.waiting import eventually
from live_worker import LiveWorker, decoded

from gpuyield.agents.worker.volcano_check import check_volcano_scheduler
from gpuyield.schemas.messages import Alert, AlertKind
from gpuyield.streams.volcano_config import ConfigMapKey, read_config_map_key

REPO = Path(__file__).parents[2]
GPUYIELD_CONF = (REPO / "deploy" / "volcano" / "volcano-scheduler.conf").read_text()
STOCK_WITH_PREEMPT = """\
actions: "enqueue, allocate, preempt, backfill, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""
WHERE = ConfigMapKey("volcano-system", "volcano-scheduler-configmap", "volcano-scheduler.conf")
NOW = 1_790_000_000.0


def scheduler_configmap(conf: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": WHERE.name, "namespace": WHERE.namespace},
        "data": {WHERE.key: conf},
    }


class Published(list[Alert]):
    async def __call__(self, alert: Alert) -> None:
        self.append(alert)


async def run_check(api: FakeKubeApi, published: Published) -> Alert | None:
    return await check_volcano_scheduler(
        lambda: read_config_map_key(WHERE, api.configuration()),
        published,
        cluster_id="gpu-west",
        clock=lambda: NOW,
    )


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        yield api


async def test_preempt_and_reclaim_on_raise_one_critical_alert(
    kube_api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    stored = kube_api.create(scheduler_configmap(STOCK_WITH_PREEMPT))
    published = Published()

    with caplog.at_level(logging.INFO):
        alert = await run_check(kube_api, published)

    assert published == [alert]
    assert alert is not None
    assert alert.kind is AlertKind.VOLCANO_PREEMPTING
    assert alert.severity == "critical"
    assert alert.raised_at == NOW
    assert alert.details["actions"] == ["preempt", "reclaim"]
    assert alert.details["configmap"] == "volcano-system/volcano-scheduler-configmap"
    assert alert.details["resource_version"] == stored["metadata"]["resourceVersion"]
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "volcano-preempting" in record.getMessage()
    assert "volcano-system/volcano-scheduler-configmap" in record.getMessage()


async def test_gpuyields_configuration_raises_nothing(
    kube_api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.create(scheduler_configmap(GPUYIELD_CONF))
    published = Published()

    with caplog.at_level(logging.INFO):
        alert = await run_check(kube_api, published)

    assert alert is None
    assert published == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "runs enqueue, allocate, backfill; no preempt or reclaim" in caplog.text


@pytest.mark.parametrize(
    ("deny", "why"), [(True, "forbidden"), (False, "not-found")], ids=["403", "404"]
)
async def test_a_configmap_it_may_not_or_cannot_read_is_logged_at_info_and_nothing_more(
    kube_api: FakeKubeApi, caplog: pytest.LogCaptureFixture, deny: bool, why: str
) -> None:
    if deny:
        kube_api.create(scheduler_configmap(STOCK_WITH_PREEMPT))
        kube_api.forbid("get", "configmaps", namespace=WHERE.namespace, name=WHERE.name)
    published = Published()

    with caplog.at_level(logging.INFO):
        alert = await run_check(kube_api, published)

    assert alert is None
    assert published == []
    (record,) = [r for r in caplog.records if r.name.endswith("volcano_check")]
    assert record.levelno == logging.INFO
    assert "cannot read ConfigMap volcano-system/volcano-scheduler-configmap" in (
        record.getMessage()
    )
    assert f"({why})" in record.getMessage()


async def test_a_configuration_volcano_would_reject_is_a_warning_without_an_alert(
    kube_api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.create(scheduler_configmap('actions: "enqueue, allocate, gangPreempt"'))
    published = Published()

    alert = await run_check(kube_api, published)

    assert alert is None
    assert published == []
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "no action 'gangPreempt'" in record.getMessage()


# --- the real worker process ---------------------------------------------------------------


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: gpuyield-worker, user: {token: not-checked}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: gpuyield-worker}}]\n"
        "current-context: fake\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("conf", "logged"),
    [("preempting", "alert volcano-preempting"), ("gpuyield", "no preempt or reclaim")],
)
async def test_the_worker_checks_volcano_when_it_starts(
    worker_factory,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    conf: str,
    logged: str,
) -> None:
    with FakeKubeApi() as api:
        api.create(
            scheduler_configmap(STOCK_WITH_PREEMPT if conf == "preempting" else GPUYIELD_CONF)
        )
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", api.url)))
        worker: LiveWorker = worker_factory()
        # The check runs (and publishes) before the agents start: no need to wait for them.
        await eventually(
            lambda: logged in worker.log.read_text(errors="replace"),
            lambda: f"{logged!r} in the log:\n{worker.tail()}",
            timeout_s=60,
        )
        raw = await everything_on(kafka_bootstrap, topic_prefix + "gpuyield.alerts")
        requests = [r.path for r in api.requests]
    alerts = decoded(raw, Alert)
    assert requests == ["/api/v1/namespaces/volcano-system/configmaps/volcano-scheduler-configmap"]
    if conf == "preempting":
        assert [a.kind for a in alerts] == [AlertKind.VOLCANO_PREEMPTING], worker.tail()
        assert alerts[0].details["actions"] == ["preempt", "reclaim"]
    else:
        assert alerts == [], worker.tail()


async def everything_on(bootstrap: str, topic: str) -> list[bytes]:
    """What the topic holds now, up to its end offsets (so an absence is seen, not waited for)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or {0}]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        values: list[bytes] = []
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values.extend(r.value for r in records if r.value is not None)
        return values
    finally:
        await consumer.stop()
