"""Bounded attempts: a message's effects are retried a few times, then it goes to dead letters."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from gpuyield.agents.worker.attempts import Attempts, attempt


class Sends:
    """A send that fails the first ``failures`` times with ``error``, then succeeds."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error


class Pauses:
    def __init__(self) -> None:
        self.seen: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seen.append(seconds)


async def test_a_passing_failure_is_retried_and_nothing_goes_to_dead_letters() -> None:
    send, pauses = Sends(2, KafkaTimeoutError()), Pauses()
    reason = await attempt(send, "sending decisions", Attempts(3, 0.5), sleep=pauses)
    assert reason is None
    assert send.calls == 3
    assert pauses.seen == [0.5, 1.0]  # doubling


async def test_a_message_that_always_fails_is_tried_a_bounded_number_of_times() -> None:
    error = MessageSizeTooLargeError("The message is 1200000 bytes when serialized")
    send, pauses = Sends(10**6, error), Pauses()
    reason = await attempt(
        send, "sending what kube-events/0/7 decided", Attempts(4, 0.1), sleep=pauses
    )
    assert send.calls == 4
    assert len(pauses.seen) == 3  # no pause after the last try
    assert reason is not None
    assert reason.startswith("failed 4 times (sending what kube-events/0/7 decided)")
    assert "MessageSizeTooLargeError" in reason
    assert "1200000 bytes" in reason


async def test_one_attempt_means_no_retry() -> None:
    send = Sends(1, KafkaTimeoutError())
    reason = await attempt(send, "forwarding progress", Attempts(1, 5.0), sleep=Pauses())
    assert send.calls == 1
    assert reason is not None


async def test_a_stopping_worker_is_not_taken_for_a_failure() -> None:
    send = Sends(1, asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await attempt(send, "sending", Attempts(3, 0.0), sleep=Pauses())
    assert send.calls == 1


@pytest.mark.parametrize(("attempts", "backoff_s"), [(0, 0.5), (3, -1.0)])
def test_the_knobs_are_checked(attempts: int, backoff_s: float) -> None:
    with pytest.raises(ValueError):
        Attempts(attempts, backoff_s)
