"""The shutdown deadline: a process whose orderly stop hangs still ends, and says why."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from gpuyield.streams.shutdown import EXIT_SHUTDOWN_OVERRUN, ShutdownDeadline

# A process whose stop hangs: SIGTERM arms the deadline and sets a flag nobody reads.
HANGS = textwrap.dedent(
    """
    import logging, signal, sys, threading, time
    from gpuyield.streams.shutdown import ShutdownDeadline
    logging.basicConfig(level="INFO")
    stop = threading.Event()
    deadline = ShutdownDeadline("hung service", float(sys.argv[1]))
    signal.signal(signal.SIGTERM, deadline.then(stop.set))
    print("ready", flush=True)
    while True:
        time.sleep(0.05)  # never looks at stop
    """
)

# A process that stops in order at once.
STOPS = HANGS.replace("while True:", "while not stop.is_set():")


def run_and_terminate(script: str, bound_s: float) -> tuple[int, str]:
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(bound_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)  # a hang guard, not a speed assertion
    return process.returncode, err


def test_a_stop_that_hangs_ends_at_the_deadline_with_a_log_line() -> None:
    status, log = run_and_terminate(HANGS, 0.5)
    assert status == EXIT_SHUTDOWN_OVERRUN
    assert (
        "hung service did not stop within 0.5 s of the stop signal: exiting now (status 124)" in log
    )


def test_a_process_that_stops_in_time_never_hears_from_the_deadline() -> None:
    status, log = run_and_terminate(STOPS, 5.0)
    assert status == 0
    assert "did not stop" not in log


def test_a_second_signal_does_not_move_the_deadline() -> None:
    deadline = ShutdownDeadline("twice", 600.0)
    deadline.arm()
    first = deadline._armed_at
    deadline.arm()
    assert deadline.armed
    assert deadline._armed_at == first


def test_a_bound_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ShutdownDeadline("never", 0.0)
