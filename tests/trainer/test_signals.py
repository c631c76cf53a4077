"""Signals only set a flag; the yield happens at the next step boundary; handlers are given back."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType

import pytest
from torch import nn

from gpuyield.agents.trainer import CheckpointStore, GracefulTrainer
from gpuyield.agents.trainer.signals import YieldSignals


def test_sigusr1_yields_at_the_next_step_boundary(tmp_path: Path) -> None:
    with GracefulTrainer(tmp_path, job="ns/j") as session:
        session.resume(model=nn.Linear(2, 1))
        assert session.step_done(1) is False

        os.kill(os.getpid(), signal.SIGUSR1)

        assert session.step_done(2) is True
        assert session.yield_reason == "SIGUSR1"
        assert session.finish() == 0
    newest = CheckpointStore(tmp_path).checkpoints()[0]
    assert (newest.step, newest.metadata["reason"]) == (2, "SIGUSR1")


def test_sigterm_while_the_model_loads_is_honoured_after_the_first_step(tmp_path: Path) -> None:
    with GracefulTrainer(tmp_path, job="ns/j") as session:
        os.kill(os.getpid(), signal.SIGTERM)  # before resume(): the handler is already ours
        session.resume(model=nn.Linear(2, 1))

        assert session.step_done(1) is True
        assert session.yield_reason == "SIGTERM"


def test_the_handler_does_nothing_but_record_the_signal() -> None:
    signals = YieldSignals()
    signals.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.code == signal.SIGTERM  # the strongest request wins
    finally:
        signals.restore()


def test_previous_handlers_are_restored_on_close(tmp_path: Path) -> None:
    seen: list[int] = []

    def mine(signum: int, _frame: FrameType | None) -> None:
        seen.append(signum)

    before = {sig: signal.signal(sig, mine) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        session = GracefulTrainer(tmp_path, job="ns/j")
        assert signal.getsignal(signal.SIGTERM) is not mine
        assert signal.getsignal(signal.SIGUSR1) is not mine
        session.close()

        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGUSR1) is mine
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_handlers_are_restored_when_training_raises(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)

    def train() -> None:
        with GracefulTrainer(tmp_path, job="ns/j") as session:
            session.resume(model=nn.Linear(2, 1))
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        train()
    assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_only_request_yield_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    outcome: list[bool] = []

    def train() -> None:
        with GracefulTrainer(tmp_path, job="ns/j") as session:
            session.resume(model=nn.Linear(2, 1))
            session.request_yield()
            outcome.append(session.step_done(1))

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()

    assert outcome == [True]
    assert signal.getsignal(signal.SIGTERM) is before
    assert "not in the main thread" in caplog.text
