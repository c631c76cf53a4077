"""Fault bench: kill and restart what the live path runs on, and print what survived.

Loopback only and bounded (every wait has a deadline). It starts its own
memory-only Tansu broker on a free port and uses the machine's Redis (or
``--redis-url``); the worker and the node agent are real ``gpuyield``
processes, each under a small supervisor loop that restarts it when it exits
with status 75 (a lost broker state), as Kubernetes restarts a pod. Cases:

- ``sigkill-worker``: a decision is in flight; the worker is SIGKILLed and
  started again. Measured: kill to ready, kill to the recovered yield in the
  live view; survived when a second demand is decided and the first yield is
  never issued twice.
- ``broker-restart``: the broker is stopped and a new one started on its port
  (everything it held is gone). Measured: restart to the worker ready again,
  to the next decision, to the node agent's ack; survived when both processes
  exited 75, were restarted, and decide and act again.
- ``redis-outage``: the node agent's Redis (where it records each command
  before acting) is stopped while a yield command for its node arrives, and
  started again on its port. Survived when the command is neither acked nor
  lost during the outage and is acked exactly once after it.
- ``sigterm``: SIGTERM to the worker and the node agent. Measured: seconds to
  exit, and the status (0: an orderly stop; 124: the shutdown deadline).

    .venv/bin/python bench/bench_faults.py [--rounds 1] [--redis-url redis://...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_demo_reliability import load, machine  # the same machine line
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from gpuyield.schemas import kube_objects as k
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Decision, KubeEvent, YieldAck, YieldCommand
from gpuyield.streams.embedded import EmbeddedBroker, EmbeddedRedis
from gpuyield.streams.kafka_python_close import close_consumer
from gpuyield.streams.live_view_store import read_view

GPUYIELD = str(Path(sys.executable).with_name("gpuyield"))
EXIT_BROKER_LOST = 75
WAIT_S = 90.0  # the bound on every wait


# -- processes ------------------------------------------------------------------------------


@dataclass
class Proc:
    """One gpuyield process with its log; restarted on status 75 while ``supervise`` is set."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    ready_marker: bytes
    process: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)
    supervise: bool = True

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
            )
        return self

    def readies(self) -> int:
        return self.log.read_bytes().count(self.ready_marker) if self.log.exists() else 0

    def wait_ready(self, times: int = 1) -> float:
        started = time.monotonic()
        wait_for(lambda: self.readies() >= times, f"{self.name} ready x{times}")
        return time.monotonic() - started

    def watch(self) -> None:
        """The supervisor loop (a thread): restart on 75, stop watching on any other exit."""
        while True:
            time.sleep(0.1)
            process = self.process
            status = None if process is None else process.poll()
            if status is None:
                continue
            self.exits.append(status)
            if status != EXIT_BROKER_LOST or not self.supervise:
                return
            self.start()

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self) -> None:
        self.supervise = False
        self.signal(signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_for(done: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.1)
    raise TimeoutError(f"no {what} within {timeout_s:.0f} s")


# -- the cluster and the topics -------------------------------------------------------------


def cluster(at: float) -> list[KubeEvent]:
    """Two 8-GPU nodes, each running one research job; a production queue with a guarantee."""
    objs = [k.a_gpu_node("gpu-00"), k.a_gpu_node("gpu-01")]
    objs += [
        k.a_queue(
            "production", weight=4, capability={k.GPU: 16}, guarantee={k.GPU: 16}, reclaimable=False
        ),
        k.a_queue("research", weight=1, capability={k.GPU: 16}),
    ]
    for i in range(2):
        group = f"sweep-{i}-pg"
        objs.append(k.a_pod_group(group, namespace="research", queue="research", phase="Running"))
        objs.append(
            k.a_pod(
                f"sweep-{i}-worker-0",
                namespace="research",
                node=f"gpu-0{i}",
                pod_group=group,
                queue="research",
                labels={k.JOB_NAME: f"sweep-{i}", k.TASK_SPEC: "worker"},
                started_at=at - (6 + i) * 3600,
            )
        )
    return [k.event(o, at) for o in objs]


def demand(name: str, at: float) -> list[KubeEvent]:
    group = f"{name}-pg"
    objs = [
        k.a_pod_group(
            group, namespace="prod", queue="production", phase="Inqueue", unschedulable=True
        ),
        k.a_pod(
            f"{name}-worker-0",
            namespace="prod",
            pod_group=group,
            queue="production",
            priority=1000,
            labels={k.JOB_NAME: name, k.TASK_SPEC: "worker"},
        ),
    ]
    return [k.event(o, at) for o in objs]


@dataclass
class Topics:
    bootstrap: str
    prefix: str

    def publish(self, name: str, events: list[KubeEvent]) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        try:
            for e in events:
                producer.send(self.prefix + name, value=encode(e), key=e.key.encode())
            producer.flush(30)
        finally:
            producer.close()

    def read(self, name: str) -> list[bytes]:
        topic = self.prefix + name
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, consumer_timeout_ms=500
        )
        try:
            if topic not in consumer.topics():
                return []
            parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            return [r.value for r in consumer if r.value is not None]
        finally:
            close_consumer(consumer)

    def wait(self, name: str, model: type[Any], done: Callable[[list[Any]], bool]) -> list[Any]:
        seen: list[Any] = []

        def check() -> bool:
            seen[:] = [model.model_validate_json(v) for v in self.read(name)]
            return done(seen)

        wait_for(check, f"{name} as wanted")
        return seen


