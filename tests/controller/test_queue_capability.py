"""A queue whose capability names resources but not GPUs, read the way Volcano reads it."""

from __future__ import annotations

from typing import Any

from cluster_objects import queue
from harness import NOW, Controller, apply_writes, production_demand, shared_pool

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, Outcome, step
from gpuyield.agents.controller.index import RecordIndex
from gpuyield.agents.controller.kube_facts import queue_record
from gpuyield.agents.controller.queue_capability import gpu_capability, misconfigured
from gpuyield.schemas.messages import AlertKind


def cpu_and_memory_only(name: str, **kwargs: Any) -> dict[str, Any]:
    """The common trap: a capability written for CPU and memory, GPUs forgotten."""
    obj = queue(name, **kwargs)
    obj["spec"]["capability"] = {"cpu": "512", "memory": "4Ti"}
    return obj


def pool_with_production_capability_without_gpus(config: ControllerConfig) -> Controller:
    c = shared_pool()
    c.config = config
    trap = cpu_and_memory_only("production", weight=4, guarantee=16, reclaimable=False)
    c.change(trap, NOW - 30)
    return c


def test_no_job_is_evicted_for_a_queue_volcano_admits_no_gpus_to() -> None:
    c = pool_with_production_capability_without_gpus(ControllerConfig())
    production_demand(c)
    assert c.commands == []
    assert c.decisions == []


def test_the_alert_names_the_queue_and_the_fix() -> None:
    c = pool_with_production_capability_without_gpus(ControllerConfig())
    production_demand(c)
    alerts = [a for a in c.alerts if a.kind is AlertKind.QUEUE_MISCONFIGURED]
    assert len(alerts) == 1
    assert "queue 'production'" in alerts[0].message
    assert "add nvidia.com/gpu to spec.capability" in alerts[0].message
    assert alerts[0].details["capability_lists"] == ["cpu", "memory"]


def test_the_alert_is_raised_once_however_many_messages_follow() -> None:
    c = pool_with_production_capability_without_gpus(ControllerConfig())
    production_demand(c)
    c.tick(NOW + 60)
    c.tick(NOW + 120)
    assert [a.kind for a in c.alerts].count(AlertKind.QUEUE_MISCONFIGURED) == 1


def test_read_as_volcano_1_9_and_later_the_queue_gets_the_gpus_others_do_not_guarantee() -> None:
    c = pool_with_production_capability_without_gpus(
        ControllerConfig(capability_without_gpu="cluster")
    )
    production_demand(c)
    assert len(c.decisions) == 1
    production = next(q for q in c.decisions[0].snapshot.queues if q.name == "production")
    assert production.capability.gpu == 32  # 4 nodes x 8 GPUs, research guarantees none


def test_the_cluster_reading_subtracts_the_other_queues_guarantees() -> None:
    queues = {
        "inference": {"capability": 192, "capability_lists": ["nvidia.com/gpu"], "guarantee": 128},
        "research": {"capability": None, "capability_lists": ["cpu", "memory"], "guarantee": 16},
    }
    assert gpu_capability("research", queues, 256, "cluster") == 256 - 128
    assert gpu_capability("research", queues, 256, "zero") == 0
    assert gpu_capability("inference", queues, 256, "zero") == 192


def test_a_queue_without_any_capability_stays_unlimited_and_raises_nothing() -> None:
    record = queue_record(queue("default"))
    assert gpu_capability("default", {"default": record}, 256, "zero") is None
    assert misconfigured({"default": record}, ["default"], 256, "zero") == []


def test_a_cpu_only_queue_without_gpu_jobs_raises_nothing() -> None:
    record = queue_record(cpu_and_memory_only("etl"))
    assert misconfigured({"etl": record}, ["research"], 256, "zero") == []


def test_the_record_keeps_which_resources_the_capability_names() -> None:
    record = queue_record(cpu_and_memory_only("research"))
    assert (record["capability"], record["capability_lists"]) == (None, ["cpu", "memory"])


def test_with_the_index_kept_the_alert_comes_when_a_gpu_job_first_uses_the_queue() -> None:
    # As the worker steps: the queue lost its GPU capability some steps before, with no
    # GPU job in it yet; the index remembers which queues lack one.
    c = pool_with_production_capability_without_gpus(ControllerConfig())
    index = RecordIndex.build(c.records, c.config)
    stepped = c.feed

    def feed(message: Input, origin: str | None = None) -> Outcome:
        c.offset += 1
        outcome = step(c.records, message, origin or f"in/2/{c.offset}", c.config, index=index)
        apply_writes(c.records, outcome)
        index.apply(outcome.writes, c.records)
        c.alerts += outcome.alerts
        c.commands += outcome.commands
        return outcome

    c.feed = feed  # type: ignore[method-assign]
    c.tick(NOW - 20)
    production_demand(c)
    c.feed = stepped  # type: ignore[method-assign]
    assert [a.kind for a in c.alerts].count(AlertKind.QUEUE_MISCONFIGURED) == 1
    assert c.commands == []
