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

One composed model: besides the edge's own fields, ``Settings.controller``
is the pure ``ControllerConfig`` (``gpuyield.schemas.config``: alpha, beta,
cooldowns, the eviction cap and window, grace, demand retries and backoff,
the reservation timeout, the priority classes, the topology label keys, ...),
so the worker, the node agent, the simulator and the demo read one model;
``Settings.node_agent`` (``NodeAgentKnobs``) holds the node agent's waits.
Each knob keeps a flat variable, ``GPUYIELD_<KNOB>`` (``GPUYIELD_COOLDOWN_S``,
not ``GPUYIELD_CONTROLLER__POLICY__COOLDOWN_S``): ``KnobSource`` reads them
from the environment, then the settings file, and nests them. Flat names are
what an operator types into a ConfigMap; ``knob_paths`` guarantees they stay
unique. Flat keyword arguments work too (``load_settings(grace_s=5)``).

``load_settings_traced`` also says where each value came from (``default``,
``env``, ``file:<path>`` or ``override``), which ``gpuyield config`` prints.
Adding an edge setting is one field below; adding a policy knob is one field
in ``schemas/config.py``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import Annotated, Any

from dotenv import dotenv_values
from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_core.core_schema import ValidationInfo  # the Volcano check's validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from gpuyield.schemas.config import (
    KNOBS,
    POLICY_HELP,
    SPARED_EVENTS,
    ControllerConfig,
    NodeAgentKnobs,
    knob_paths,
    knob_value,
    nest,
)

ENV_PREFIX = "GPUYIELD_"

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest message gpuyield produces, by default (``GPUYIELD_KAFKA_MAX_MESSAGE_BYTES``).