# -- the cases ------------------------------------------------------------------------------


@dataclass
class Deployment:
    broker: EmbeddedBroker
    redis_url: str
    work: Path
    prefix: str = field(default_factory=lambda: f"f{secrets.token_hex(4)}.")
    app_id: str = field(default_factory=lambda: f"gy-{secrets.token_hex(4)}")
    cluster_id: str = field(default_factory=lambda: f"c-{secrets.token_hex(4)}")

    def env(self, name: str) -> dict[str, str]:
        return {
            "GPUYIELD_KAFKA_BOOTSTRAP": self.broker.bootstrap,
            "GPUYIELD_KAFKA_PROFILE": "tansu",
            "GPUYIELD_REDIS_URL": self.redis_url,
            "GPUYIELD_TOPIC_PREFIX": self.prefix,
            "GPUYIELD_APP_ID": self.app_id,
            "GPUYIELD_CLUSTER_ID": self.cluster_id,
            "GPUYIELD_STATE_DIR": str(self.work / name),
            "GPUYIELD_BROKER_CHECK_S": "1",
        }

    def worker(self) -> Proc:
        return Proc(
            "worker",
            [GPUYIELD, "worker", "--tick-s", "0.5"],
            self.env("worker"),
            self.work / "worker.log",
            b"Worker ready",
        )

    def node_agent(self, node: str, redis_url: str | None = None) -> Proc:
        env = self.env("node-agent")
        if redis_url is not None:
            env["GPUYIELD_REDIS_URL"] = redis_url
        return Proc(
            "node-agent",
            [GPUYIELD, "node-agent", "--node", node, "--redis-prefix", self.prefix],
            env,
            self.work / "node-agent.log",
            b" ready (group ",
        )

    @property
    def topics(self) -> Topics:
        return Topics(self.broker.bootstrap, self.prefix)


@contextlib.contextmanager
def supervised(*procs: Proc) -> Iterator[None]:
    threads = []
    for proc in procs:
        proc.start()
        thread = threading.Thread(target=proc.watch, daemon=True)
        thread.start()
        threads.append(thread)
    try:
        yield
    finally:
        for proc in procs:
            proc.stop()


def decisions_for(dep: Deployment, demand_job: str) -> list[Decision]:
    return dep.topics.wait(
        "gpuyield.decisions", Decision, lambda ds: any(d.demand == demand_job for d in ds)
    )


