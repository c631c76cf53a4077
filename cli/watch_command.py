"""``gpuyield watch``: the Kubernetes source, publishing every change to ``gpuyield.kube-events``.

Run it once per cluster (one replica: a second would publish every change
twice; harmless, since the decider applies objects idempotently, but
wasteful). It needs list/watch on nodes, pods and Volcano's jobs, podgroups
and queues (deploy/ has the RBAC). Messages are keyed by object, so one
object's changes stay in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Annotated, Any

import kubernetes.client
import typer
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from kubernetes.config.config_exception import ConfigException

from gpuyield.cli_io import fail
from gpuyield.cli_options import SettingsFile
from gpuyield.endpoints import recorded_bootstrap
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import KubeEvent
from gpuyield.service_io import configure_logging, settings_or_fail
from gpuyield.streams.broker_state import guard_broker, observe
from gpuyield.streams.kafka_client import aiokafka_kwargs
from gpuyield.streams.kube_resources import load_kube_configuration
from gpuyield.streams.kube_watch import KubeWatcher
from gpuyield.streams.settings import Settings
from gpuyield.streams.shutdown import ShutdownDeadline
from gpuyield.streams.topics import KUBE_EVENTS, TopicCreationError, ensure_topics, registry

log = logging.getLogger(__name__)


def watch_command(
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="Kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube)."),
    ] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context.")] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Watch only these namespaces (repeatable)."),
    ] = None,
    config: SettingsFile = None,
    loglevel: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Watch nodes, pods and Volcano objects; publish every change to Kafka."""
    settings = settings_or_fail(config)
    configure_logging(loglevel)
    bootstrap = recorded_bootstrap(settings)
    if not bootstrap:
        fail("no Kafka to publish to: set GPUYIELD_KAFKA_BOOTSTRAP or start `gpuyield worker`")
    try:
        configuration = load_kube_configuration(kubeconfig, context)
    except (ConfigException, OSError, ValueError) as exc:
        fail(f"cannot load the Kubernetes configuration: {str(exc).splitlines()[0]}")
    topic = settings.topic_prefix + KUBE_EVENTS
    try:
        asyncio.run(
            _watch(
                configuration,
                aiokafka_kwargs(settings, bootstrap),
                topic,
                namespace,
                ShutdownDeadline("gpuyield watch", settings.shutdown_timeout_s),
                settings,
            )
        )
    except KafkaError as exc:
        fail(f"Kafka at {','.join(bootstrap)}: {exc}")


async def _watch(
    configuration: kubernetes.client.Configuration,
    kafka: dict[str, Any],
    topic: str,
    namespaces: list[str] | None,
    deadline: ShutdownDeadline,
    settings: Settings,
) -> None:
    try:
        # Before the first send: Tansu would create a missing topic with 4 partitions.
        await ensure_topics(
            kafka,
            registry(settings.topic_partitions, prefix=settings.topic_prefix),
            settings.topic_replication_factor,
        )
    except (TopicCreationError, KafkaError) as exc:  # the worker may own the topics
        log.warning("could not ensure the topics (%s); going on", exc)
    # A broker that loses its state (a memory-only one restarted) would lose what was
    # published; exiting 75 makes the supervisor restart the watch, which relists.
    baseline = await observe(kafka, [topic])
    guard = asyncio.create_task(
        guard_broker("gpuyield watch", kafka, baseline, interval_s=settings.broker_check_s)
    )
    producer = AIOKafkaProducer(**kafka, acks="all")
    await producer.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, deadline.then(stop.set))

    async def publish(event: KubeEvent) -> None:
        await producer.send_and_wait(topic, value=encode(event), key=event.key.encode())

    watcher = KubeWatcher(
        configuration=configuration,
        publish=publish,
        namespaces=namespaces or None,
    )
    try:
        await watcher.start()
        log.info("watching; publishing to %s", topic)
        await stop.wait()
    finally:
        guard.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await guard
        with contextlib.suppress(Exception):
            await watcher.stop()
        await producer.stop()
