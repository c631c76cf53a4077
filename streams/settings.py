"""The streaming edge's settings: environment first, then an optional settings file.

Every setting is an environment variable ``GPUYIELD_<NAME>`` (the way a
Kubernetes Deployment configures a container). The settings file, named by
``GPUYIELD_CONFIG`` or passed to ``load_settings``, is an env-file with the
same ``GPUYIELD_<NAME>=value`` lines, so a value reads the same wherever it is
written and an error names the one variable to fix. A variable set in the
environment wins over the file.

Two profiles share one set of names. With no ``GPUYIELD_KAFKA_BOOTSTRAP`` the
edge runs an embedded Tansu broker, and the defaults are the ones measured on
Tansu 0.6.0 (each field's description says why); pointed at a real cluster
the defaults are Apache Kafka's. ``GPUYIELD_KAFKA_PROFILE`` picks the profile
explicitly, e.g. ``tansu`` for a ``gpuyield broker`` started by hand. A value
set explicitly always wins over either profile's default.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from dotenv import dotenv_values
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_core.core_schema import ValidationInfo  # the Volcano check's validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "GPUYIELD_"
CONFIG_ENV = "GPUYIELD_CONFIG"

_HOST_PORT = re.compile(
    r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>\d{1,5})$"
)
_CLUSTER_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class SettingsError(ValueError):
    """The settings are unusable; ``str()`` is one line naming the variable to fix."""


class KafkaProfile(StrEnum):
    """Which broker the defaults are tuned for."""

    TANSU = "tansu"  # the embedded broker (or `gpuyield broker`)
    KAFKA = "kafka"  # Apache Kafka (KRaft) or a compatible managed service


class SecurityProtocol(StrEnum):
    """Kafka's ``security.protocol`` values."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    """The SASL mechanisms gpuyield supports (username and password based)."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


# Defaults that differ per profile; every other default is profile-independent.
PROFILE_DEFAULTS: dict[KafkaProfile, dict[str, Any]] = {
    KafkaProfile.TANSU: {
        "kafka_session_timeout_s": 6.0,
        "kafka_producer_max_batch_size": 1,
        "topic_replication_factor": 1,
    },
    KafkaProfile.KAFKA: {
        "kafka_session_timeout_s": 45.0,
        "kafka_producer_max_batch_size": 16384,
        "topic_replication_factor": 3,
    },
}


def env_name(field: str) -> str:
    """The environment variable that sets ``field``."""
    return f"{ENV_PREFIX}{field.upper()}"


def parse_host_port(text: str) -> str:
    """Check one ``host:port`` (IPv6 in brackets) and return it stripped."""
    item = text.strip()
    match = _HOST_PORT.match(item)
    if match is None or not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"{item!r} is not host:port")
    return item


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(base) / "gpuyield"


