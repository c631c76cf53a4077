"""Benchmark of the streaming controller: heartbeat throughput and decision latency.

Real ``gpuyield worker`` processes on the embedded Tansu broker and a real
Redis (the machine's at 127.0.0.1:6379, else an embedded Valkey):

1. Throughput: ``--beats`` heartbeats of 200 jobs are put on the topic (8
   partitions, keyed by job) before the workers start; the clock runs from
   the first "Worker ready" until every job's final summary (progress 100 %)
   is on ``gpuyield.job-progress``. Partitions keep each job's beats in
   order, so that is when all were read. Each ``--workers`` count (1 and 2
   processes of one consumer group, started together) runs once per
   ``--repeat`` round, interleaved; each run reports how many beats each
   worker read (its own counter) and its CPU seconds, so the figures can be
   read on a machine shared with other work.
2. Decision latency: a 512-GPU cluster (64 nodes x 8) with 200 running
   research jobs heartbeating every 10 s; ``--demands`` times, a production
   fine-tune that Volcano cannot place is announced, and the time until its
   yield commands are on ``gpuyield.yield-commands`` is measured (pending gang
   observed -> commands published). The victims then acknowledge, leave, and
   the fine-tune is placed, as on a real cluster.

    .venv/bin/python bench/bench_controller.py [--beats 50000] [--workers 1 2] [--repeat 1]
        [--demands 30]  # 0: no latency run

Prints a markdown table with the machine named; figures are medians/p99 of
one run (rerun for spread).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from machine import machine

from gpuyield.agents.simulator.allocate import place
from gpuyield.schemas import kube_objects as kube
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import (
    Decision,
    Heartbeat,
    JobProgressBatch,
    KubeEvent,
    KubeEventType,
    KubeKind,
    YieldAck,
    YieldCommand,
    YieldOutcome,
)
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedRedis
from gpuyield.streams.topics import ensure_topics, registry

GPUYIELD = str(Path(sys.executable).parent / "gpuyield")
NODES = 64
GANGS = 40  # 2 pods x 4 GPUs, on the first 40 nodes
SINGLES = 160  # 1 GPU each, 6-7 per node on the other 24: no free 8-GPU node anywhere


def obj_event(kind: KubeKind, obj: dict[str, Any], at: float, deleted: bool = False) -> KubeEvent:
    built = kube.event(obj, at, KubeEventType.DELETED if deleted else KubeEventType.ADDED)
    assert built.kind is kind, (built.kind, kind)
    return built


# The cluster's objects, from the one set of builders (gpuyield.schemas.kube_objects).


def node(name: str) -> dict[str, Any]:
    return kube.a_gpu_node(name, gpus=8, rack=f"r{name[-2:-1]}")


def queue(name: str, capability: int, guarantee: int, reclaimable: bool) -> dict[str, Any]:
    return kube.a_queue(
        name,
        capability={kube.GPU: capability},
        guarantee={kube.GPU: guarantee} if guarantee else None,
        reclaimable=reclaimable,
    )


def group(
    job: str, ns: str, q: str, members: int, phase: str, unschedulable: bool
) -> dict[str, Any]:
    return kube.a_pod_group(
        f"{job}-pg",
        namespace=ns,
        min_member=members,
        queue=q,
        phase=phase,
        owner={"metadata": {"name": job}},
        unschedulable=unschedulable,
        created_at=time.time(),
    )


def pod(
    job: str, ns: str, i: int, gpus: int, node_name: str | None, prio: int, started: float
) -> dict[str, Any]:
    return kube.a_pod(
        f"{job}-worker-{i}",
        namespace=ns,
        node=node_name,
        gpus=gpus,
        pod_group=f"{job}-pg",
        queue="production" if ns == "prod" else "research",
        priority=prio,
        labels={kube.JOB_NAME: job},
        started_at=started if node_name else None,
    )


def cluster(now: float) -> tuple[list[KubeEvent], list[str]]:
    events = [obj_event(KubeKind.NODE, node(f"gpu-{i:02d}"), now) for i in range(NODES)]
    events += [
        obj_event(KubeKind.QUEUE, queue("production", 512, 384, False), now),
        obj_event(KubeKind.QUEUE, queue("research", 512, 0, True), now),
    ]
    jobs = []
    for g in range(GANGS):
        job = f"gang-{g:03d}"
        jobs.append(f"research/{job}")
        events.append(
            obj_event(
                KubeKind.POD_GROUP, group(job, "research", "research", 2, "Running", False), now
            )
        )
        for k in range(2):
            where = f"gpu-{(g + k * 20) % GANGS:02d}"
            started = now - 3600 * (1 + g % 7)
            events.append(
                obj_event(KubeKind.POD, pod(job, "research", k, 4, where, 100, started), now)
            )
    for s in range(SINGLES):
        job = f"single-{s:03d}"
        jobs.append(f"research/{job}")
        where = f"gpu-{GANGS + s % (NODES - GANGS):02d}"
        events.append(
            obj_event(
                KubeKind.POD_GROUP, group(job, "research", "research", 1, "Running", False), now
            )
        )
        started = now - 600 * (2 + s % 11)
        events.append(obj_event(KubeKind.POD, pod(job, "research", 0, 1, where, 100, started), now))
    return events, jobs


async def send_all(
    producer: AIOKafkaProducer,
    topic: str,
    items: list[tuple[str, Any]],
    stamp: Callable[[Any], float] | None = None,
) -> None:
    """Put ``items`` on ``topic``; ``stamp``: the record timestamp (s) each was sent at."""
    futures = [
        await producer.send(
            topic,
            value=encode(m),
            key=k.encode(),
            timestamp_ms=None if stamp is None else int(stamp(m) * 1000),
        )
        for k, m in items
    ]
    await producer.flush()
    for f in futures:
        await f


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int | None


@contextlib.contextmanager
def workers(
    bootstrap: str,
    redis_url: str,
    prefix: str,
    state: Path,
    count: int = 1,
    metrics: bool = False,
) -> Iterator[list[Worker]]:
    """``count`` worker processes of one deployment (one consumer group), started together."""
    state.mkdir(parents=True, exist_ok=True)
    app_id = f"bench-{secrets.token_hex(3)}"
    cluster_id = f"bench-{secrets.token_hex(3)}"
    started: list[Worker] = []
    try:
        for n in range(count):
            log = state / f"worker-{n}.log"
            port = free_port() if metrics else None
            process_env = {
                **os.environ,
                "GPUYIELD_KAFKA_BOOTSTRAP": bootstrap,
                "GPUYIELD_KAFKA_PROFILE": "tansu",
                "GPUYIELD_REDIS_URL": redis_url,
                "GPUYIELD_TOPIC_PREFIX": prefix,
                "GPUYIELD_APP_ID": app_id,
                "GPUYIELD_CLUSTER_ID": cluster_id,
                "GPUYIELD_STATE_DIR": str(state / f"worker-{n}"),
            }
            command = [GPUYIELD, "worker", "--tick-s", "1"]
            if port is not None:
                command += ["--metrics-port", str(port)]
            with log.open("ab") as out:
                process = subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, env=process_env
                )
            started.append(Worker(process, log, port))
        yield started
    finally:
        for w in started:
            w.process.send_signal(signal.SIGTERM)
        for w in started:
            try:
                w.process.wait(30)
            except subprocess.TimeoutExpired:
                w.process.kill()


@contextlib.contextmanager
def worker(bootstrap: str, redis_url: str, prefix: str, state: Path) -> Iterator[Path]:
    with workers(bootstrap, redis_url, prefix, state) as [one]:
        yield one.log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def heartbeats_folded(port: int) -> float:
    """The worker's own count of heartbeats read (its Prometheus counter)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpuyield_heartbeats_total")
    )


