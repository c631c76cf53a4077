"""The worker's start-up check: is Volcano preempting beside gpuyield?

When the worker starts it reads Volcano's scheduler configuration (one GET of
one ConfigMap, ``streams/volcano_config``), checks it
(``agents/controller/volcano_conf``), logs what it found and, when
``preempt``/``reclaim`` (or their gang forms) are on, publishes a critical
``volcano-preempting`` alert on ``gpuyield.alerts``.

It never stops the worker from starting. Where the check cannot apply (no
Kubernetes access configured, RBAC denies the read, no such ConfigMap: a
Volcano installed under another name, or none yet) it logs at info level what
it could not read and why. Anything else that goes wrong (an unreachable API
server, a ConfigMap without the key, a configuration Volcano would reject) is
a warning: the check could not tell. It runs once, at start: Volcano reloads
its configuration when the ConfigMap changes, so a change made later is seen
at the worker's next start (a rollout, or the pods' next restart).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaProducer

from gpuyield.agents.controller.volcano_conf import (
    SchedulerConfError,
    check_scheduler_conf,
    parse_scheduler_conf,
    preempting_alert,
)
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Alert
from gpuyield.streams.topics import ALERTS
from gpuyield.streams.volcano_config import (
    ConfigMapKey,
    ConfigMapRead,
    ConfigMapUnreadable,
    kube_configuration,
    read_config_map_key,
)

log = logging.getLogger(__name__)

Publish = Callable[[Alert], Awaitable[None]]


async def check_volcano_scheduler(
    read: Callable[[], ConfigMapRead],
    publish: Publish,
    *,
    cluster_id: str,
    clock: Callable[[], float] = time.time,
) -> Alert | None:
    """Read, check, log; publish and return the alert if Volcano preempts, else None.

    ``read`` is blocking (the official client is synchronous), so it runs in
    a thread.
    """
    result = await asyncio.to_thread(read)
    if isinstance(result, ConfigMapUnreadable):
        level = logging.INFO if result.expected else logging.WARNING
        log.log(
            level,
            "Volcano scheduler check skipped: cannot read %s (%s): %s",
            result.where,
            result.why.value,
            result.detail,
        )
        return None
    where = result.where
    try:
        conf = parse_scheduler_conf(result.text)
    except SchedulerConfError as exc:
        log.warning(
            "Volcano scheduler check: %s is not a configuration Volcano accepts (%s); Volcano "
            "keeps the one it had, which this check cannot see",
            where,
            exc,
        )
        return None
    findings = check_scheduler_conf(conf)
    alert: Alert | None = None
    for finding in findings:
        if finding.alerts:
            alert = preempting_alert(
                finding,
                configmap=where.configmap,
                key=where.key,
                resource_version=result.resource_version,
                cluster_id=cluster_id,
                raised_at=clock(),
            )
            log.error("alert %s: %s (%s)", alert.kind.value, alert.message, where)
            await publish(alert)
        else:
            log.warning("Volcano scheduler check: %s: %s", where, finding.message)
    if not findings:
        log.info(
            "Volcano scheduler check: %s runs %s; no preempt or reclaim",
            where,
            ", ".join(conf.actions),
        )
    return alert


async def startup_check(
    where: ConfigMapKey, kafka: dict[str, Any], topic_prefix: str, cluster_id: str
) -> Alert | None:
    """The check as ``gpuyield worker`` runs it: the configured cluster, the alerts topic."""

    async def publish(alert: Alert) -> None:
        producer = AIOKafkaProducer(**kafka, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(
                topic_prefix + ALERTS, value=encode(alert), key=alert.kind.value.encode()
            )
        finally:
            await producer.stop()

    return await check_volcano_scheduler(
        lambda: read_config_map_key(where, kube_configuration()),
        publish,
        cluster_id=cluster_id,
    )