class Settings(BaseSettings):
    """Where the brokers are, how to authenticate, and the timings that depend on them."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",  # the settings file may hold other components' GPUYIELD_ variables
        frozen=True,
        validate_default=True,
        hide_input_in_errors=True,  # a bad password must not reach a log
    )

    kafka_bootstrap: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description=(
            "Kafka bootstrap servers, comma-separated host:port. Unset or empty: start the "
            "embedded Tansu broker (a laptop needs no Kafka)."
        ),
    )
    kafka_profile: KafkaProfile | None = Field(
        None,
        description=(
            "Which broker the defaults are tuned for: tansu or kafka. Unset: tansu for the "
            "embedded broker, kafka when a bootstrap is given."
        ),
    )
    redis_url: str | None = Field(
        None,
        description=(
            "Redis URL (redis://, rediss:// or unix://) for the live view and idempotency "
            "records. Unset: start an embedded Valkey server under state_dir."
        ),
    )
    kafka_security_protocol: SecurityProtocol = Field(
        SecurityProtocol.PLAINTEXT,
        description="Kafka security.protocol; SASL_SSL for most managed clusters.",
    )
    kafka_sasl_mechanism: SaslMechanism = Field(
        SaslMechanism.PLAIN,
        description="SASL mechanism for SASL_PLAINTEXT/SASL_SSL.",
    )
    kafka_sasl_username: str | None = Field(None, description="SASL username.")
    kafka_sasl_password: SecretStr | None = Field(
        None, description="SASL password; never printed (repr shows asterisks)."
    )
    kafka_ssl_cafile: Path | None = Field(
        None,
        description="CA bundle (PEM) that signed the brokers' certificates; unset: system CAs.",
    )
    kafka_ssl_certfile: Path | None = Field(
        None, description="Client certificate (PEM) for mutual TLS."
    )
    kafka_ssl_keyfile: Path | None = Field(
        None, description="Client private key (PEM) for mutual TLS."
    )
    kafka_session_timeout_s: float = Field(
        45.0,
        gt=0,
        description=(
            "Consumer-group session timeout, seconds. Default 45 (Kafka's); 6 for Tansu, "
            "whose first group join waits half of it (faust's 60 costs 30 s at start)."
        ),
    )
    kafka_producer_max_batch_size: int = Field(
        16384,
        ge=1,
        description=(
            "Producer batch size, bytes. Default 16384 (Kafka's); 1 for Tansu, which reports a "
            "wrong end offset after a multi-record batch and breaks changelog recovery."
        ),
    )
    topic_partitions: int = Field(
        8,
        ge=1,
        le=1024,
        description=(
            "Partitions of the per-job and per-node topics (heartbeats, yield commands): the "
            "most consumers that can share their load. Default 8."
        ),
    )
    topic_replication_factor: int = Field(
        3,
        ge=1,
        description="Replicas per topic. Default 3 (survives one broker loss); 1 for Tansu.",
    )
    grace_s: float = Field(
        120.0,
        ge=0,
        description=("Seconds a yielding pod gets to checkpoint before it is killed. Default 120."),
    )
    cluster_id: str = Field(
        "default",
        description=(
            "Name of the Kubernetes cluster this deployment governs (DNS label), so logs and "
            "alerts say which cluster when several share one Kafka."
        ),
    )
    app_id: str = Field(
        "gpuyield",
        min_length=1,
        description=(
            "The faust application id: the consumer group and the prefix of its changelog "
            "topics. Two deployments on one Kafka need different ids."
        ),
    )
    topic_prefix: str = Field(
        "",
        pattern=r"^[A-Za-z0-9._-]*$",
        description=(
            "Put in front of every topic name, so several deployments (or test runs) can "
            "share one Kafka. Default: none (topics are gpuyield.*)."
        ),
    )
    state_dir: Path = Field(
        default_factory=_default_state_dir,
        description=(
            "Local state (embedded Valkey data, faust's table stores, logs). Default "
            "$XDG_STATE_HOME/gpuyield or ~/.local/state/gpuyield."
        ),
    )

    # --- The worker's start-up check of Volcano's scheduler configuration ----------------
    # (agents/worker/volcano_check.py). The defaults are the names Volcano's Helm chart
    # ships; deploy/volcano/rbac-worker.yaml grants `get` on exactly that ConfigMap.
    volcano_conf_namespace: str = Field(
        "volcano-system",
        description=(
            "Namespace of Volcano's scheduler ConfigMap, which the worker reads at start to "
            "alert when Volcano's own preempt or reclaim is on. Default volcano-system."
        ),
    )
    volcano_conf_configmap: str = Field(
        "volcano-scheduler-configmap",
        description=(
            "Name of Volcano's scheduler ConfigMap (Helm: <release>-scheduler-configmap). "
            "Default volcano-scheduler-configmap."
        ),
    )
    volcano_conf_key: str = Field(
        "volcano-scheduler.conf",
        description=(
            "Key of the scheduler configuration in that ConfigMap (the file the scheduler's "
            "--scheduler-conf names). Default volcano-scheduler.conf."
        ),
    )

    @field_validator("volcano_conf_namespace", "volcano_conf_configmap", "volcano_conf_key")
    @classmethod
    def _check_volcano_conf_names(cls, value: str, info: ValidationInfo) -> str:
        """Kubernetes' own rules, so a typo fails at start, not as a 404 in a log line."""
        rules = {
            "volcano_conf_namespace": (
                r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?",
                "a namespace name (a DNS label)",
            ),
            "volcano_conf_configmap": (
                r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*",
                "a ConfigMap name (a DNS subdomain)",
            ),
            "volcano_conf_key": (
                r"[-._a-zA-Z0-9]{1,253}",
                "a ConfigMap key (letters, digits, '-', '_', '.')",
            ),
        }
        pattern, what = rules[info.field_name or ""]
        if not re.fullmatch(pattern, value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    # --- end of the Volcano check's settings ----------------------------------------------

    # -- The worker's Kubernetes access: reservations on the real scheduler ----------
    # Off by default, so a worker without cluster credentials behaves as before. On,
    # the decider's owner taints the nodes it holds for a preemptor and adds the
    # matching tolerations to the preemptor's pending pods
    # (streams/kube_reservations.py, docs/design/0004-reservations.md).
    kube_reservations: bool = Field(
        False,
        description=(
            "Enforce the decider's reservations on the cluster (a NoSchedule taint on held "
            "nodes, tolerations on the preemptor's pods). Needs Kubernetes access: the pod's "
            "service account in a cluster, else the kubeconfig below. Default: off."
        ),
    )
    kubeconfig: Path | None = Field(
        None,
        description=(
            "Kubeconfig for the worker's Kubernetes access. Unset: in-cluster service account, "
            "then $KUBECONFIG or ~/.kube/config."
        ),
    )
    kube_context: str | None = Field(None, description="Kubeconfig context (default: current).")
    reservation_reconcile_s: float = Field(
        30.0,
        gt=0,
        description=(
            "Seconds between two reconciles of the cluster's reservation taints with the "
            "decider's holds: how soon pods Volcano creates later get their tolerations, and "
            "how soon a taint nobody holds is removed. Default 30."
        ),
    )

    @field_validator("kafka_bootstrap", mode="before")
    @classmethod
    def _split_bootstrap(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, list | tuple):
            return [parse_host_port(str(item)) for item in value] or None
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{value!r} is not a redis://, rediss:// or unix:// URL")
        return value

    @field_validator("cluster_id")
    @classmethod
    def _check_cluster_id(cls, value: str) -> str:
        if not _CLUSTER_ID.match(value):
            raise ValueError(f"{value!r} is not a DNS label (lowercase letters, digits, '-')")
        return value

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        """Fill the profile's defaults in for the values nobody set."""
        if not isinstance(data, dict):
            return data
        profile = data.get("kafka_profile")
        if profile in (None, ""):
            profile = KafkaProfile.KAFKA if data.get("kafka_bootstrap") else KafkaProfile.TANSU
        try:
            defaults = PROFILE_DEFAULTS[KafkaProfile(str(profile).lower())]
        except ValueError:
            return data  # the field validator reports the bad profile
        data = dict(data)
        data["kafka_profile"] = str(profile).lower()
        for name, default in defaults.items():
            if data.get(name) in (None, ""):
                data[name] = default
        return data

    @model_validator(mode="after")
    def _check_security(self) -> Settings:
        sasl = self.kafka_security_protocol in (
            SecurityProtocol.SASL_PLAINTEXT,
            SecurityProtocol.SASL_SSL,
        )
        if sasl and not self.kafka_sasl_username:
            raise ValueError(
                f"{env_name('kafka_sasl_username')}: required when "
                f"{env_name('kafka_security_protocol')} is {self.kafka_security_protocol}"
            )
        if sasl and self.kafka_sasl_password is None:
            raise ValueError(
                f"{env_name('kafka_sasl_password')}: required when "
                f"{env_name('kafka_security_protocol')} is {self.kafka_security_protocol}"
            )
        if (self.kafka_ssl_keyfile is None) != (self.kafka_ssl_certfile is None):
            missing = (
                "kafka_ssl_certfile" if self.kafka_ssl_certfile is None else "kafka_ssl_keyfile"
            )
            raise ValueError(f"{env_name(missing)}: required for mutual TLS (set both or neither)")
        return self

    @property
    def embedded_kafka(self) -> bool:
        """True when no bootstrap is configured: the edge starts its own broker."""
        return self.kafka_bootstrap is None

    @property
    def embedded_redis(self) -> bool:
        """True when no Redis URL is configured: the edge starts its own server."""
        return self.redis_url is None

    @property
    def uses_ssl(self) -> bool:
        return self.kafka_security_protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the settings, or raise SettingsError with one line naming the variable.

    ``config_file`` (else ``$GPUYIELD_CONFIG``) is an env-file; ``overrides``
    are field values that win over everything (a CLI's flags).
    """
    path = config_file if config_file is not None else os.environ.get(CONFIG_ENV) or None
    file_keys: set[str] = set()
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise SettingsError(f"{CONFIG_ENV}: {str(path)!r} is not a readable file")
        try:
            file_keys = {key.upper() for key in dotenv_values(file)}
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{path}: cannot be read: {exc}") from None
    try:
        return Settings(_env_file=path, **overrides)
    except ValidationError as exc:
        raise SettingsError(
            _explain(exc.errors()[0], str(path) if path else None, file_keys)
        ) from None


def _explain(error: ErrorDetails, path: str | None, file_keys: set[str]) -> str:
    """One line: the variable (and the file, if the value came from there), then why."""
    message = error["msg"].removeprefix("Value error, ")
    if not error["loc"]:
        return message  # a cross-field check: the message names the variable itself
    message = message[:1].lower() + message[1:]
    if error["type"] == "missing":
        message = "required"
    field = str(error["loc"][0])
    name = env_name(field)
    if path is not None and name not in os.environ and name in file_keys:
        name = f"{path}: {name}"
    if error["type"] not in ("value_error", "missing") and "input" in error:
        shown = "<hidden>" if "password" in field else repr(error["input"])[:60]
        message = f"{message} (got {shown})"
    return f"{name}: {message}"