A decision record carries the cluster's snapshot and every candidate's
verdicts: 0.2 MB at 64 nodes, 3 MB at 1,000, 32 MB at 10,000. Kafka's
default limit (1 MiB, the producer's ``max.request.size`` and the broker's
``message.max.bytes``) refused every decision of a cluster of about 300
nodes or more, and with it the yield commands sent after it. The decisions
topic is created with ``max.message.bytes`` at this size, and the worker's
producer may send up to it."""

CONFIG_ENV = "GPUYIELD_CONFIG"
CONTROLLER = "controller"  # the Settings field holding the policy knobs
NODE_AGENT = "node_agent"  # the Settings field holding the node agent's waits
BLOCKS: dict[str, type[BaseModel]] = {CONTROLLER: ControllerConfig, NODE_AGENT: NodeAgentKnobs}
"""The Settings fields that are blocks of knobs, each knob with its own flat variable."""


def _all_knobs() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for block, model in BLOCKS.items():
        for knob, path in knob_paths(model).items():
            if knob in out:
                raise ValueError(f"knob {knob!r} is in both {out[knob][0]} and {block}")
            out[knob] = (block, *path)
    return out


SETTINGS_KNOBS: dict[str, tuple[str, ...]] = _all_knobs()
"""Every knob of every block, by flat name -> its path in ``Settings``."""
MASK = "**********"  # how a secret is shown (pydantic's SecretStr shows the same)

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
    kafka_max_message_bytes: int = Field(
        MAX_MESSAGE_BYTES,
        ge=1024 * 1024,
        le=1024 * 1024 * 1024,
        description=(
            "The largest message the worker produces, bytes: its producer's max request size "
            "and the decisions topic's max.message.bytes. A decision record carries the "
            "cluster's snapshot and every candidate's verdicts (3 MB at 1,000 nodes, 32 MB at "
            "10,000): Kafka's 1 MiB default refused them from about 300 nodes. Default 64 MiB."
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
    controller: ControllerConfig = Field(
        default_factory=ControllerConfig,
        description=(
            "The policy knobs (gpuyield.schemas.config), each set by its own flat "
            "GPUYIELD_<KNOB> variable."
        ),
    )
    node_agent: NodeAgentKnobs = Field(
        default_factory=NodeAgentKnobs,
        description="The node agent's waits during a yield, each set by GPUYIELD_NODE_<...>.",
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
    kube_events: bool = Field(
        False,
        description=(
            "Write a Kubernetes Event (events.k8s.io/v1) on each Volcano Job a decision "
            "yields (GracefulYield), spares (Spared) or resumes (Resumed), with the preemptor "
            "and the rule: kubectl describe vcjob shows why. Needs the same Kubernetes access "
            "as kube_reservations. Default: off."
        ),
    )
    kube_events_spared: int = Field(
        SPARED_EVENTS,
        ge=0,
        description=(
            "With kube_events: at most this many Spared Events per decision, on the kept "
            "candidates the plan came closest to taking (unprotected first, then the least "
            "work lost); every victim still gets its GracefulYield. A plan at 1,000 nodes "
            "keeps some 2,000 eligible jobs; the decision record keeps them all, and "
            "gpuyield audit JOB reads any job's verdict. 0: no Spared Events."
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

    # -- Prometheus: /metrics of the worker, the node agent and the archiver ------------
    # (streams/metrics.py). Off by default; deploy/ sets it and scrapes it.
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description=(
            "Port on which the worker, the node agent and the archiver serve Prometheus "
            "metrics at /metrics (their --metrics-port flag wins). Unset: no metrics "
            "server. deploy/ uses 9400."
        ),
    )
    # -- Faults (issue 11): bounded retries, stalls, shutdown, a lost broker -----------
    shutdown_timeout_s: float = Field(
        20.0,
        gt=0,
        le=600,
        description=(
            "Every gpuyield process ends at most this long after SIGTERM or Ctrl-C: an orderly "
            "stop that hangs is cut short with a log line and exit status 124. Default 20 "
            "(under Kubernetes' 30 s grace period)."
        ),
    )
    agent_max_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description=(
            "Times an agent tries to finish one message (send what it decided, forward a "
            "summary) before the message goes to the dead-letter topic with the last error "
            "and its offset moves on. Default 3."
        ),
    )
    agent_retry_backoff_s: float = Field(
        0.5,
        ge=0,
        le=60,
        description=(
            "Pause before an agent's next attempt at a message, doubled each time. Default 0.5."
        ),
    )
    agent_stall_s: float = Field(
        60.0,
        gt=0,
        description=(
            "An agent with input waiting whose last processed offset has not moved for this "
            "long is reported stalled (gpuyield status, the live view). Default 60."
        ),
    )
    live_view_every_s: float = Field(
        0.5,
        gt=0,
        le=3600,
        description=(
            "How often the worker rebuilds the live view (gpuyield status) while inputs flow; "
            "a decision rebuilds it sooner. Default 0.5."
        ),
    )
    live_view_max_share: float = Field(
        0.1,
        gt=0,
        le=1,
        description=(
            "The most of the worker's time rebuilding the live view may take: a rebuild "
            "waits until the last one is this share of the time since (at 10,000 nodes one "
            "costs about 0.4 s, so the view is then up to 4 s old). Default 0.1."
        ),
    )
    heap_refreeze_s: float = Field(
        3600.0,
        ge=0,
        description=(
            "The worker freezes its heap (gc.freeze) once the decider's index is built, so "
            "that Python's full collections stop walking the table, the index and the "
            "snapshot models (0.7-0.9 s each at 10,000 nodes), and again this often, one "
            "full collection each time, to free what reference cycles among them let go. "
            "0: never freeze. Default 3600."
        ),
    )
    heartbeat_batch: int = Field(
        1000,
        ge=1,
        le=100_000,
        description=(
            "Heartbeats a worker's progress agent folds in one batch, or fewer once "
            "GPUYIELD_HEARTBEAT_BATCH_WINDOW_S has passed. A job that beat several times "
            "in a batch is folded once, and the summaries that changed go to the decider as "
            "one message (up to 256 per message), which the decider takes as one step. "
            "Default 1000."
        ),
    )
    heartbeat_batch_window_s: float = Field(
        0.1,
        gt=0,
        le=10,
        description=(
            "The longest a worker waits to fill a batch of heartbeats before it folds what "
            "it has: the most a forwarded summary is held back. Default 0.1."
        ),
    )
    broker_check_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description=(
            "How often the worker and the node agent check that the broker still has their "
            "topics (cluster id, topics, partition counts); a lost broker state makes them exit "
            "with status 75 for their supervisor to restart them. Default 5."
        ),
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env_file = getattr(dotenv_settings, "env_file", None)
        knobs = KnobSource(settings_cls, env_file if isinstance(env_file, str | Path) else None)
        return (
            init_settings,
            _WithoutKnobs(settings_cls, env_settings),
            knobs,
            _WithoutKnobs(settings_cls, dotenv_settings),
            file_secret_settings,
        )

    @property
    def grace_s(self) -> float:
        """``GPUYIELD_GRACE_S``: the graceful-yield deadline (``controller.policy.grace_s``)."""
        return self.controller.policy.grace_s

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
        """Nest flat knob arguments (``grace_s=5``), then fill in the profile's defaults."""
        if not isinstance(data, dict):
            return data
        data = _nest_flat_knobs(data)
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