async def wait_ready(log: Path) -> float:
    while b"Worker ready" not in log.read_bytes():
        await asyncio.sleep(0.05)
    return time.time()


@dataclasses.dataclass(frozen=True)
class Throughput:
    beats: int
    seconds: float
    folded: tuple[float, ...]
    """Heartbeats each worker read (its own counter), when measured."""
    cpu_s: tuple[float | None, ...]
    """CPU seconds each worker spent between ready and done."""
    messages: int = 0
    """Messages on ``gpuyield.job-progress`` until the end: the decider's steps for progress."""
    summaries: int = 0
    """Summaries those messages carried."""

    @property
    def rate(self) -> float:
        return self.beats / self.seconds

    @property
    def cpu_bound_rate(self) -> float | None:
        """Beats per second were each worker on a core of its own: the busiest one's CPU time.

        On a machine shared with other work the wall-clock rate measures the
        sharing as much as the worker; this is what its own CPU time allows
        (the broker's is not counted).
        """
        if not self.cpu_s or any(c is None for c in self.cpu_s):
            return None
        return self.beats / max(c for c in self.cpu_s if c is not None)


async def throughput(
    bootstrap: str, redis_url: str, beats: int, state: Path, count: int = 1
) -> Throughput:
    prefix = f"b{secrets.token_hex(4)}."
    await ensure_topics({"bootstrap_servers": bootstrap}, registry(prefix=prefix), 1)
    jobs = [f"research/job-{j:03d}" for j in range(200)]
    per_job = beats // len(jobs)
    now = time.time()
    # As trainers send them: one beat per job every 10 s, a few hundred steps
    # apart, progress creeping (a multi-hour job moves a fraction of a percent
    # per beat); the last beat of each job says 100 %, so the end is visible.
    items = [
        (
            job,
            Heartbeat(
                job=job,
                pod=f"{job[9:]}-worker-0",
                step=(i + 1) * 300,
                progress=1.0 if i == per_job - 1 else 0.2 + 0.0003 * i,
                last_checkpoint_at=now - 600 + 10 * i - (10 * i) % 1800,
                sent_at=now - 10 * (per_job - i),
            ),
        )
        for i in range(per_job)
        for job in jobs
    ]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        # Stamped when each was sent, as a trainer's producer stamps it: the backlog
        # spans 2,500 s, and the record's time is what tells it from a skewed clock.
        await send_all(producer, prefix + "gpuyield.heartbeats", items, lambda b: b.sent_at)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition(prefix + "gpuyield.job-progress", 0)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    finished: set[str] = set()
    messages = summaries = 0
    with workers(bootstrap, redis_url, prefix, state, count, metrics=count > 1) as started:
        # The clock starts when the first is ready: started together, they join
        # one group generation, and any beat folded before the other is ready counts.
        readies = await asyncio.gather(*(wait_ready(w.log) for w in started))
        ready = min(readies)
        cpu_at_ready = [cpu_seconds(w.process.pid) for w in started]
        while len(finished) < len(jobs):
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    batch = JobProgressBatch.model_validate_json(r.value)
                    messages += 1
                    summaries += len(batch.summaries)
                    for summary in batch.summaries:
                        if summary.progress >= 1.0:
                            finished.add(summary.job)
        done = time.time()
        cpu_at_done = [cpu_seconds(w.process.pid) for w in started]
        folded = tuple(
            heartbeats_folded(w.metrics_port) for w in started if w.metrics_port is not None
        )
    await consumer.stop()
    cpu = tuple(
        None if a is None or b is None else b - a
        for a, b in zip(cpu_at_ready, cpu_at_done, strict=True)
    )
    return Throughput(len(items), done - ready, folded, cpu, messages, summaries)


