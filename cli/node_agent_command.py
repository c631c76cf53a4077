"""``gpuyield node-agent``: one node's yield agent, wired from the settings and the flags.

The broker and Redis come from the settings (``GPUYIELD_KAFKA_BOOTSTRAP``,
``GPUYIELD_REDIS_URL``, or the ``endpoints.json`` a ``gpuyield worker`` on
embedded services leaves in the state directory): a node agent joins a
deployment, it never starts services of its own. The signaller decides how
pods are reached (``local`` processes, the ``kubernetes`` Eviction API, or
``hostpid`` signals through /proc); the job suspender follows it (Volcano
``Command`` objects in a cluster, a Redis hash locally).

SIGTERM or Ctrl-C stops it; yields in flight stay recorded in Redis and the
next start finishes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from aiokafka.errors import KafkaError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gpuyield.agents.node.executor import ExecutorSettings
from gpuyield.agents.node.gpus import FixedGpuCounter, GpuCounter
from gpuyield.agents.node.hostpid import HostPidSignaller
from gpuyield.agents.node.kube_signaller import (
    KubernetesEvictionSignaller,
    KubernetesGpuCounter,
    KubernetesPods,
    KubernetesPodUidResolver,
)
from gpuyield.agents.node.local_signaller import LocalPodRegistry, LocalProcessSignaller
from gpuyield.agents.node.metrics import NodeMetrics
from gpuyield.agents.node.service import AgentTopics, NodeAgentConfig, run_node_agent
from gpuyield.agents.node.signalling import Signaller
from gpuyield.agents.node.suspenders import JobSuspender, LocalJobSuspender
from gpuyield.agents.node.volcano import VolcanoJobSuspender
from gpuyield.cli_io import fail
from gpuyield.cli_options import SettingsFile
from gpuyield.endpoints import read_endpoints
from gpuyield.service_io import MetricsPort, configure_logging, metrics_served, settings_or_fail
from gpuyield.streams.broker_state import guard_broker, observe
from gpuyield.streams.kafka_client import aiokafka_kwargs
from gpuyield.streams.settings import Settings
from gpuyield.streams.shutdown import ShutdownDeadline
from gpuyield.streams.topics import TopicCreationError, changelogs, ensure_topics, registry

log = logging.getLogger(__name__)


class SignallerKind(StrEnum):
    LOCAL = "local"
    KUBERNETES = "kubernetes"
    HOSTPID = "hostpid"


class SuspenderKind(StrEnum):
    AUTO = "auto"
    VOLCANO = "volcano"
    LOCAL = "local"


def node_agent_command(
    node: Annotated[str, typer.Option(help="This node's name, as in the yield commands.")],
    signaller: Annotated[
        SignallerKind,
        typer.Option(help="How pods are signalled: local processes, the Eviction API, or hostPID."),
    ] = SignallerKind.LOCAL,
    suspender: Annotated[
        SuspenderKind,
        typer.Option(
            help="How yielded jobs are suspended (auto: volcano unless --signaller local)."
        ),
    ] = SuspenderKind.AUTO,
    proc_root: Annotated[
        Path, typer.Option(help="The host's /proc (hostpid signaller), e.g. a mounted /host/proc.")
    ] = Path("/proc"),
    gpus_per_pod: Annotated[
        int, typer.Option(min=0, help="GPUs per pod for the lost-work figure (local signaller).")
    ] = 1,
    redis_prefix: Annotated[
        str, typer.Option(help="Prefix of the agent's Redis keys (several deployments, one Redis).")
    ] = "gpuyield",
    suspend_first: Annotated[
        bool,
        typer.Option(
            "--suspend-first",
            help=(
                "Suspend the job before signalling, so Volcano's PodEvicted policies never see "
                "the yield; the pods' terminationGracePeriodSeconds then caps the grace."
            ),
        ),
    ] = False,
    kubeconfig: Annotated[
        str | None, typer.Option(help="Kubeconfig file (default: in-cluster, then ~/.kube/config).")
    ] = None,
    config: SettingsFile = None,
    loglevel: Annotated[str, typer.Option(help="Log level.")] = "info",
    metrics_port: MetricsPort = None,
) -> None:
    """Carry out yield and resume commands for one node: signal, checkpoint, release, ack."""
    settings = settings_or_fail(config)
    endpoints = read_endpoints(settings)
    if endpoints is None:
        fail(
            "no Kafka or Redis to join: set GPUYIELD_KAFKA_BOOTSTRAP and GPUYIELD_REDIS_URL, "
            "or start `gpuyield worker` on this machine first"
        )
    if signaller is SignallerKind.HOSTPID and not proc_root.is_dir():
        fail(f"--proc-root {proc_root}: not a directory")
    configure_logging(loglevel)
    kafka = aiokafka_kwargs(settings, endpoints.kafka_bootstrap)
    agent_config = NodeAgentConfig(
        node=node,
        kafka=kafka,
        topics=AgentTopics.with_prefix(settings.topic_prefix),
        session_timeout_s=settings.kafka_session_timeout_s,
        producer_max_batch_size=settings.kafka_producer_max_batch_size,
        redis_prefix=redis_prefix,
        group_prefix=settings.topic_prefix,
        executor=ExecutorSettings.from_knobs(settings.node_agent, suspend_first=suspend_first),
    )
    typer.echo(
        f"gpuyield node-agent {node}: Kafka {','.join(endpoints.kafka_bootstrap)}, "
        f"Redis {endpoints.redis_url}, signaller {signaller.value}",
        err=True,
    )
    metrics = NodeMetrics(prefix=settings.topic_prefix)
    try:
        with metrics_served(metrics_port, settings, metrics.registry) as served:
            asyncio.run(
                _serve(
                    agent_config,
                    settings,
                    endpoints.redis_url,
                    signaller,
                    suspender,
                    proc_root=proc_root,
                    gpus_per_pod=gpus_per_pod,
                    kubeconfig=kubeconfig,
                    metrics=metrics if served is not None else None,
                )
            )
    except (KafkaError, RedisError, OSError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _kube_api(kubeconfig: str | None) -> Any:
    """An API client for the cluster (imported here: only cluster deployments need one)."""
    import kubernetes.client

    from gpuyield.streams.kube_resources import load_kube_configuration

    return kubernetes.client.ApiClient(load_kube_configuration(kubeconfig))


def _components(
    redis: Redis,
    prefix: str,
    signaller_kind: SignallerKind,
    suspender_kind: SuspenderKind,
    *,
    proc_root: Path,
    gpus_per_pod: int,
    kubeconfig: str | None,
) -> tuple[Signaller, JobSuspender, GpuCounter, Any]:
    """The signaller, suspender and GPU counter the flags ask for, and the API client if any."""
    api_client: Any = None
    signaller: Signaller
    gpus: GpuCounter
    if signaller_kind is SignallerKind.LOCAL:
        signaller = LocalProcessSignaller(LocalPodRegistry(redis, prefix=prefix))
        gpus = FixedGpuCounter(gpus_per_pod)
    else:
        api_client = _kube_api(kubeconfig)
        pods = KubernetesPods(api_client)
        gpus = KubernetesGpuCounter(pods)
        if signaller_kind is SignallerKind.KUBERNETES:
            signaller = KubernetesEvictionSignaller(pods)
        else:
            signaller = HostPidSignaller(KubernetesPodUidResolver(pods), proc_root=proc_root)
    suspender: JobSuspender
    if suspender_kind is SuspenderKind.LOCAL or (
        suspender_kind is SuspenderKind.AUTO and signaller_kind is SignallerKind.LOCAL
    ):
        suspender = LocalJobSuspender(redis, prefix=prefix)
    else:
        api_client = api_client or _kube_api(kubeconfig)
        suspender = VolcanoJobSuspender(api_client)
    return signaller, suspender, gpus, api_client


async def _serve(
    agent_config: NodeAgentConfig,
    settings: Settings,
    redis_url: str,
    signaller_kind: SignallerKind,
    suspender_kind: SuspenderKind,
    *,
    proc_root: Path,
    gpus_per_pod: int,
    kubeconfig: str | None,
    metrics: NodeMetrics | None = None,
) -> None:
    topics = registry(settings.topic_partitions, prefix=settings.topic_prefix)
    try:
        # The worker creates the topics; an agent that starts first must not let a
        # metadata request create them with the broker's defaults (Tansu does that).
        await ensure_topics(agent_config.kafka, topics, settings.topic_replication_factor)
    except (TopicCreationError, KafkaError) as exc:
        # An agent may lack the rights to create topics; they exist if the worker runs.
        log.warning("could not ensure the topics (%s); going on", exc)
    # What a broker restart would change (the worker's changelogs too, once they exist).
    specs = topics + changelogs(settings.app_id, settings.topic_partitions)
    baseline = await observe(agent_config.kafka, [spec.name for spec in specs])
    guard = asyncio.create_task(
        guard_broker(
            f"gpuyield node-agent {agent_config.node}",
            agent_config.kafka,
            baseline,
            interval_s=settings.broker_check_s,
        ),
        name="gpuyield-broker-guard",
    )
    redis = Redis.from_url(redis_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    deadline = ShutdownDeadline(
        f"gpuyield node-agent {agent_config.node}", settings.shutdown_timeout_s
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, deadline.then(stop.set))
    api_client: Any = None
    try:
        signaller, suspender, gpus, api_client = _components(
            redis,
            agent_config.redis_prefix,
            signaller_kind,
            suspender_kind,
            proc_root=proc_root,
            gpus_per_pod=gpus_per_pod,
            kubeconfig=kubeconfig,
        )
        await run_node_agent(
            agent_config,
            redis=redis,
            signaller=signaller,
            suspender=suspender,
            gpus=gpus,
            stop=stop,
            metrics=metrics,
        )
    finally:
        guard.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await guard
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if api_client is not None:
            with contextlib.suppress(Exception):
                api_client.close()
        await redis.aclose()