def _nest_flat_knobs(data: dict[str, Any]) -> dict[str, Any]:
    """Flat knob keys (``cooldown_s``) moved into their blocks, over what the blocks hold."""
    flat = {key: value for key, value in data.items() if key in SETTINGS_KNOBS}
    if not flat:
        return data
    out = {key: value for key, value in data.items() if key not in SETTINGS_KNOBS}
    for block, values in nest(flat, SETTINGS_KNOBS).items():
        held = out.get(block)
        tree = held.model_dump() if isinstance(held, BaseModel) else dict(held or {})
        out[block] = _merge(tree, values)
    return out


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = _merge(below, value)
        else:
            out[key] = value
    return out


def _environment() -> dict[str, str]:
    """The process environment by upper-cased name (the settings match names case-blind)."""
    return {name.upper(): value for name, value in os.environ.items()}


def _file_values(path: str | Path | None) -> dict[str, str]:
    """The settings file's ``NAME=value`` lines by upper-cased name (bare names skipped)."""
    if path is None or not Path(path).is_file():
        return {}
    return {k.upper(): v for k, v in dotenv_values(path).items() if v is not None}


def _leaf(path: tuple[str, ...]) -> FieldInfo:
    """The field at ``path`` below ``Settings``."""
    model: type[BaseModel] = Settings
    info = model.model_fields[path[0]]
    for part in path[1:]:
        assert isinstance(info.annotation, type)
        model = info.annotation
        info = model.model_fields[part]
    return info


_SCALARS = (int, float, str, bool)


def _from_text(path: tuple[str, ...], text: str) -> Any:
    """A knob's text as its type, so a strict model accepts it; the text itself if unparsable.

    A string that does not parse is left for the model to reject: its error then
    names the field, and the variable, like any other.
    """
    annotation = _leaf(path).annotation
    if annotation not in _SCALARS:
        return text  # e.g. priority_classes: the model's own parser reads the text
    try:
        return TypeAdapter(annotation).validate_strings(text)
    except ValidationError:
        return text


class _WithoutKnobs(PydanticBaseSettingsSource):
    """A built-in source minus the knobs and their blocks (``KnobSource`` reads those).

    The env-file source hands ``GPUYIELD_GRACE_S`` on as an extra ``grace_s``,
    which would then read as a flat argument and beat the environment; and a
    ``GPUYIELD_CONTROLLER`` JSON document would be a second, untraced way to
    set the knobs. Each knob has one variable.
    """

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in self._inner().items()
            if key not in SETTINGS_KNOBS and key not in BLOCKS
        }


