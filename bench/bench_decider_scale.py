"""The decider at 1,000 and 10,000 nodes: inputs per second and decision latency, in one process.

The inputs come from ``decider_stream.Stream`` (a seeded stand-in cluster
built from ``synthetic.make_cluster``: about three jobs per node, watch
events, progress, ticks, and an urgent gang every ``--urgent-every`` inputs
that makes the decider plan; see that module). The table is loaded the way a
worker's recovery does (each watched object's record, then the index built
from the table), and every input then goes through ``step`` as the worker
calls it: with the table and its index, the writes applied to both after.

Reported per cluster size, medians over ``--runs`` runs of ``--inputs`` inputs:

- inputs per second over all inputs, and over those that ran no planner;
- the latency of the steps that decided (ran the planner), median and p99,
  and the planner's own share of it (another part of the project);
- a step's latency for the other inputs, median and p99, and its median in CPU
  time for each kind of input (``quiet_cpu_ms_p50_by_kind``: watch events, progress, ticks);
- the time to load the table and build its index, its snapshot models
  included (a worker's restart);
- the process's peak resident memory once the 10,000-node table is loaded;
- inputs per second and the planning steps' latency in CPU time of the
  process too (``time.process_time``), which the load of a shared machine
  does not inflate the way it does wall-clock time; and per CPU second of
  the worker's share alone (``decider_inputs_per_cpu_s``: each input's step,
  the index's update and the encoding of what the step sends, without the
  stand-in cluster's own work of making the next input and answering
  commands);
- the encoding's own median on the steps that decided (``encode_cpu_ms_p50``):
  the worker encodes every message of an outcome before sending it
  (``publish_outcome``), and a decision record carries the snapshot and
  the plan (some 30 MB at 10,000 nodes), its snapshot joined from the JSON
  the worker keeps of the models the last one carried (``--whole-records``:
  encoded whole, as before). Before December 2026 no figure here counted
  it;
- Python's full collections while the inputs ran, and their CPU seconds
  (``full_collections``): the heap is frozen once the index is built, as the
  worker does (``agents/worker/frozen_heap.py``); ``--no-freeze`` measures
  without it;
- a SHA-256 over every measured outcome: equal for two runs of one seed
  when they decided the same, byte for byte.

    .venv/bin/python bench/bench_decider_scale.py [--nodes 1000 10000] [--inputs 20000]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

from decider_reference import digest
from decider_stream import Stream

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, step, watched_record
from gpuyield.agents.controller.records import CLOCK, ClockRecord, Record
from gpuyield.agents.planner import plan
from gpuyield.agents.worker.shell import OutcomeSinks, outgoing
from gpuyield.schemas import Plan, Snapshot
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import KubeEvent, KubeEventType, Tick

try:  # the worker's frozen heap (issue 14); absent on older checkouts, which never froze it
    from gpuyield.agents.worker.frozen_heap import FrozenHeap
except ImportError:  # pragma: no cover - measuring the code before it
    FrozenHeap = None  # type: ignore[assignment,misc]
try:  # the incremental index (issue 14); absent on older checkouts, which rebuild per step
    from gpuyield.agents.controller.index import RecordIndex
except ImportError:  # pragma: no cover - measuring the code before the index
    RecordIndex = None  # type: ignore[assignment,misc]


def load(stream: Stream, config: ControllerConfig) -> dict[str, Record]:
    """The table a worker recovers: every watched object's record, as ``step`` would write it,
    and the decider's clock at the stream's start."""
    table: dict[str, Record] = {}
    for message in stream.initial():
        assert isinstance(message, KubeEvent)
        assert message.type is KubeEventType.ADDED
        key, record = watched_record(message, config)
        table[key] = record.dump()
    table[CLOCK] = ClockRecord(now=stream.now, tick=stream.now).dump()
    return table


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(
    nodes: int,
    inputs: int,
    warmup: int,
    urgent_every: int,
    share: float,
    seed: int,
    *,
    resume_backoff_s: float | None = None,
    resume_memo: bool = True,
    parked: int = 0,
    free_capacity: bool = True,
    warm: bool = True,
    beating: bool = False,
    freeze: bool = True,
) -> dict[str, Any]:
    config = ControllerConfig()
    if resume_backoff_s is not None:
        config = config.model_copy(update={"resume_backoff_base_s": resume_backoff_s})
    if parked:
        config = config.model_copy(update={"adopt_aborted_jobs": True})
    stream = Stream(nodes, seed=seed, urgent_every=urgent_every, unschedulable_share=share)
    started = time.perf_counter()
    table = load(stream, config)
    loaded_s = time.perf_counter() - started
    started = time.perf_counter()
    if RecordIndex is None:
        index = None
    elif free_capacity:
        index = RecordIndex.build(table, config)
    else:  # the resume checks build the planner's snapshot, as before the free GPUs per node
        index = RecordIndex.build(table, config, free_capacity=False)
    if warm and hasattr(index, "warm"):
        index.warm(table)  # as the worker does after building it: part of a restart
    index_s = time.perf_counter() - started
    heap = FrozenHeap(3600.0) if freeze and FrozenHeap is not None else None
    if heap is not None:
        heap.freeze()  # as the worker does once its index is built (not timed: a restart's)
    collections = _FullCollections()
    planner_s = [0.0, 0.0]  # wall, CPU

    def timed(snapshot: Snapshot, preemptor: str, **kwargs: Any) -> Plan:
        t, c = time.perf_counter(), time.process_time()
        try:
            return plan(snapshot, preemptor, **kwargs)
        finally:
            planner_s[0] += time.perf_counter() - t
            planner_s[1] += time.process_time() - c

    feed = _feeder(table, index, config, timed, resume_memo=resume_memo)
    feed(Tick(at=stream.now), "warm/0/0")
    if beating:
        for n, summary in enumerate(stream.beating()):
            feed(summary, f"beating/0/{n}")
    stream.park(parked)
    for n in range(warmup):
        stream.answer(feed(next(stream), f"warm/0/{n + 1}"))
    decided: list[tuple[float, float]] = []  # (step s, planner s)
    decided_cpu: list[tuple[float, float]] = []  # the same in CPU seconds of this process
    quiet: list[float] = []
    quiet_cpu: list[float] = []
    quiet_by_kind: dict[str, list[float]] = {}  # CPU seconds of the quiet steps, per input kind
    encoded_cpu: list[float] = []  # CPU seconds encoding the outcome of each step that planned
    counts = {"decisions": 0, "commands": 0}
    outcomes = hashlib.sha256()  # over every outcome measured: equal, byte-identical runs
    total, total_cpu = time.perf_counter(), time.process_time()
    for n in range(inputs):
        message = next(stream)
        planner_s[:] = [0.0, 0.0]
        t, c = time.perf_counter(), time.process_time()
        outcome = feed(message, f"bench/0/{n}")
        encoding = time.process_time()
        sent(outcome)
        encoding = time.process_time() - encoding
        took, took_cpu = time.perf_counter() - t, time.process_time() - c
        if planner_s[0] > 0:
            decided.append((took, planner_s[0]))
            decided_cpu.append((took_cpu, planner_s[1]))
            encoded_cpu.append(encoding)
        else:
            quiet.append(took)
            quiet_cpu.append(took_cpu)
            quiet_by_kind.setdefault(type(message).__name__, []).append(took_cpu)
        counts["decisions"] += sum(1 for d in outcome.decisions if d.plan is not None)
        counts["commands"] += len(outcome.commands)
        outcomes.update(digest(outcome).encode())
        stream.answer(outcome)
    total = time.perf_counter() - total
    total_cpu = time.process_time() - total_cpu
    collections.stop()
    if heap is not None:
        heap.release()
    return {
        "nodes": nodes,
        "records": len(table),
        "jobs": len(stream.running) + len(stream.waiting),
        "load_s": loaded_s,
        "index_s": index_s,
        "inputs_per_s": inputs / total,
        "inputs_per_cpu_s": inputs / total_cpu,
        # The worker's share alone: each input's step and the index's update, without
        # the stand-in cluster making the next input and answering this one's commands.
        "decider_inputs_per_cpu_s": inputs / (sum(quiet_cpu) + sum(d for d, _ in decided_cpu)),
        "quiet_per_s": len(quiet) / sum(quiet) if quiet else float("nan"),
        "quiet_ms_p50": 1000 * percentile(quiet, 0.5),
        "quiet_ms_p99": 1000 * percentile(quiet, 0.99),
        "decided": len(decided),
        "decided_ms_p50": 1000 * percentile([d for d, _ in decided], 0.5),
        "decided_ms_p99": 1000 * percentile([d for d, _ in decided], 0.99),
        "planner_ms_p50": 1000 * percentile([p for _, p in decided], 0.5),
        "outside_planner_ms_p50": 1000 * percentile([d - p for d, p in decided], 0.5),
        "quiet_per_cpu_s": len(quiet_cpu) / sum(quiet_cpu) if sum(quiet_cpu) else float("nan"),
        "decided_cpu_ms_p50": 1000 * percentile([d for d, _ in decided_cpu], 0.5),
        "planner_cpu_ms_p50": 1000 * percentile([p for _, p in decided_cpu], 0.5),
        "outside_planner_cpu_ms_p50": 1000 * percentile([d - p for d, p in decided_cpu], 0.5),
        "encode_cpu_ms_p50": 1000 * percentile(encoded_cpu, 0.5),
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "quiet_cpu_ms_p50_by_kind": {
            kind: round(1000 * percentile(times, 0.5), 4)
            for kind, times in sorted(quiet_by_kind.items())
        },
        "full_collections": collections.count,
        "full_collections_cpu_s": round(collections.cpu_s, 3),
        **counts,
        "outcomes_sha256": outcomes.hexdigest()[:16],
    }


class _FullCollections:
    """Python's full (generation 2) collections while the inputs ran, and their CPU time."""

    def __init__(self) -> None:
        self.count = 0
        self.cpu_s = 0.0
        self._began = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.process_time()
        else:
            self.count += 1
            self.cpu_s += time.process_time() - self._began

    def stop(self) -> None:
        gc.callbacks.remove(self._observe)


