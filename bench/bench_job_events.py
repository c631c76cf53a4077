"""The Kubernetes Events of one decision at scale: how many, and what they cost the decider.

Not a test. ``python bench/bench_job_events.py [--nodes 256 1000 10000] [--write 256 1000]``
plans ``bench/synthetic.py``'s cluster of each size with the decision record's
explanation, as the decider does, wraps it in a ``Decision`` and builds its
Events (``agents/controller/job_events.py``) twice:

- as the worker does now: a ``GracefulYield`` on each victim and a ``Spared``
  on the ``GPUYIELD_KUBE_EVENTS_SPARED`` (default 20) kept candidates the plan
  came closest to taking;
- with a ``Spared`` on every kept candidate (``spared_limit`` as large as the
  plan), which is what the worker wrote before the limit.

For the sizes in ``--write`` it then creates both sets through the worker's
``EventWriter`` on the faithful fake API server (``tests/fakes/kube_api.py``, one
HTTP round trip per Event, as on a real API server; a real one adds its
admission, etcd write and network, so these are lower bounds). The worker
awaits that write before the decider's next input, so its wall time is the
decider's stall per decision. CPU time of this process for the builds (median
of ``--rounds``), wall time for the writes; the machine is named.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import kubernetes.client
from machine import machine
from synthetic import PREEMPTOR, make_cluster

from gpuyield.agents.controller.job_events import SPARED, decision_events
from gpuyield.agents.planner import plan
from gpuyield.schemas.config import SPARED_EVENTS
from gpuyield.schemas.messages import Decision
from gpuyield.streams.kube_job_events import EventWriter

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the fake API server lives with the tests

from fakes.kube_api import FakeKubeApi  # noqa: E402


def a_decision(nodes: int) -> Decision:
    """The decision on the synthetic cluster, its jobs named ``namespace/name`` as the decider's.

    The synthetic snapshot's jobs have bare names; a Kubernetes Event needs
    the Volcano Job's namespace, so each job is put in one named after its queue.
    """
    snapshot = make_cluster(nodes, 0)
    result = plan(snapshot, PREEMPTOR, explain=True)
    result = result.model_copy(
        update={
            "preemptor": f"prod/{PREEMPTOR}",
            "victims": tuple(
                v.model_copy(update={"job": f"{v.queue}/{v.job}"}) for v in result.victims
            ),
            "candidates": tuple(
                c.model_copy(update={"job": f"{c.queue}/{c.job}"}) for c in result.candidates
            ),
        }
    )
    return Decision(
        decision_id=f"bench-{nodes}",
        demand=f"prod/{PREEMPTOR}",
        decided_at=snapshot.now,
        snapshot=snapshot,
        plan=result,
        commands=tuple(f"yield-{v.job}" for v in result.victims),
    )


def no_uid(job: str) -> str | None:
    """The bench's jobs have no uid (the Events then name the job without one)."""
    return None


def cpu_median(build: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        begun = time.process_time()
        build()
        times.append(time.process_time() - begun)
    return statistics.median(times)


def written_in(events: list[dict[str, object]]) -> tuple[float, int]:
    """Wall seconds to create ``events`` on a fresh fake API server, and the failures."""
    with FakeKubeApi() as api:
        client = kubernetes.client.ApiClient(api.configuration())
        try:
            begun = time.perf_counter()
            failures = EventWriter(client).create(events)
            return time.perf_counter() - begun, len(failures)
        finally:
            client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1000, 10000])
    parser.add_argument("--write", type=int, nargs="*", default=[256, 1000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    info = machine()
    print(f"machine: {info}")
    print(
        "| nodes | candidates | kept (spared) | Events now (Spared) | build now, CPU | "
        "Events with every Spared | build, CPU | write now, wall | write every Spared, wall |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for nodes in args.nodes:
        decision = a_decision(nodes)
        assert decision.plan is not None
        candidates = decision.plan.candidates
        kept = sum(1 for c in candidates if c.outcome == "spared")
        every = len(candidates)

        now = functools.partial(decision_events, [decision], no_uid, "bench")
        unlimited = functools.partial(now, spared_limit=every)
        few, many = now(), unlimited()
        build_few, build_many = cpu_median(now, args.rounds), cpu_median(unlimited, args.rounds)
        write_few = write_many = "-"
        if nodes in args.write:
            seconds, failed = written_in(few)
            write_few = f"{seconds:.2f} s" + (f" ({failed} failed)" if failed else "")
            seconds, failed = written_in(many)
            write_many = f"{seconds:.2f} s" + (f" ({failed} failed)" if failed else "")
        spared_few = sum(1 for e in few if e["reason"] == SPARED)
        spared_many = sum(1 for e in many if e["reason"] == SPARED)
        print(
            f"| {nodes:,} | {every:,} | {kept:,} | {len(few)} ({spared_few}) | "
            f"{build_few * 1000:.1f} ms | {len(many):,} ({spared_many:,}) | "
            f"{build_many * 1000:.0f} ms | {write_few} | {write_many} |",
            flush=True,
        )
    print(f"(Spared limit: {SPARED_EVENTS}, the default of GPUYIELD_KUBE_EVENTS_SPARED)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