async def latency(bootstrap: str, redis_url: str, demands: int, state: Path) -> list[float]:
    prefix = f"l{secrets.token_hex(4)}."
    await ensure_topics({"bootstrap_servers": bootstrap}, registry(prefix=prefix), 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    # The measuring consumer polls fast, so its own wait is not counted as the worker's.
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=5
    )
    await consumer.start()
    await consumer.topics()
    command_tps = [
        TopicPartition(prefix + "gpuyield.yield-commands", p)
        for p in sorted(consumer.partitions_for_topic(prefix + "gpuyield.yield-commands") or {0})
    ]
    decisions_tp = TopicPartition(prefix + "gpuyield.decisions", 0)
    consumer.assign([*command_tps, decisions_tp])
    await consumer.seek_to_beginning(*command_tps, decisions_tp)
    kube = prefix + "gpuyield.kube-events"
    results: list[float] = []
    stop = asyncio.Event()
    with worker(bootstrap, redis_url, prefix, state) as log:
        await wait_ready(log)
        events, jobs = cluster(time.time())
        await send_all(producer, kube, [(e.key, e) for e in events])

        async def heartbeats() -> None:  # 200 jobs every 10 s: 20 a second
            step = 0
            while not stop.is_set():
                step += 1
                now = time.time()
                batch = [
                    (
                        job,
                        Heartbeat(
                            job=job,
                            pod="w",
                            step=step * 100 + i,
                            progress=0.3,
                            last_checkpoint_at=now - 60,
                            sent_at=now,
                        ),
                    )
                    for i, job in enumerate(jobs[step % 10 :: 10])
                ]
                await send_all(producer, prefix + "gpuyield.heartbeats", batch)
                await asyncio.sleep(1.0)

        beating = asyncio.create_task(heartbeats())
        await asyncio.sleep(5.0)  # the cluster is in the decider's table
        pods_of: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            if e.kind is KubeKind.POD:
                pods_of.setdefault(
                    f"research/{e.object['metadata']['labels']['volcano.sh/job-name']}", []
                ).append(e.object)
        free = {f"gpu-{i:02d}": 8 for i in range(NODES)}
        for e in events:
            if e.kind is KubeKind.POD:
                limits = e.object["spec"]["containers"][0]["resources"]["limits"]
                free[e.object["spec"]["nodeName"]] -= int(limits["nvidia.com/gpu"])
        d = 0
        while len(results) < demands:
            d += 1
            job = f"ft-{d:03d}"
            now = time.time()
            # Volcano's allocate (the one model): nodes in name order, the tightest fit.
            room = place(dict(sorted(free.items())), [8], min_count=1)
            if room:  # Volcano places it without anyone yielding: nothing to measure
                [(_, where)] = room
                free[where] -= 8
                placed = pod(job, "prod", 0, 8, where, 1000, now)
                g_running = group(job, "prod", "production", 1, "Running", False)
                await send_all(
                    producer,
                    kube,
                    [
                        (f"Pod/prod/{job}", obj_event(KubeKind.POD, placed, now)),
                        (f"PodGroup/prod/{job}", obj_event(KubeKind.POD_GROUP, g_running, now)),
                    ],
                )
                continue
            g = group(job, "prod", "production", 1, "Inqueue", True)
            p = pod(job, "prod", 0, 8, None, 1000, now)
            await send_all(
                producer,
                kube,
                [
                    (f"PodGroup/prod/{job}-pg", obj_event(KubeKind.POD_GROUP, g, now)),
                    (f"Pod/prod/{job}", obj_event(KubeKind.POD, p, now)),
                ],
            )
            sent = time.time()
            commands: list[YieldCommand] = []
            decision: Decision | None = None
            give_up = time.time() + 60
            first_seen: float | None = None
            while not commands or decision is None:
                if time.time() > give_up:
                    raise SystemExit(f"no decision for {job} within 60 s; see {log}")
                batch = await consumer.getmany(timeout_ms=50)
                for tp, records in batch.items():
                    for r in records:
                        if tp == decisions_tp:
                            found = Decision.model_validate_json(r.value)
                            if found.commands:  # the yield, not a round that was skipped
                                decision = found
                        else:
                            commands.append(YieldCommand.model_validate_json(r.value))
                if commands and first_seen is None:
                    first_seen = time.time()  # the first command is on the topic
            assert first_seen is not None
            results.append(first_seen - sent)
            while len(commands) < len(decision.commands):  # the rest of this decision's
                batch = await consumer.getmany(timeout_ms=50)
                for tp, records in batch.items():
                    commands += [
                        YieldCommand.model_validate_json(r.value)
                        for r in records
                        if tp != decisions_tp
                    ]
            # victims acknowledge and leave; the fine-tune is placed on the freed node
            t = time.time()
            acks = [
                (
                    c.job,
                    YieldAck(
                        command_id=c.command_id,
                        decision_id=c.decision_id,
                        node=c.node,
                        job=c.job,
                        outcome=YieldOutcome.CHECKPOINTED,
                        acked_at=t,
                    ),
                )
                for c in commands
            ]
            await send_all(producer, prefix + "gpuyield.yield-acks", acks)
            gone = []
            for c in commands:
                for victim_pod in pods_of.get(c.job, []):
                    if victim_pod["metadata"]["name"] in c.pods:
                        gone.append(obj_event(KubeKind.POD, victim_pod, t, deleted=True))
                        limits = victim_pod["spec"]["containers"][0]["resources"]["limits"]
                        free[c.node] += int(limits["nvidia.com/gpu"])
            freed = decision.plan.placement[f"{job}-worker-0"]
            free[freed] -= 8
            placed = pod(job, "prod", 0, 8, freed, 1000, t)
            g_running = group(job, "prod", "production", 1, "Running", False)
            await send_all(
                producer,
                kube,
                [(e.key, e) for e in gone]
                + [
                    (f"Pod/prod/{job}", obj_event(KubeKind.POD, placed, t)),
                    (f"PodGroup/prod/{job}", obj_event(KubeKind.POD_GROUP, g_running, t)),
                ],
            )
            await asyncio.sleep(0.5)
        stop.set()
        await beating
    await consumer.stop()
    await producer.stop()
    return results


