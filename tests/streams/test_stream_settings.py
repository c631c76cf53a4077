"""Settings from the environment and an env-file: two profiles, the policy knobs, one-line
errors, hidden secrets, and where each value came from."""

from __future__ import annotations

import ssl
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from faust.auth import SASLCredentials, SSLCredentials
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

from gpuyield.agents.node.executor import ExecutorSettings
from gpuyield.schemas.config import KNOBS, ControllerConfig, knob_paths, knob_value, with_knobs
from gpuyield.streams.kafka_client import (
    NoBootstrapError,
    aiokafka_kwargs,
    consumer_timing_kwargs,
    faust_app_kwargs,
    faust_credentials,
)
from gpuyield.streams.settings import (
    SETTING_NAMES,
    SETTINGS_KNOBS,
    KafkaProfile,
    SaslMechanism,
    SecurityProtocol,
    Settings,
    SettingsError,
    env_name,
    env_value,
    load_settings,
    load_settings_traced,
    settings_env,
    settings_from,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No GPUYIELD_ variable of the caller's shell leaks into these tests."""
    import os

    for name in list(os.environ):
        if name.startswith("GPUYIELD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_defaults_are_the_embedded_tansu_profile(tmp_path: Path) -> None:
    settings = load_settings()
    assert settings.kafka_bootstrap is None
    assert settings.embedded_kafka
    assert settings.embedded_redis
    assert settings.kafka_profile is KafkaProfile.TANSU
    assert settings.kafka_session_timeout_s == 6
    assert settings.kafka_producer_max_batch_size == 1
    assert settings.topic_replication_factor == 1
    assert settings.topic_partitions == 8
    assert settings.grace_s == 120
    assert settings.app_id == "gpuyield"
    assert settings.state_dir == tmp_path / "state" / "gpuyield"


def test_a_bootstrap_list_switches_to_kafka_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", " k1:9092,k2.example.com:9093 ,[::1]:9094,")
    settings = load_settings()
    assert settings.kafka_bootstrap == ["k1:9092", "k2.example.com:9093", "[::1]:9094"]
    assert settings.kafka_profile is KafkaProfile.KAFKA
    assert settings.kafka_session_timeout_s == 45
    assert settings.kafka_producer_max_batch_size == 16384
    assert settings.topic_replication_factor == 3


def test_an_empty_bootstrap_means_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", "")
    assert load_settings().kafka_bootstrap is None


def test_the_tansu_profile_applies_to_a_hand_started_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    monkeypatch.setenv("GPUYIELD_KAFKA_PROFILE", "tansu")
    monkeypatch.setenv("GPUYIELD_KAFKA_SESSION_TIMEOUT_S", "10")
    settings = load_settings()
    assert settings.kafka_producer_max_batch_size == 1
    assert settings.kafka_session_timeout_s == 10  # explicit beats the profile


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GPUYIELD_KAFKA_BOOTSTRAP", "x", "GPUYIELD_KAFKA_BOOTSTRAP: 'x' is not host:port"),
        (
            "GPUYIELD_KAFKA_BOOTSTRAP",
            "a:9092,b:99999",
            "GPUYIELD_KAFKA_BOOTSTRAP: 'b:99999' is not host:port",
        ),
        ("GPUYIELD_TOPIC_PARTITIONS", "many", "GPUYIELD_TOPIC_PARTITIONS: input should be"),
        ("GPUYIELD_GRACE_S", "-1", "GPUYIELD_GRACE_S: input should be greater than or equal"),
        ("GPUYIELD_KAFKA_SECURITY_PROTOCOL", "TLS", "GPUYIELD_KAFKA_SECURITY_PROTOCOL: input"),
        ("GPUYIELD_KAFKA_PROFILE", "redpanda", "GPUYIELD_KAFKA_PROFILE: input should be"),
        ("GPUYIELD_REDIS_URL", "localhost:6379", "GPUYIELD_REDIS_URL: 'localhost:6379' is not"),
        ("GPUYIELD_CLUSTER_ID", "Prod_1", "GPUYIELD_CLUSTER_ID: 'Prod_1' is not a DNS label"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_sasl_needs_a_username_and_a_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    with pytest.raises(SettingsError, match=r"^GPUYIELD_KAFKA_SASL_USERNAME: required when"):
        load_settings()
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_USERNAME", "ops")
    with pytest.raises(SettingsError, match=r"^GPUYIELD_KAFKA_SASL_PASSWORD: required when"):
        load_settings()


def test_mutual_tls_needs_both_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_SSL_CERTFILE", "/etc/client.pem")
    with pytest.raises(SettingsError, match=r"^GPUYIELD_KAFKA_SSL_KEYFILE: required"):
        load_settings()


def test_the_password_is_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", "k1:9092")
    monkeypatch.setenv("GPUYIELD_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_USERNAME", "ops")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_PASSWORD", "hunter2-secret")
    settings = load_settings()
    assert "hunter2-secret" not in repr(settings)
    assert "hunter2-secret" not in str(settings)
    assert "hunter2-secret" not in settings.model_dump_json()
    kwargs = aiokafka_kwargs(settings)
    assert kwargs == {
        "bootstrap_servers": ["k1:9092"],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "ops",
        "sasl_plain_password": "hunter2-secret",
    }
    credentials = faust_credentials(settings)
    assert isinstance(credentials, SASLCredentials)
    assert credentials.ssl_context is None
    assert "hunter2-secret" not in repr(credentials)


def test_a_bad_password_value_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_PASSWORD", "")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_MECHANISM", "hunter2")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith("GPUYIELD_KAFKA_SASL_MECHANISM:")


def test_sasl_ssl_builds_a_verifying_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", "k1:9093")
    monkeypatch.setenv("GPUYIELD_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_USERNAME", "ops")
    monkeypatch.setenv("GPUYIELD_KAFKA_SASL_PASSWORD", "pw")
    settings = load_settings()
    assert settings.kafka_sasl_mechanism is SaslMechanism.PLAIN
    kwargs = aiokafka_kwargs(settings)
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname
    assert context.verify_mode is ssl.CERT_REQUIRED
    credentials = faust_credentials(settings)
    assert isinstance(credentials, SASLCredentials)
    assert credentials.ssl_context is not None


def test_ssl_with_a_missing_ca_file_fails_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("GPUYIELD_KAFKA_SSL_CAFILE", "/nonexistent/ca.pem")
    settings = load_settings()
    assert settings.kafka_security_protocol is SecurityProtocol.SSL
    with pytest.raises(FileNotFoundError):
        aiokafka_kwargs(settings, "127.0.0.1:9093")


def test_ssl_gives_faust_ssl_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_SECURITY_PROTOCOL", "SSL")
    assert isinstance(faust_credentials(load_settings()), SSLCredentials)


def test_plaintext_client_kwargs_and_the_embedded_bootstrap() -> None:
    settings = load_settings()
    with pytest.raises(NoBootstrapError):
        aiokafka_kwargs(settings)
    assert aiokafka_kwargs(settings, "127.0.0.1:1234") == {
        "bootstrap_servers": ["127.0.0.1:1234"],
        "security_protocol": "PLAINTEXT",
    }
    assert faust_credentials(settings) is None
    assert consumer_timing_kwargs(settings) == {
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 2000,
    }
    app = faust_app_kwargs(settings, "127.0.0.1:1234")
    assert app["broker"] == ["kafka://127.0.0.1:1234"]
    assert app["broker_session_timeout"] == 6
    assert app["producer_max_batch_size"] == 1
    assert app["topic_replication_factor"] == 1
    assert app["id"] == "gpuyield"


def test_the_settings_file_is_an_env_file_the_environment_overrides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text(
        "# production\n"
        "GPUYIELD_KAFKA_BOOTSTRAP=k1:9092,k2:9092\n"
        "GPUYIELD_GRACE_S=300\n"
        "GPUYIELD_WORKER_SOMETHING=1  # another component's\n"
        "OTHER=ignored\n"
    )
    monkeypatch.setenv("GPUYIELD_CONFIG", str(config))
    monkeypatch.setenv("GPUYIELD_GRACE_S", "30")
    settings = load_settings()
    assert settings.kafka_bootstrap == ["k1:9092", "k2:9092"]
    assert settings.grace_s == 30
    explicit = load_settings(config, grace_s=5)
    assert explicit.grace_s == 5


def test_an_error_in_the_file_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text("GPUYIELD_KAFKA_BOOTSTRAP=kafka\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(config)
    assert str(caught.value) == f"{config}: GPUYIELD_KAFKA_BOOTSTRAP: 'kafka' is not host:port"


def test_a_missing_settings_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUYIELD_CONFIG", str(tmp_path / "absent.env"))
    with pytest.raises(SettingsError, match=r"^GPUYIELD_CONFIG: '.*absent.env' is not a readable"):
        load_settings()


# --- the policy knobs: one composed model ----------------------------------------------


def _literal_choices(knob: str) -> tuple[Any, ...]:
    """The values a ``Literal`` knob admits (empty for other types)."""
    path = SETTINGS_KNOBS[knob]
    model: Any = Settings
    for part in path[:-1]:
        model = model.model_fields[part].annotation
    annotation = model.model_fields[path[-1]].annotation
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()


def _upper_bound(knob: str) -> float | None:
    """The knob's ``le`` bound, where its field has one."""
    path = SETTINGS_KNOBS[knob]
    model: Any = Settings
    for part in path[:-1]:
        model = model.model_fields[part].annotation
    info = model.model_fields[path[-1]]
    bounds = [m.le for m in info.metadata if getattr(m, "le", None) is not None]
    return min(bounds) if bounds else None


def a_changed_value(knob: str) -> Any:
    """A valid value other than the default, for any knob (new knobs included)."""
    default = knob_value(settings_from({}), SETTINGS_KNOBS[knob])
    if isinstance(default, bool):
        return not default
    if isinstance(default, int | float):
        changed = type(default)(default * 2 + 1)
        ceiling = _upper_bound(knob)
        if ceiling is not None and changed > ceiling:  # a share: half way to its bound
            changed = type(default)((default + ceiling) / 2)
        return changed
    choices = _literal_choices(knob)
    if choices:
        return next(choice for choice in choices if choice != default)
    if isinstance(default, str):
        return f"example.com/{knob.replace('_', '-')}"
    if isinstance(default, Mapping):
        return {"production": 1000.0, "research-low": 100.0}
    raise AssertionError(f"{knob}: add a changed value for a {type(default).__name__}")


def changed_knobs() -> dict[str, Any]:
    return {knob: a_changed_value(knob) for knob in SETTINGS_KNOBS}


def test_every_knob_reads_its_own_flat_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = changed_knobs()
    for knob, value in wanted.items():
        monkeypatch.setenv(env_name(knob), env_value(value))
    settings = load_settings()
    for knob, value in wanted.items():
        assert knob_value(settings, SETTINGS_KNOBS[knob]) == value, env_name(knob)


def test_every_knob_reads_from_the_settings_file_too(tmp_path: Path) -> None:
    wanted = changed_knobs()
    config = tmp_path / "gpuyield.env"
    config.write_text("".join(f"{env_name(k)}={env_value(v)}\n" for k, v in wanted.items()))
    settings = load_settings(config)
    assert settings.controller == with_knobs(
        ControllerConfig(), {k: v for k, v in wanted.items() if k in KNOBS}
    )
    for knob, value in wanted.items():
        assert knob_value(settings, SETTINGS_KNOBS[knob]) == value, env_name(knob)


def test_a_knob_in_the_environment_wins_over_the_file_and_an_argument_over_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text("GPUYIELD_COOLDOWN_S=1200\nGPUYIELD_RESERVATION_S=300\n")
    monkeypatch.setenv("GPUYIELD_COOLDOWN_S", "900")
    settings = load_settings(config)
    assert settings.controller.policy.cooldown_s == 900
    assert settings.controller.reservation_s == 300
    assert load_settings(config, cooldown_s=60).controller.policy.cooldown_s == 60


def test_a_block_is_set_only_knob_by_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_CONTROLLER", '{"reservation_s": 5}')
    monkeypatch.setenv("GPUYIELD_RESERVATION_S", "120")
    assert load_settings().controller.reservation_s == 120


def test_the_grace_period_is_the_policy_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_GRACE_S", "45")
    settings = load_settings()
    assert settings.grace_s == settings.controller.policy.grace_s == 45


def test_priority_classes_read_as_json_or_as_name_value_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUYIELD_PRIORITY_CLASSES", '{"production": 1000, "research": 100}')
    as_json = load_settings().controller.priority_classes
    monkeypatch.setenv("GPUYIELD_PRIORITY_CLASSES", " production=1000, research=100 ")
    as_pairs = load_settings().controller.priority_classes
    assert as_json == as_pairs == {"production": 1000.0, "research": 100.0}


@pytest.mark.parametrize(
    "key",
    ["rack", "topology.kubernetes.io/rack", "nvidia.com/gpu.clique", "example.com/Rack_2"],
)
def test_a_valid_label_key_is_accepted(key: str) -> None:
    assert ControllerConfig(rack_label=key).rack_label == key


@pytest.mark.parametrize(
    "key",
    ["", "-rack", "rack-", "Example.com/rack", "a/b/c", "example.com/", "x" * 64, "my rack"],
)
def test_an_invalid_label_key_is_named(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    monkeypatch.setenv("GPUYIELD_RACK_LABEL", key)
    with pytest.raises(SettingsError, match=r"^GPUYIELD_RACK_LABEL: .* is not a Kubernetes label"):
        load_settings()


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"GPUYIELD_ALPHA": "-0.5"}, "GPUYIELD_ALPHA: must be >= 0"),
        ({"GPUYIELD_BETA": "nan"}, "GPUYIELD_BETA: input should be a finite number"),
        ({"GPUYIELD_MAX_EVICTIONS": "0"}, "GPUYIELD_MAX_EVICTIONS: must be >= 1"),
        ({"GPUYIELD_EVICTION_WINDOW_S": "0"}, "GPUYIELD_EVICTION_WINDOW_S: must be > 0"),
        ({"GPUYIELD_COOLDOWN_S": "-1"}, "GPUYIELD_COOLDOWN_S: input should be greater than"),
        (
            {"GPUYIELD_DEMAND_RETRY_S": "60", "GPUYIELD_DEMAND_BACKOFF_MAX_S": "30"},
            "GPUYIELD_DEMAND_BACKOFF_MAX_S: 30 is below demand_retry_s (60)",
        ),
        ({"GPUYIELD_PLANNER_BUDGET": "0"}, "GPUYIELD_PLANNER_BUDGET: input should be greater"),
        ({"GPUYIELD_PRIORITY_CLASSES": "prod=high"}, "GPUYIELD_PRIORITY_CLASSES: input should"),
        ({"GPUYIELD_PRIORITY_CLASSES": "Prod=1"}, "GPUYIELD_PRIORITY_CLASSES: 'Prod' is not a"),
        ({"GPUYIELD_PRIORITY_CLASSES": "[1, 2]"}, "GPUYIELD_PRIORITY_CLASSES: input should be"),
    ],
)
def test_a_bad_knob_is_one_line_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], expected: str
) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_where_each_value_came_from(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "gpuyield.env"
    config.write_text("GPUYIELD_ALPHA=100\nGPUYIELD_TOPIC_PARTITIONS=16\n")
    monkeypatch.setenv("GPUYIELD_BETA", "400")
    loaded = load_settings_traced(config, max_evictions=5)
    assert loaded.sources["GPUYIELD_ALPHA"] == f"file:{config}"
    assert loaded.sources["GPUYIELD_TOPIC_PARTITIONS"] == f"file:{config}"
    assert loaded.sources["GPUYIELD_BETA"] == "env"
    assert loaded.sources["GPUYIELD_MAX_EVICTIONS"] == "override"
    assert loaded.sources["GPUYIELD_COOLDOWN_S"] == "default"
    assert set(loaded.sources) == SETTING_NAMES
    assert loaded.explicit_knobs() == {"alpha": 100.0, "beta": 400.0, "max_evictions": 5}


def test_settings_written_as_variables_read_back_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the demo hands its worker: every value, the password included, survives."""
    original = settings_from(
        {
            "kafka_bootstrap": "k1:9092,k2:9092",
            "kafka_security_protocol": "SASL_SSL",
            "kafka_sasl_username": "ops",
            "kafka_sasl_password": "s3cret=,x",
            "topic_prefix": "test.",
            **changed_knobs(),
        }
    )
    for name, value in settings_env(original).items():
        monkeypatch.setenv(name, value)
    again = load_settings()
    assert again.model_dump() == original.model_dump()
    assert again.kafka_sasl_password is not None
    assert again.kafka_sasl_password.get_secret_value() == "s3cret=,x"


def test_settings_from_values_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_COOLDOWN_S", "999")
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", "prod-kafka:9092")
    settings = settings_from({"reservation_s": 30})
    assert settings.controller.policy.cooldown_s == ControllerConfig().policy.cooldown_s
    assert settings.kafka_bootstrap is None
    assert settings.controller.reservation_s == 30


def test_two_knobs_may_not_share_a_variable() -> None:
    class Inner(BaseModel):
        grace_s: float = 1.0

    class Clash(BaseModel):
        grace_s: float = 2.0
        inner: Inner = Inner()

    with pytest.raises(ValueError, match=r"knob 'grace_s' is both grace_s and inner\.grace_s"):
        knob_paths(Clash)


def test_the_node_agents_waits_are_settings_too(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ExecutorSettings.from_knobs(load_settings().node_agent) == ExecutorSettings()
    monkeypatch.setenv("GPUYIELD_NODE_KILL_TIMEOUT_S", "45")
    monkeypatch.setenv("GPUYIELD_NODE_EXIT_GRACE_S", "20")
    executor = ExecutorSettings.from_knobs(load_settings().node_agent, suspend_first=True)
    assert (executor.kill_timeout_s, executor.exit_grace_s) == (45, 20)
    assert executor.suspend_first


def test_a_node_agent_poll_longer_than_its_kill_timeout_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUYIELD_NODE_POLL_S", "40")
    with pytest.raises(SettingsError, match=r"^GPUYIELD_NODE_POLL_S: 40 is above node_kill"):
        load_settings()


def test_a_misspelt_knob_argument_is_an_error() -> None:
    with pytest.raises(ValidationError, match="reservation"):
        ControllerConfig(reservation=30)  # type: ignore[call-arg]


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_number_written_as_a_variable_reads_back_exactly(value: float) -> None:
    assert TypeAdapter(float).validate_strings(env_value(value)) == value


@given(
    st.dictionaries(
        st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
        st.floats(-1e9, 1e9),
        max_size=5,
    )
)
def test_priority_classes_written_as_a_variable_read_back_exactly(
    classes: dict[str, float],
) -> None:
    assert ControllerConfig(priority_classes=env_value(classes)).priority_classes == classes