def sigkill_worker(dep: Deployment) -> dict[str, Any]:
    worker = dep.worker()
    with supervised(worker):
        worker.wait_ready()
        now = time.time()
        dep.topics.publish("gpuyield.kube-events", cluster(now) + demand("ft-1", now + 1))
        decisions_for(dep, "prod/ft-1")
        dep.topics.wait("gpuyield.yield-commands", YieldCommand, lambda cs: len(cs) >= 1)
        worker.supervise = False
        killed = time.monotonic()
        worker.signal(signal.SIGKILL)
        assert worker.process is not None
        worker.process.wait(10)
        worker.supervise = True
        worker.start()
        threading.Thread(target=worker.watch, daemon=True).start()
        worker.wait_ready(times=2)
        ready_s = time.monotonic() - killed
        wait_for(
            lambda: bool((read_view(dep.redis_url, dep.cluster_id) or {}).get("yields_in_flight")),
            "the recovered yield in the live view",
        )
        recovered_s = time.monotonic() - killed
        later = time.time()
        dep.topics.publish(
            "gpuyield.kube-events", demand("ft-1", later) + demand("ft-2", later + 1)
        )
        decisions_for(dep, "prod/ft-2")
        commands = dep.topics.wait("gpuyield.yield-commands", YieldCommand, lambda cs: len(cs) >= 2)
        time.sleep(2)  # a duplicate would come right after
        commands = [
            YieldCommand.model_validate_json(v) for v in dep.topics.read("gpuyield.yield-commands")
        ]
        jobs = [c.job for c in commands]
        return {
            "case": "sigkill-worker",
            "kill_to_ready_s": round(ready_s, 1),
            "kill_to_recovered_yield_s": round(recovered_s, 1),
            "commands": len(commands),
            "survived": len(jobs) == len(set(jobs)) == 2,
        }


def broker_restart(dep: Deployment) -> dict[str, Any]:
    worker = dep.worker()
    now = time.time()
    # the first decision's victim is the job that has run less (sweep-0, on gpu-00)
    agent = dep.node_agent("gpu-00")
    with supervised(worker, agent):
        worker.wait_ready()
        agent.wait_ready()
        dep.topics.publish("gpuyield.kube-events", cluster(now) + demand("ft-1", now + 1))
        decisions_for(dep, "prod/ft-1")
        port = dep.broker.port
        dep.broker.stop()
        restarted = time.monotonic()
        dep.broker = EmbeddedBroker(port, log_path=dep.work / "tansu-2.log").start()
        worker.wait_ready(times=2)
        worker_s = time.monotonic() - restarted
        agent.wait_ready(times=2)
        agent_s = time.monotonic() - restarted
        later = time.time()  # the watch relists on reconnecting
        dep.topics.publish("gpuyield.kube-events", cluster(later) + demand("ft-2", later + 1))
        decisions_for(dep, "prod/ft-2")
        decided_s = time.monotonic() - restarted
        commands = dep.topics.wait("gpuyield.yield-commands", YieldCommand, lambda cs: len(cs) >= 1)
        ours = {c.command_id for c in commands if c.node == "gpu-00"}
        acked = bool(ours) and bool(
            dep.topics.wait(
                "gpuyield.yield-acks",
                YieldAck,
                lambda acks: any(a.command_id in ours for a in acks),
            )
        )
        acked_s = time.monotonic() - restarted
        return {
            "case": "broker-restart",
            "restart_to_worker_ready_s": round(worker_s, 1),
            "restart_to_node_agent_ready_s": round(agent_s, 1),
            "restart_to_decision_s": round(decided_s, 1),
            "restart_to_ack_s": round(acked_s, 1),
            "worker_exits": list(worker.exits),
            "node_agent_exits": list(agent.exits),
            "survived": acked and worker.exits[:1] == agent.exits[:1] == [EXIT_BROKER_LOST],
        }


