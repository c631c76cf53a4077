"""The policies of one simulation, side by side: one worker process per policy.

Each policy is its own run over the same workload, and each run is
deterministic (virtual time, Randoms seeded from the scenario), so a worker
gives the figures the same run in this process gives: running them at once is
a multi-core machine's speedup for free, and the results come back in the
order the policies were asked for. A run that needs its observer in this
process (``gpuyield simulate --archive``) stays here, one policy after another.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from gpuyield.agents.simulator import run_policy
from gpuyield.agents.simulator.jobs import JobSpec
from gpuyield.schemas.config import ControllerConfig
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.simulation import PolicyResult

Progress = Callable[[str, float], None]
"""Hears (policy, share of its run done), every simulated hour of each run."""

_progress: multiprocessing.Queue[tuple[str, float]] | None = None  # a worker's channel back


def default_workers() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def timed_run(
    scenario: Scenario,
    jobs: Sequence[JobSpec],
    policy: str,
    config: ControllerConfig,
    on_progress: Callable[[float], None] | None = None,
) -> tuple[PolicyResult, float, float]:
    """One policy's run, with the CPU and wall seconds it took in the process that ran it."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = run_policy(scenario, jobs, policy, on_progress, config=config)
    return result, time.process_time() - cpu, time.perf_counter() - wall


def _start_worker(channel: multiprocessing.Queue[tuple[str, float]]) -> None:
    global _progress
    _progress = channel


def _worker_run(
    scenario: Scenario, jobs: Sequence[JobSpec], policy: str, config: ControllerConfig
) -> tuple[PolicyResult, float, float]:
    """``timed_run`` in a worker: its progress goes back over the pool's channel."""
    channel = _progress
    assert channel is not None, "started by run_side_by_side's pool"
    return timed_run(scenario, jobs, policy, config, lambda done: channel.put((policy, done)))


def run_side_by_side(
    scenario: Scenario,
    jobs: Sequence[JobSpec],
    policies: Sequence[str],
    *,
    config: ControllerConfig,
    workers: int,
    on_progress: Progress | None = None,
) -> dict[str, tuple[PolicyResult, float, float]]:
    """Every policy's run, as ``timed_run`` gives it, in ``policies``' order.

    With ``workers`` above 1 (and more than one policy), up to that many runs at
    once in worker processes; otherwise one after another in this process.
    """
    if workers <= 1 or len(policies) <= 1:
        return {
            policy: timed_run(
                scenario,
                jobs,
                policy,
                config,
                None if on_progress is None else _told(on_progress, policy),
            )
            for policy in policies
        }
    # Fresh interpreters, not forks: the caller may run threads (a progress bar's).
    context = multiprocessing.get_context("spawn")
    channel: multiprocessing.Queue[tuple[str, float]] = context.Queue()
    with ProcessPoolExecutor(
        max_workers=min(workers, len(policies)),
        mp_context=context,
        initializer=_start_worker,
        initargs=(channel,),
    ) as pool:
        futures: dict[str, Future[tuple[PolicyResult, float, float]]] = {
            policy: pool.submit(_worker_run, scenario, jobs, policy, config) for policy in policies
        }
        while not all(f.done() for f in futures.values()):
            _relay(channel, on_progress, wait_s=0.2)
        _relay(channel, on_progress, wait_s=0.0)
        return {policy: future.result() for policy, future in futures.items()}


def _told(on_progress: Progress, policy: str) -> Callable[[float], None]:
    return lambda done: on_progress(policy, done)


def _relay(
    channel: multiprocessing.Queue[tuple[str, float]], on_progress: Progress | None, wait_s: float
) -> None:
    """Pass on what the workers said about their progress, waiting ``wait_s`` for the first."""
    try:
        item = channel.get(timeout=wait_s) if wait_s > 0 else channel.get_nowait()
        while True:
            if on_progress is not None:
                on_progress(*item)
            item = channel.get_nowait()
    except queue.Empty:
        return
