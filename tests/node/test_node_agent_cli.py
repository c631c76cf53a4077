"""``gpuyield node-agent`` refuses to start without a deployment to join, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyield.cli import main


def test_without_kafka_and_redis_it_says_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("GPUYIELD_KAFKA_BOOTSTRAP", "GPUYIELD_REDIS_URL", "GPUYIELD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUYIELD_STATE_DIR", str(tmp_path))  # no worker's endpoints.json here
    with pytest.raises(SystemExit) as exit_info:
        main(["node-agent", "--node", "n1"])
    assert exit_info.value.code == 2
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert "GPUYIELD_KAFKA_BOOTSTRAP" in line
    assert "GPUYIELD_REDIS_URL" in line


def test_a_bad_proc_root_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUYIELD_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    monkeypatch.setenv("GPUYIELD_REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setenv("GPUYIELD_STATE_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        main(["node-agent", "--node", "n1", "--signaller", "hostpid", "--proc-root", "/nope"])
    assert exit_info.value.code == 2
    assert "--proc-root /nope: not a directory" in capsys.readouterr().err
