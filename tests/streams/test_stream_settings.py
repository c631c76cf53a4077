"""Settings from the environment and an env-file: two profiles, one-line errors, hidden secrets."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from faust.auth import SASLCredentials, SSLCredentials

from gpuyield.streams.kafka_client import (
    NoBootstrapError,
    aiokafka_kwargs,
    consumer_timing_kwargs,
    faust_app_kwargs,
    faust_credentials,
)
from gpuyield.streams.settings import (
    KafkaProfile,
    SaslMechanism,
    SecurityProtocol,
    SettingsError,
    load_settings,
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