def pick_redis(stack: contextlib.ExitStack, state: Path) -> str:
    url = "redis://127.0.0.1:6379/0"
    with contextlib.suppress(redis.RedisError, OSError):
        if redis.Redis.from_url(url, socket_connect_timeout=0.5).ping():
            return url
    return stack.enter_context(EmbeddedRedis(state / "valkey")).url


def describe(t: Throughput) -> str:
    cpu = ", ".join(
        "?" if c is None else f"{c / max(f, 1) * 1e6:.0f}"
        for c, f in zip(t.cpu_s, t.folded or (t.beats,) * len(t.cpu_s), strict=True)
    )
    split = " / ".join(f"{f:,.0f}" for f in t.folded) or f"{t.beats:,}"
    bound = "?" if t.cpu_bound_rate is None else f"{t.cpu_bound_rate:,.0f}"
    return (
        f"{t.rate:,.0f} beats/s; split {split}; CPU µs per beat read, per worker: {cpu}; "
        f"a core each: {bound} beats/s; progress to the decider: {t.summaries:,} summaries in "
        f"{t.messages:,} messages"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=50_000)
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="worker processes per run"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of throughput runs")
    parser.add_argument(
        "--demands", type=int, default=30, help="demands that need evictions (0: no latency run)"
    )
    parser.add_argument("--state", type=Path, help="keep logs here (default: a temporary dir)")
    args = parser.parse_args()
    rates: dict[int, list[float]] = {n: [] for n in args.workers}
    bounds: dict[int, list[float]] = {n: [] for n in args.workers}
    loads: list[float] = []
    lat: list[float] = []
    with contextlib.ExitStack() as stack:
        state = args.state or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        broker = stack.enter_context(EmbeddedBroker(log_path=state / "tansu.log"))
        redis_url = pick_redis(stack, state)
        for r in range(args.repeat):  # interleaved, so a busy spell falls on both counts
            for n in args.workers:
                loads.append(os.getloadavg()[0])
                run = await throughput(
                    broker.bootstrap, redis_url, args.beats, state / f"t{r}-{n}", n
                )
                rates[n].append(run.rate)
                if run.cpu_bound_rate is not None:
                    bounds[n].append(run.cpu_bound_rate)
                print(f"round {r}, {n} worker(s), load {loads[-1]:.1f}: {describe(run)}")
        if args.demands:
            lat = await latency(broker.bootstrap, redis_url, args.demands, state / "l")
    print(
        f"\nMachine: {machine()}; broker: embedded Tansu; load average (1 min) before "
        f"the runs {min(loads):.1f}-{max(loads):.1f}\n"
    )
    print("| measure | value | target |")
    print("|---|---:|---:|")
    for n, measured in rates.items():
        print(
            f"| heartbeats/s, {n} worker process(es), median of {len(measured)} "
            f"({args.beats} beats, 200 jobs, 8 partitions) | "
            f"{statistics.median(measured):,.0f} ({min(measured):,.0f}-{max(measured):,.0f}) | "
            f"{'>= 5,000' if n == 1 else ''} |"
        )
    for n, measured in bounds.items():
        if measured:
            print(
                f"| heartbeats/s, {n} worker process(es), were each on a core of its own "
                f"(beats / the busiest worker's CPU s), median | "
                f"{statistics.median(measured):,.0f} ({min(measured):,.0f}-{max(measured):,.0f}) "
                "| |"
            )
    for label, figures in (("measured", rates), ("a core each", bounds)):
        if len(figures.get(1, [])) == len(figures.get(2, [])) > 0:
            ratios = [b / a for a, b in zip(figures[1], figures[2], strict=True)]
            print(
                f"| two workers / one, {label}, median of {len(ratios)} rounds | "
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
                "| >= 1.7x |"
            )
    if lat:
        lat_sorted = sorted(lat)
        p99 = lat_sorted[min(len(lat_sorted) - 1, int(0.99 * len(lat_sorted)))]
        print(
            f"| decision latency p50 ({len(lat)} demands, 512 GPUs, 200 jobs) | "
            f"{statistics.median(lat) * 1000:.0f} ms | |"
        )
        print(f"| decision latency p99 | {p99 * 1000:.0f} ms | < 1 s |")


if __name__ == "__main__":
    asyncio.run(main())
