"""``gpuyield worker``: the controller's stream agents, on embedded defaults when nothing is set.

With no ``GPUYIELD_KAFKA_BOOTSTRAP`` it starts the embedded broker, with no
``GPUYIELD_REDIS_URL`` the embedded Redis, and writes both addresses to
``<state_dir>/endpoints.json`` so ``gpuyield status``, node agents and
trainers on the same machine find them. The topics are created before the
agents start (creating is idempotent, so several workers may race).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import kubernetes.client
import typer
from aiokafka.errors import KafkaError
from kubernetes.config.config_exception import ConfigException

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.worker.app import WorkerOptions, build_app
from gpuyield.agents.worker.attempts import Attempts
from gpuyield.agents.worker.deadline_worker import DeadlineWorker
from gpuyield.agents.worker.fault_tasks import add_fault_tasks
from gpuyield.agents.worker.metrics import WorkerMetrics
from gpuyield.agents.worker.view_pacing import ViewPacer
from gpuyield.agents.worker.volcano_check import startup_check
from gpuyield.cli_io import fail
from gpuyield.cli_options import SettingsFile
from gpuyield.endpoints import Endpoints, endpoints_path
from gpuyield.service_io import MetricsPort, configure_logging, metrics_served, settings_or_fail
from gpuyield.streams.broker_state import RECORD_FILE as BROKER_RECORD
from gpuyield.streams.broker_state import start_on_broker
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedRedis, EmbeddedServiceError
from gpuyield.streams.kafka_client import aiokafka_kwargs, faust_app_kwargs
from gpuyield.streams.kube_job_events import EventWriter
from gpuyield.streams.kube_reservations import ReservationEnforcer
from gpuyield.streams.kube_resources import load_kube_configuration
from gpuyield.streams.live_view_store import LiveViewWriter
from gpuyield.streams.settings import Settings
from gpuyield.streams.shutdown import ShutdownDeadline
from gpuyield.streams.topics import TopicCreationError, changelogs, registry
from gpuyield.streams.volcano_config import ConfigMapKey


@contextlib.contextmanager
def services(settings: Settings) -> Iterator[Endpoints]:
    """The configured broker and Redis, or embedded ones for the lifetime of the block."""
    with contextlib.ExitStack() as stack:
        bootstrap = settings.kafka_bootstrap
        redis_url = settings.redis_url
        embedded = False
        alive: Callable[[], bool] | None = None
        if bootstrap is None:
            log_path = Path(settings.state_dir) / "tansu.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            broker = stack.enter_context(EmbeddedBroker(log_path=log_path))
            bootstrap = [broker.bootstrap]
            alive = broker.is_running
            embedded = True
        if redis_url is None:
            redis = stack.enter_context(EmbeddedRedis.under(Path(settings.state_dir)))
            redis_url = redis.url
            embedded = True
        endpoints = Endpoints(list(bootstrap), redis_url, alive)
        path = endpoints_path(settings)
        if embedded:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps({"kafka_bootstrap": endpoints.kafka_bootstrap, "redis_url": redis_url}),
                encoding="utf-8",
            )
            stack.callback(lambda: path.unlink(missing_ok=True))
        yield endpoints


def volcano_conf_key(settings: Settings) -> ConfigMapKey:
    return ConfigMapKey(
        settings.volcano_conf_namespace, settings.volcano_conf_configmap, settings.volcano_conf_key
    )


def _kube_client(settings: Settings, variable: str) -> kubernetes.client.ApiClient:
    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    try:
        configuration = load_kube_configuration(kubeconfig, settings.kube_context)
    except (ConfigException, OSError, ValueError) as exc:
        fail(
            f"{variable} is on, but the Kubernetes configuration cannot be "
            f"loaded: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        )
    return kubernetes.client.ApiClient(configuration)


def reservation_enforcer(settings: Settings) -> ReservationEnforcer | None:
    """The enforcer when the settings give the worker Kubernetes access; exits 2 if unusable."""
    if not settings.kube_reservations:
        return None
    return ReservationEnforcer(_kube_client(settings, "GPUYIELD_KUBE_RESERVATIONS"))


def event_writer(settings: Settings) -> EventWriter | None:
    """The Kubernetes Event writer when ``kube_events`` is on; exits 2 if unusable."""
    if not settings.kube_events:
        return None
    return EventWriter(_kube_client(settings, "GPUYIELD_KUBE_EVENTS"))


def worker_options(
    settings: Settings,
    bootstrap: list[str],
    *,
    tick_s: float,
    enforcer: ReservationEnforcer | None = None,
    events: EventWriter | None = None,
    metrics: WorkerMetrics | None = None,
) -> WorkerOptions:
    """What ``gpuyield worker`` gives its app: each knob from the settings, the services it
    started, and the clients it made."""
    return WorkerOptions(
        app_kwargs=faust_app_kwargs(settings, bootstrap),
        topic_prefix=settings.topic_prefix,
        tick_s=tick_s,
        heartbeat_partitions=settings.topic_partitions,
        heartbeat_batch=settings.heartbeat_batch,
        heartbeat_batch_window_s=settings.heartbeat_batch_window_s,
        data_dir=str(Path(settings.state_dir) / "faust"),
        reservation_enforcer=enforcer,
        reservation_reconcile_s=settings.reservation_reconcile_s,
        heap_refreeze_s=settings.heap_refreeze_s,
        event_writer=events,
        instance=socket.gethostname(),
        spared_events=settings.kube_events_spared,
        metrics=metrics,
        attempts=Attempts(settings.agent_max_attempts, settings.agent_retry_backoff_s),
    )


def controller_config(settings: Settings) -> ControllerConfig:
    """The decider's knobs: the settings' policy block (every ``GPUYIELD_<KNOB>``)."""
    return settings.controller


def worker_command(
    config: SettingsFile = None,
    tick_s: Annotated[
        float, typer.Option(min=0.1, help="Seconds between ticks (deadline resolution).")
    ] = 2.0,
    loglevel: Annotated[str, typer.Option(help="Log level.")] = "info",
    metrics_port: MetricsPort = None,
) -> None:
    """Run the controller: progress tables, the livelock guard and the eviction decider."""
    settings = settings_or_fail(config)
    configure_logging(loglevel)
    enforcer = reservation_enforcer(settings)  # before any service starts: fail fast
    events = event_writer(settings)
    metrics = WorkerMetrics(prefix=settings.topic_prefix)
    try:
        with (
            metrics_served(metrics_port, settings, metrics.registry) as served,
            services(settings) as endpoints,
        ):
            prefix = settings.topic_prefix
            tables = changelogs(settings.app_id, settings.topic_partitions)
            specs = (
                registry(settings.topic_partitions, prefix, settings.kafka_max_message_bytes)
                + tables
            )
            kafka = aiokafka_kwargs(settings, endpoints.kafka_bootstrap)
            # The topics (repaired on a broker that lost its state), and the baseline
            # that the guard below compares with: taken before any agent runs.
            baseline = asyncio.run(
                start_on_broker(
                    kafka,
                    specs,
                    settings.topic_replication_factor,
                    # a broker this process just started is new: nothing to compare with
                    None if endpoints.broker_alive else Path(settings.state_dir) / BROKER_RECORD,
                    discard=[spec.name for spec in tables],
                )
            )
            # Volcano's own preempt/reclaim beside gpuyield: alert (never blocks the start).
            asyncio.run(
                startup_check(
                    volcano_conf_key(settings),
                    aiokafka_kwargs(settings, endpoints.kafka_bootstrap),
                    prefix,
                    settings.cluster_id,
                )
            )
            writer = LiveViewWriter(endpoints.redis_url, settings.cluster_id)
            app = build_app(
                worker_options(
                    settings,
                    endpoints.kafka_bootstrap,
                    tick_s=tick_s,
                    enforcer=enforcer,
                    events=events,
                    metrics=metrics if served is not None else None,
                ),
                controller_config(settings),
                publish_view=writer.publish,
                view_pacer=ViewPacer(settings.live_view_every_s, settings.live_view_max_share),
            )

            add_fault_tasks(
                app,
                settings,
                kafka,
                baseline,
                writer.publish_agents,
                broker_alive=endpoints.broker_alive,
            )
            typer.echo(
                f"gpuyield worker: Kafka {','.join(endpoints.kafka_bootstrap)}, "
                f"Redis {endpoints.redis_url}",
                err=True,
            )
            worker = DeadlineWorker(
                app,
                loglevel=loglevel,
                quiet=True,
                redirect_stdouts=False,
                deadline=ShutdownDeadline("gpuyield worker", settings.shutdown_timeout_s),
            )
            with contextlib.suppress(SystemExit):
                worker.execute_from_commandline()
    except (EmbeddedServiceError, TopicCreationError, KafkaError, OSError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
