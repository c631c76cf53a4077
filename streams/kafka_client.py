"""Settings turned into what aiokafka and faust take: one place knows both vocabularies.

aiokafka clients (producers, consumers, the admin client) take keyword
arguments; a faust app takes ``broker_credentials`` and its own names for the
same timings. Both are derived here from one ``Settings`` so the edge's
plain producers and its faust agents always talk to Kafka the same way.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any

from aiokafka.helpers import create_ssl_context
from faust.auth import SASLCredentials, SSLCredentials
from faust.types.auth import CredentialsT

from gpuyield.streams.settings import SecurityProtocol, Settings


class NoBootstrapError(ValueError):
    """No bootstrap address: the settings say embedded and no broker was passed in."""


def bootstrap_servers(
    settings: Settings, bootstrap: str | Sequence[str] | None = None
) -> list[str]:
    """The broker addresses to use: ``bootstrap`` (an embedded broker's) or the settings'."""
    if bootstrap is not None:
        return [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
    if settings.kafka_bootstrap is None:
        raise NoBootstrapError(
            "no Kafka bootstrap: set GPUYIELD_KAFKA_BOOTSTRAP or start the embedded broker"
        )
    return list(settings.kafka_bootstrap)


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context for SSL/SASL_SSL (None for plaintext).

    Built with aiokafka's helper, which always checks the broker's host name;
    a missing CA/cert/key file raises ``FileNotFoundError`` here, at start-up,
    instead of on the first connection.
    """
    if not settings.uses_ssl:
        return None
    context: ssl.SSLContext = create_ssl_context(
        cafile=settings.kafka_ssl_cafile,
        certfile=settings.kafka_ssl_certfile,
        keyfile=settings.kafka_ssl_keyfile,
    )
    return context


def aiokafka_kwargs(
    settings: Settings, bootstrap: str | Sequence[str] | None = None
) -> dict[str, Any]:
    """Keyword arguments shared by AIOKafkaProducer, AIOKafkaConsumer and AIOKafkaAdminClient."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers(settings, bootstrap),
        "security_protocol": settings.kafka_security_protocol.value,
    }
    context = ssl_context(settings)
    if context is not None:
        kwargs["ssl_context"] = context
    if settings.kafka_security_protocol in (
        SecurityProtocol.SASL_PLAINTEXT,
        SecurityProtocol.SASL_SSL,
    ):
        password = settings.kafka_sasl_password
        kwargs["sasl_mechanism"] = settings.kafka_sasl_mechanism.value
        kwargs["sasl_plain_username"] = settings.kafka_sasl_username
        kwargs["sasl_plain_password"] = password.get_secret_value() if password else None
    return kwargs


def consumer_timing_kwargs(settings: Settings) -> dict[str, Any]:
    """The group timings for a plain AIOKafkaConsumer (a third of the session per heartbeat)."""
    session_ms = int(settings.kafka_session_timeout_s * 1000)
    return {"session_timeout_ms": session_ms, "heartbeat_interval_ms": max(100, session_ms // 3)}


def faust_credentials(settings: Settings) -> CredentialsT | None:
    """faust's ``broker_credentials`` for the configured security protocol."""
    protocol = settings.kafka_security_protocol
    if protocol is SecurityProtocol.PLAINTEXT:
        return None
    context = ssl_context(settings)
    if protocol is SecurityProtocol.SSL:
        return SSLCredentials(context)
    password = settings.kafka_sasl_password
    return SASLCredentials(
        username=settings.kafka_sasl_username,
        password=password.get_secret_value() if password else None,
        ssl_context=context,
        mechanism=settings.kafka_sasl_mechanism.value,
    )


def faust_app_kwargs(
    settings: Settings, bootstrap: str | Sequence[str] | None = None
) -> dict[str, Any]:
    """The broker-facing arguments of ``faust.App`` (id, brokers, credentials, timings)."""
    return {
        "id": settings.app_id,
        "broker": [f"kafka://{server}" for server in bootstrap_servers(settings, bootstrap)],
        "broker_credentials": faust_credentials(settings),
        "broker_session_timeout": settings.kafka_session_timeout_s,
        "broker_heartbeat_interval": max(0.1, settings.kafka_session_timeout_s / 3),
        "producer_max_batch_size": settings.kafka_producer_max_batch_size,
        "producer_max_request_size": settings.kafka_max_message_bytes,
        "topic_partitions": settings.topic_partitions,
        "topic_replication_factor": settings.topic_replication_factor,
    }


def kafka_python_kwargs(
    settings: Settings, bootstrap: str | Sequence[str] | None = None
) -> dict[str, Any]:
    """Keyword arguments for kafka-python's clients (the synchronous ones: archive, audit).

    kafka-python names its security options as aiokafka does (aiokafka copied
    them), so the two share one derivation; ``ssl_context`` is a plain
    ``ssl.SSLContext`` that both accept.
    """
    return aiokafka_kwargs(settings, bootstrap)