async def _dropped(key: bytes, value: bytes) -> None:
    """A sink that sends nothing: the bench times the encoding, not a broker."""


SINKS = OutcomeSinks(_dropped, _dropped, _dropped, _dropped)
"""The worker's sinks, their kept JSON of snapshot models (``OutcomeSinks.kept``) with them,
for the whole run."""
WHOLE_RECORDS = False
"""``--whole-records``: every message encoded whole, as the worker did before it kept JSON."""


def sent(outcome: Any) -> list[bytes]:
    """What the worker's ``publish_outcome`` sends of ``outcome``, encoded as it does."""
    if WHOLE_RECORDS:
        messages = (*outcome.reservations, *outcome.decisions, *outcome.commands, *outcome.alerts)
        return [encode(m) for m in messages]
    return [value for _, _, _, value in outgoing(outcome, SINKS)]


def _feeder(
    table: dict[str, Record],
    index: Any,
    config: ControllerConfig,
    planner: Callable[..., Plan],
    *,
    resume_memo: bool = True,
) -> Callable[[Input, str], Any]:
    def feed(message: Input, origin: str) -> Any:
        if not resume_memo and hasattr(index, "resume_memo"):
            index.resume_memo = None  # the decider before the resume pass's memo
        if index is None:
            outcome = step(table, message, origin, config, planner=planner)
        else:
            outcome = step(table, message, origin, config, planner=planner, index=index)
        for key, value in outcome.writes.items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        if index is not None:
            index.apply(outcome.writes, table)
        return outcome

    return feed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--inputs", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--urgent-every", type=int, default=2000)
    parser.add_argument("--unschedulable-share", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--resume-backoff-s",
        type=float,
        help="GPUYIELD_RESUME_BACKOFF_BASE_S for the run (default: the config's, 300 s; at "
        "nodes/10 inputs per second of cluster time the victims never become resumable "
        "within a run unless this is small)",
    )
    parser.add_argument(
        "--no-resume-memo",
        action="store_true",
        help="forget the resume pass's memo before every step (the decider before it)",
    )
    parser.add_argument(
        "--parked",
        type=int,
        default=0,
        help="gangs aborted outside gpuyield, adopted as suspended, that cannot fit "
        "(decider_stream.Stream.park): a full cluster after a preemption",
    )
    parser.add_argument(
        "--no-free-capacity",
        action="store_true",
        help="the index keeps no free GPUs per node: every resume check builds the "
        "planner's snapshot (the decider before it)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="do not warm the index's snapshot models after building it (the first plan "
        "builds them, as before the worker warmed them)",
    )
    parser.add_argument(
        "--beating",
        action="store_true",
        help="before the warm-up, a progress summary of every running job (every job runs "
        "the trainer SDK): the stream's progress inputs then update records, not create them",
    )
    parser.add_argument(
        "--whole-records",
        action="store_true",
        help="encode every decision record whole, its snapshot included, as the worker did "
        "before it kept its snapshot models' JSON (schemas.record_encoding)",
    )
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="do not freeze the heap once the index is built (the worker before "
        "GPUYIELD_HEAP_REFREEZE_S; full collections then walk the table and the index)",
    )
    args = parser.parse_args()
    if args.whole_records:
        global WHOLE_RECORDS
        WHOLE_RECORDS = True
    results: dict[int, list[dict[str, Any]]] = {}
    for nodes in args.nodes:
        for r in range(args.runs):
            result = run(
                nodes,
                args.inputs,
                args.warmup,
                args.urgent_every,
                args.unschedulable_share,
                args.seed + r,
                resume_backoff_s=args.resume_backoff_s,
                resume_memo=not args.no_resume_memo,
                parked=args.parked,
                free_capacity=not args.no_free_capacity,
                warm=not args.cold,
                beating=args.beating,
                freeze=not args.no_freeze,
            )
            print(result, flush=True)
            results.setdefault(nodes, []).append(result)
    cpu = platform.processor() or platform.machine()
    load1 = os.getloadavg()[0]
    print(f"\nmachine: {cpu}, {os.cpu_count()} cores, load average {load1:.1f}")
    print(
        f"{args.inputs} inputs per run after {args.warmup} warm-up, medians of {args.runs} runs\n"
    )
    keys = ["records", "index_s", "inputs_per_s", "quiet_per_s", "quiet_ms_p50", "quiet_ms_p99",
            "decided", "decided_ms_p50", "decided_ms_p99", "planner_ms_p50",
            "outside_planner_ms_p50", "rss_mib"]  # fmt: skip
    cpu_keys = ["inputs_per_cpu_s", "decider_inputs_per_cpu_s", "quiet_per_cpu_s",
                "decided_cpu_ms_p50", "planner_cpu_ms_p50",
                "outside_planner_cpu_ms_p50", "encode_cpu_ms_p50"]  # fmt: skip
    print("| nodes | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for nodes, runs in results.items():
        cells = [f"{statistics.median(r[k] for r in runs):,.2f}" for k in keys]
        print(f"| {nodes:,} | " + " | ".join(cells) + " |")
    print(
        "\nthe same in CPU time of the process (what a shared machine's load does not inflate):\n"
    )
    print("| nodes | " + " | ".join(cpu_keys) + " |")
    print("|---" * (len(cpu_keys) + 1) + "|")
    for nodes, runs in results.items():
        cells = [f"{statistics.median(r[k] for r in runs):,.2f}" for k in cpu_keys]
        print(f"| {nodes:,} | " + " | ".join(cells) + " |")
    if len(results) > 1:
        small, large = min(results), max(results)
        ratio = statistics.median(r["inputs_per_s"] for r in results[large]) / statistics.median(
            r["inputs_per_s"] for r in results[small]
        )
        print(f"\ninputs/s at {large:,} nodes / at {small:,} nodes: {ratio:.2f}")


if __name__ == "__main__":
    main()