class KnobSource(PydanticBaseSettingsSource):
    """Each knob from its flat ``GPUYIELD_<KNOB>``: the environment first, then the file."""

    def __init__(self, settings_cls: type[BaseSettings], env_file: str | Path | None) -> None:
        super().__init__(settings_cls)
        self._env_file = env_file

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every knob at once

    def __call__(self) -> dict[str, Any]:
        environment = _environment()
        file = _file_values(self._env_file)
        found: dict[str, Any] = {}
        for knob, path in SETTINGS_KNOBS.items():
            name = env_name(knob)
            text = environment.get(name, file.get(name))
            if text is not None:
                found[knob] = _from_text(path, text)
        return nest(found, SETTINGS_KNOBS)


class _ExplicitSettings(Settings):
    """Settings from the constructor's arguments alone."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def settings_from(values: Mapping[str, Any]) -> Settings:
    """Settings from ``values`` (fields or flat knobs) and the defaults only: no environment,
    no file. For a deployment built in code (the demo's), which the caller's ``GPUYIELD_*``
    variables must not reach. Raises SettingsError like ``load_settings``."""
    try:
        return _ExplicitSettings(**values)
    except ValidationError as exc:
        raise SettingsError(_explain(exc.errors()[0], None, set())) from None


# --- every setting, by variable --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """One variable: where its value sits in ``Settings`` and what it means."""

    env: str
    path: tuple[str, ...]  # ("topic_partitions",) or ("controller", "policy", "cooldown_s")
    field: FieldInfo

    @property
    def description(self) -> str:
        text = self.field.description or ""
        if self.path[:2] == (CONTROLLER, "policy"):
            text = POLICY_HELP.get(self.path[-1], text)
        return " ".join(text.split()).replace("``", "")

    @property
    def secret(self) -> bool:
        return self.field.annotation is not None and "SecretStr" in str(self.field.annotation)


def setting_specs() -> list[SettingSpec]:
    """Every variable the settings read, edge fields first, then the knobs, in model order."""
    specs = [
        SettingSpec(env_name(name), (name,), info)
        for name, info in Settings.model_fields.items()
        if name not in BLOCKS
    ]
    specs += [
        SettingSpec(env_name(knob), path, _leaf(path)) for knob, path in SETTINGS_KNOBS.items()
    ]
    return specs


SETTING_NAMES: frozenset[str] = frozenset(
    [env_name(n) for n in Settings.model_fields if n not in BLOCKS]
    + [env_name(k) for k in SETTINGS_KNOBS]
)
"""Every ``GPUYIELD_*`` variable that sets a value (``GPUYIELD_CONFIG`` names the file)."""


def setting_value(settings: Settings, spec: SettingSpec) -> Any:
    return knob_value(settings, spec.path)


def env_value(value: Any, *, reveal: bool = False) -> str:
    """``value`` written the way its variable takes it (lists comma-separated, ...).

    Secrets show as asterisks unless ``reveal``; None is the empty string (unset).
    """
    if value is None:
        return ""
    if isinstance(value, SecretStr):
        return value.get_secret_value() if reveal else MASK
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={env_value(v, reveal=reveal)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ",".join(env_value(v, reveal=reveal) for v in value)
    return str(value)


def settings_env(settings: Settings) -> dict[str, str]:
    """Every set value as ``GPUYIELD_<NAME>`` variables (secrets revealed): for a child process.

    ``load_settings`` in the child reads back the same settings.
    """
    out: dict[str, str] = {}
    for spec in setting_specs():
        value = setting_value(settings, spec)
        if value is not None:
            out[spec.env] = env_value(value, reveal=True)
    return out


# --- loading ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    """The settings and where each value came from."""

    settings: Settings
    sources: Mapping[str, str]
    """Variable -> ``default``, ``env``, ``file:<path>`` or ``override`` (a caller's argument)."""
    config_file: Path | None

    def explicit_knobs(self) -> dict[str, Any]:
        """The knobs somebody set (by flat name), with their values: what overrides a profile."""
        return {
            knob: knob_value(self.settings.controller, path)
            for knob, path in KNOBS.items()
            if self.sources[env_name(knob)] != "default"
        }


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the settings, or raise SettingsError with one line naming the variable.

    ``config_file`` (else ``$GPUYIELD_CONFIG``) is an env-file; ``overrides``
    are field or knob values that win over everything (a CLI's flags).
    """
    return load_settings_traced(config_file, **overrides).settings


def load_settings_traced(config_file: str | Path | None = None, **overrides: Any) -> LoadedSettings:
    """``load_settings``, and where each value came from."""
    path = config_file if config_file is not None else os.environ.get(CONFIG_ENV) or None
    file_keys: set[str] = set()
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise SettingsError(f"{CONFIG_ENV}: {str(path)!r} is not a readable file")
        try:
            file_keys = {key.upper() for key, v in dotenv_values(file).items() if v is not None}
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{path}: cannot be read: {exc}") from None
    try:
        settings = Settings(_env_file=path, **overrides)
    except ValidationError as exc:
        raise SettingsError(
            _explain(exc.errors()[0], str(path) if path else None, file_keys)
        ) from None
    environment = _environment()
    overridden = {env_name(key) for key in overrides}
    for block in BLOCKS.keys() & overrides.keys():
        overridden |= {env_name(k) for k, path in SETTINGS_KNOBS.items() if path[0] == block}
    sources: dict[str, str] = {}
    for name in sorted(SETTING_NAMES):
        if name in overridden:
            sources[name] = "override"
        elif name in environment:
            sources[name] = "env"
        elif name in file_keys:
            sources[name] = f"file:{path}"
        else:
            sources[name] = "default"
    return LoadedSettings(settings, sources, Path(path) if path is not None else None)


_KNOB_BY_PATH = {path: knob for knob, path in SETTINGS_KNOBS.items()}


def _variable(loc: tuple[int | str, ...], error: ErrorDetails) -> tuple[str | None, str]:
    """The variable an error is about, and the field name (for secrecy), from its location."""
    ctx = error.get("ctx") or {}
    if error["type"] == "knob" and "knob" in ctx:
        knob = str(ctx["knob"]).split(".")[-1]
        return env_name(knob), knob
    if loc and loc[0] in BLOCKS:
        full = tuple(str(part) for part in loc)
        for end in range(len(full), 1, -1):
            found = _KNOB_BY_PATH.get(full[:end])
            if found is not None:
                return env_name(found), found
        return None, str(loc[0])
    if not loc:
        return None, ""
    field = str(loc[0])
    return env_name(field), field


def knob_error_line(exc: ValidationError) -> str:
    """One line naming the variable, for an error in validating a ``ControllerConfig`` alone."""
    error = exc.errors()[0]
    shifted: ErrorDetails = {**error, "loc": (CONTROLLER, *error["loc"])}
    return _explain(shifted, None, set())


def _explain(error: ErrorDetails, path: str | None, file_keys: set[str]) -> str:
    """One line: the variable (and the file, if the value came from there), then why."""
    message = error["msg"].removeprefix("Value error, ")
    variable, field = _variable(tuple(error["loc"]), error)
    if error["type"] == "knob":
        message = message.split(": ", 1)[-1]
    if variable is None:
        return message  # a cross-field check: the message names the variable itself
    name = variable
    message = message[:1].lower() + message[1:]
    if error["type"] == "missing":
        message = "required"
    if path is not None and name not in _environment() and name in file_keys:
        name = f"{path}: {name}"
    if error["type"] not in ("value_error", "missing", "knob") and "input" in error:
        shown = "<hidden>" if "password" in field else repr(error["input"])[:60]
        message = f"{message} (got {shown})"
    return f"{name}: {message}"