def sigterm(dep: Deployment) -> dict[str, Any]:
    worker, agent = dep.worker(), dep.node_agent("gpu-00")
    with supervised(worker, agent):
        worker.wait_ready()
        agent.wait_ready()
        out: dict[str, Any] = {"case": "sigterm"}
        for proc in (worker, agent):
            proc.supervise = False
            sent = time.monotonic()
            proc.signal(signal.SIGTERM)
            assert proc.process is not None
            status = proc.process.wait(60)
            out[f"{proc.name}_exit_s"] = round(time.monotonic() - sent, 1)
            out[f"{proc.name}_status"] = status
        out["survived"] = out["worker_status"] == out["node-agent_status"] == 0
        return out


def redis_outage(dep: Deployment) -> dict[str, Any]:
    """The node agent's Redis (its ledger) is down while a command for its node arrives."""
    valkey = EmbeddedRedis(dep.work / "valkey").start()
    worker, agent = dep.worker(), dep.node_agent("gpu-00", redis_url=valkey.url)
    try:
        with supervised(worker, agent):
            worker.wait_ready()
            agent.wait_ready()
            port = valkey.port
            valkey.stop()
            down = time.monotonic()
            now = time.time()
            dep.topics.publish("gpuyield.kube-events", cluster(now) + demand("ft-1", now + 1))
            commands = dep.topics.wait(
                "gpuyield.yield-commands",
                YieldCommand,
                lambda cs: any(c.node == "gpu-00" for c in cs),
            )
            ours = {c.command_id for c in commands if c.node == "gpu-00"}
            time.sleep(3)  # the agent meets the outage: it must neither ack nor drop the command

            def acked() -> list[YieldAck]:
                acks = dep.topics.read("gpuyield.yield-acks")
                return [a for a in map(YieldAck.model_validate_json, acks) if a.command_id in ours]

            unacked = not acked()
            valkey = EmbeddedRedis(dep.work / "valkey", port).start()
            back = time.monotonic()
            wait_for(lambda: bool(acked()), "an ack after the outage")
            acked_s = time.monotonic() - back
            time.sleep(2)  # a second ack would come right after
            return {
                "case": "redis-outage",
                "outage_s": round(back - down, 1),
                "redis_back_to_ack_s": round(acked_s, 1),
                "acks": len(acked()),
                "node_agent_exits": list(agent.exits),
                "survived": unacked and len(acked()) == 1 and not agent.exits,
            }
    finally:
        valkey.stop()


CASES: dict[str, Callable[[Deployment], dict[str, Any]]] = {
    "sigkill-worker": sigkill_worker,
    "broker-restart": broker_restart,
    "redis-outage": redis_outage,
    "sigterm": sigterm,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="Times each case runs.")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--cases", default=",".join(CASES), help="Comma-separated cases.")
    parser.add_argument("--keep-dir", type=Path, default=None, help="Keep the logs here.")
    args = parser.parse_args()
    work_root = args.keep_dir or Path(tempfile.mkdtemp(prefix="gpuyield-faults-"))
    results = []
    for round_ in range(args.rounds):
        for name in args.cases.split(","):
            work = work_root / f"{name}-{round_}"
            work.mkdir(parents=True, exist_ok=True)
            broker = EmbeddedBroker(log_path=work / "tansu.log").start()
            dep = Deployment(broker, args.redis_url, work)
            started = time.monotonic()
            try:
                result = CASES[name](dep)
            except (TimeoutError, AssertionError) as exc:
                result = {"case": name, "survived": False, "error": str(exc)}
            finally:
                dep.broker.stop()
            result["wall_s"] = round(time.monotonic() - started, 1)
            print(json.dumps(result), flush=True)
            results.append(result)
    survived = sum(1 for r in results if r["survived"])
    print(
        f"{survived} of {len(results)} fault cases survived on {machine()} "
        f"(load {load()}); logs in {work_root}"
    )
    return 0 if survived == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
