"""Build the example snapshots in this folder from one readable description each.

Run ``python examples/build_examples.py`` after changing a scenario; the test
``tests/e2e/test_examples.py`` fails when a JSON file here is out of date, and
checks what the planner decides on each one.

The scenarios are the situations gpuyield was built for:

- ``protected-research.json``: a 64 x 8-GPU pool. ``production-core`` needs two
  whole nodes back from ``research-elastic``; the cheapest victim by lost work
  is a 90%-done research gang, which its effective weight protects, so newer
  research work yields instead.
- ``inference-burst-32.json`` / ``inference-burst-64.json``: inference needs 32
  and 64 GPUs back as whole 8-GPU nodes from capacity research borrowed.
- ``fragmented.json``: 16 free GPUs spread 1/5/4/6 over four nodes; a 16-GPU
  gang of two 8-GPU pods must get two whole nodes, never the fragments.
- ``half-placed-gang.json``: two gangs each hold half of what they need and
  would wait for each other forever; the higher-priority one takes the other's
  GPUs (nothing is lost: the other never started).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
NOW = 1_764_000_000.0
HOUR = 3600.0

Doc = dict[str, Any]


def node(name: str, rack: str, gpus: int = 8, schedulable: bool = True) -> Doc:
    return {
        "name": name,
        "gpus": gpus,
        "topology": {"nvlink_domain": name, "rack": rack},
        "schedulable": schedulable,
    }


def running(
    name: str,
    queue: str,
    placement: list[tuple[str, int]],
    *,
    priority: int,
    ran_h: float,
    progress: float,
    checkpoint_min_ago: float | None,
    min_available: int | None = None,
    evictions_h_ago: tuple[float, ...] = (),
) -> Doc:
    started = NOW - ran_h * HOUR
    job: Doc = {
        "name": name,
        "queue": queue,
        "priority": priority,
        "state": "Running",
        "pods": [
            {"name": f"{name}-{i}", "gpus": gpus, "node": at, "phase": "Running"}
            for i, (at, gpus) in enumerate(placement)
        ],
        "submitted_at": started - 60.0,
        "started_at": started,
        "progress": progress,
        "last_checkpoint_at": None
        if checkpoint_min_ago is None
        else NOW - checkpoint_min_ago * 60.0,
        "evictions": [NOW - h * HOUR for h in evictions_h_ago],
    }
    if min_available is not None:
        job["min_available"] = min_available
    return job


def pending(name: str, queue: str, pods: int, gpus: int, *, priority: int) -> Doc:
    return {
        "name": name,
        "queue": queue,
        "priority": priority,
        "state": "Pending",
        "pods": [
            {"name": f"{name}-{i}", "gpus": gpus, "node": None, "phase": "Pending"}
            for i in range(pods)
        ],
        "submitted_at": NOW - 30.0,
    }


def snapshot(nodes: list[Doc], queues: list[Doc], jobs: list[Doc]) -> Doc:
    return {
        "version": 1,
        "now": NOW,
        "policy": {
            "alpha": 150.0,
            "beta": 800.0,
            "cooldown_s": 600,
            "max_evictions": 3,
            "eviction_window_s": 86400,
            "grace_s": 120,
        },
        "nodes": nodes,
        "queues": queues,
        "jobs": jobs,
    }


def seed_queues() -> list[Doc]:
    """The seed articles' pool: two named queues, and a third for the other tenants.

    production-core and research-elastic cap out at 256 + 128 = 384 of the 512
    GPUs, so the pool also served others; ``shared`` stands for them.
    """
    return [
        {
            "name": "production-core",
            "weight": 80,
            "guarantee": {"gpu": 256},
            "capability": {"gpu": 256},
            "reclaimable": False,
        },
        {
            "name": "research-elastic",
            "weight": 20,
            "guarantee": {"gpu": 32},
            "capability": {"gpu": 128},
            "reclaimable": True,
        },
        {
            "name": "shared",
            "weight": 40,
            "guarantee": {"gpu": 160},
            "capability": {"gpu": 256},
            "reclaimable": True,
        },
    ]


def pool(count: int = 64) -> list[Doc]:
    return [node(f"gpu-{i:02d}", rack=f"rack-{i // 8}") for i in range(count)]


def whole_nodes(first: int, count: int) -> list[tuple[str, int]]:
    return [(f"gpu-{i:02d}", 8) for i in range(first, first + count)]


def production_fleet(first: int, nodes: int) -> list[Doc]:
    """Fine-tuning gangs of four whole nodes, all in their cooldown or too heavy to preempt."""
    return [
        running(
            f"ft-sla-{k}",
            "production-core",
            whole_nodes(first + 4 * k, 4),
            priority=1000,
            ran_h=6.0 + k,
            progress=0.3 + 0.05 * k,
            checkpoint_min_ago=20,
        )
        for k in range(nodes // 4)
    ]


def shared_fleet(first: int, nodes: int) -> list[Doc]:
    """Other tenants, inside their guarantee: never reclaimable."""
    return [
        running(
            f"tenant-{k}",
            "shared",
            whole_nodes(first + 2 * k, 2),
            priority=500,
            ran_h=3.0,
            progress=0.5,
            checkpoint_min_ago=15,
        )
        for k in range(nodes // 2)
    ]


def protected_research() -> Doc:
    # 28 production nodes (224 GPUs, 32 below the guarantee), 16 research
    # nodes (128 GPUs, at its capability), 20 shared nodes (160 GPUs).
    research = [
        # 90% done, checkpointed 5 minutes ago: the least work lost, but protected.
        running(
            "llm-ablation-final",
            "research-elastic",
            whole_nodes(28, 4),
            priority=100,
            ran_h=30.0,
            progress=0.9,
            checkpoint_min_ago=5,
        ),
        # Newer exploratory jobs, checkpointed 20-50 minutes ago.
        *[
            running(
                f"sweep-{k}",
                "research-elastic",
                whole_nodes(32 + k, 1),
                priority=100,
                ran_h=1.0 + k,
                progress=0.1 + 0.02 * k,
                checkpoint_min_ago=20 + 3 * k,
            )
            for k in range(12)
        ],
    ]
    return snapshot(
        pool(),
        seed_queues(),
        [
            *production_fleet(0, 28),
            *research,
            *shared_fleet(44, 20),
            pending("ft-llama-70b", "production-core", 2, 8, priority=1000),
        ],
    )


def inference_burst(gpus: int) -> Doc:
    # Research borrowed 24 nodes' worth of scattered work beyond its guarantee;
    # inference needs whole nodes back.
    queues = seed_queues()
    queues[1] = {**queues[1], "capability": {"gpu": 192}}
    research: list[Doc] = []
    k = 0
    for n in range(24, 48):
        at = f"gpu-{n:02d}"
        if n % 3 == 0:  # a 2-node gang: evicting it frees two nodes at once
            if n + 1 < 48:
                research.append(
                    running(
                        f"pretrain-{k}",
                        "research-elastic",
                        [(at, 8), (f"gpu-{n + 1:02d}", 8)],
                        priority=100,
                        ran_h=2.0 + n % 5,
                        progress=0.2,
                        checkpoint_min_ago=10 + n % 40,
                    )
                )
                k += 1
        elif n % 3 == 1:
            continue  # second node of the gang above
        else:  # a node shared by small jobs
            for part, gpus_each in enumerate((4, 2, 2)):
                research.append(
                    running(
                        f"notebook-{k}-{part}",
                        "research-elastic",
                        [(at, gpus_each)],
                        priority=50,
                        ran_h=0.5 + part,
                        progress=0.05 * part,
                        checkpoint_min_ago=5 + 7 * part + n % 11,
                    )
                )
            k += 1
    return snapshot(
        pool(),
        queues,
        [
            *production_fleet(0, 24),
            *research,
            *shared_fleet(48, 16),
            pending(f"inference-burst-{gpus}", "production-core", gpus // 8, 8, priority=2000),
        ],
    )


def fragmented() -> Doc:
    nodes = [node(f"gpu-{i:02d}", rack="rack-0") for i in range(4)]
    used = {"gpu-00": [7], "gpu-01": [2, 1], "gpu-02": [4], "gpu-03": [2]}  # free 1/5/4/6
    jobs: list[Doc] = []
    for at, sizes in used.items():
        for part, gpus in enumerate(sizes):
            jobs.append(
                running(
                    f"dev-{at}-{part}",
                    "research-elastic",
                    [(at, gpus)],
                    priority=10,
                    ran_h=1.0 + part,
                    progress=0.1,
                    checkpoint_min_ago=10 + 5 * part + gpus,
                )
            )
    queues = [
        {"name": "production-core", "weight": 80, "guarantee": {"gpu": 16}},
        {"name": "research-elastic", "weight": 20, "guarantee": {"gpu": 0}},
    ]
    jobs.append(pending("gang-16", "production-core", 2, 8, priority=1000))
    return snapshot(nodes, queues, jobs)


def half_placed_gang() -> Doc:
    nodes = [node(f"gpu-{i:02d}", rack="rack-0") for i in range(4)]
    queues = [{"name": "training", "weight": 1, "guarantee": {"gpu": 32}}]

    def half(name: str, priority: int, at: list[str]) -> Doc:
        return {
            "name": name,
            "queue": "training",
            "priority": priority,
            "state": "Pending",
            "min_available": 4,
            "pods": [
                {"name": f"{name}-{i}", "gpus": 8, "node": n, "phase": "Pending"}
                for i, n in enumerate([*at, None, None])
            ],
            "submitted_at": NOW - 600.0,
            "started_at": None,
        }

    return snapshot(
        nodes,
        queues,
        [half("gang-a", 500, ["gpu-00", "gpu-01"]), half("gang-b", 400, ["gpu-02", "gpu-03"])],
    )


EXAMPLES = {
    "protected-research.json": protected_research,
    "inference-burst-32.json": lambda: inference_burst(32),
    "inference-burst-64.json": lambda: inference_burst(64),
    "fragmented.json": fragmented,
    "half-placed-gang.json": half_placed_gang,
}


def render(doc: Doc) -> str:
    return json.dumps(doc, indent=1) + "\n"


# deploy/base ships one example as the snapshot of its dry-run planner Job.
DEPLOY_SNAPSHOT = HERE.parent / "deploy" / "planner-dry-run" / "snapshot.json"
DEPLOYED_EXAMPLE = "protected-research.json"


def main() -> None:
    for name, build in EXAMPLES.items():
        (HERE / name).write_text(render(build()), encoding="utf-8")
        print(HERE / name)
    DEPLOY_SNAPSHOT.write_text(render(EXAMPLES[DEPLOYED_EXAMPLE]()), encoding="utf-8")
    print(DEPLOY_SNAPSHOT)


if __name__ == "__main__":
    main()
