"""``gpuyield worker``'s options: each knob from the settings, as an operator sets it."""

from __future__ import annotations

import os

import pytest

from gpuyield.streams.settings import load_settings
from gpuyield.worker_command import worker_options


@pytest.fixture(autouse=True)
def no_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("GPUYIELD_")]:
        monkeypatch.delenv(name)


def test_the_worker_folds_heartbeats_in_batches_of_the_configured_size_and_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUYIELD_HEARTBEAT_BATCH", "250")
    monkeypatch.setenv("GPUYIELD_HEARTBEAT_BATCH_WINDOW_S", "0.5")
    options = worker_options(load_settings(), ["127.0.0.1:9092"], tick_s=2.0)
    assert (options.heartbeat_batch, options.heartbeat_batch_window_s) == (250, 0.5)


def test_by_default_a_batch_is_a_thousand_beats_or_a_tenth_of_a_second() -> None:
    options = worker_options(load_settings(), ["127.0.0.1:9092"], tick_s=2.0)
    assert (options.heartbeat_batch, options.heartbeat_batch_window_s) == (1000, 0.1)


def test_the_other_knobs_reach_the_worker_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUYIELD_HEAP_REFREEZE_S", "600")
    monkeypatch.setenv("GPUYIELD_AGENT_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("GPUYIELD_TOPIC_PREFIX", "staging.")
    options = worker_options(load_settings(), ["127.0.0.1:9092"], tick_s=1.0)
    assert options.heap_refreeze_s == 600
    assert options.attempts.attempts == 5
    assert options.topic_prefix == "staging."
    assert options.tick_s == 1.0
