"""Seed 001's drill cluster: the queues as the seed gives them, full when the burst comes.

Driven through the simulated Volcano (``SimCluster``, a fake launcher): what
the drill's worker will see is what these tests see.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.test_cluster import Events, FakeLauncher
from gpuyield.agents.controller import kube_facts
from gpuyield.agents.demo.cluster import SimCluster
from gpuyield.agents.demo.drill import (
    BURST_PODS,
    GPUS_PER_NODE,
    MIN_NODES,
    OFFLINE,
    ONLINE,
    drill_node_agent,
    drill_scenario,
)
from gpuyield.agents.demo.scenario import DemoScenario, Runner
from gpuyield.agents.demo.timing import DEMO_NODE_AGENT
from gpuyield.schemas.messages import KubeKind

T = 1_800_000_000.0


async def filled(scenario: DemoScenario) -> tuple[SimCluster, FakeLauncher, Events]:
    launcher, events = FakeLauncher(), Events()
    cluster = SimCluster(scenario, launcher, events)
    for plan in scenario.jobs:
        if not plan.burst:
            cluster.submit(plan, T)
    await cluster.tick(T, {})
    return cluster, launcher, events


def used_by_queue(cluster: SimCluster) -> dict[str, int]:
    used: dict[str, int] = {}
    for job in cluster.jobs():
        placed = sum(1 for p in job.pods.values() if p.node is not None)
        used[job.plan.queue] = used.get(job.plan.queue, 0) + placed * job.plan.gpus_per_pod
    return used


def test_the_queues_are_the_seeds() -> None:
    queues = {q.name: q for q in drill_scenario(64).queues}
    online, offline = queues[ONLINE], queues[OFFLINE]
    assert (online.weight, online.guarantee, online.capability) == (100, 128, 192)
    assert (offline.weight, offline.guarantee, offline.capability) == (10, 0, 128)
    assert offline.reclaimable
    assert not online.reclaimable


def test_the_burst_is_64_gpus_as_whole_nodes_all_or_none() -> None:
    burst = next(j for j in drill_scenario().jobs if j.burst)
    assert (burst.queue, burst.pods, burst.gpus_per_pod, burst.min_available) == (
        ONLINE,
        BURST_PODS,
        GPUS_PER_NODE,
        BURST_PODS,
    )
    assert burst.gpus == 64


@settings(max_examples=15, deadline=None)
@given(st.integers(min_value=MIN_NODES, max_value=160))
def test_any_size_is_full_when_the_burst_comes_and_offline_has_borrowed_its_capability(
    nodes: int,
) -> None:
    scenario = drill_scenario(nodes)
    cluster, _, _ = asyncio.run(filled(scenario))
    used = used_by_queue(cluster)
    assert sum(used.values()) == nodes * GPUS_PER_NODE  # no free GPU anywhere
    assert used[OFFLINE] == 128  # all borrowed: its guarantee is 0
    assert used[ONLINE] + 64 == 128  # the burst brings online to its guarantee, not past it


def test_volcano_leaves_the_burst_unschedulable() -> None:
    async def burst_arrives() -> Events:
        scenario = drill_scenario()
        cluster, _, events = await filled(scenario)
        cluster.submit(next(j for j in scenario.jobs if j.burst), T + 30)
        await cluster.tick(T + 30, {})
        return events

    events = asyncio.run(burst_arrives())
    pods = [
        kube_facts.pod_record(e.object)
        for e in events.seen
        if e.kind is KubeKind.POD and e.name.startswith("burst-")
    ]
    assert len(pods) == BURST_PODS
    assert {(p["node"], p["unschedulable"]) for p in pods} == {(None, True)}


@pytest.mark.parametrize("nodes", [MIN_NODES, 64, 128])
def test_only_pods_a_yield_can_reach_and_the_burst_run_processes(nodes: int) -> None:
    """The cost in processes does not grow with the cluster: 16 offline trainers, 8 burst pods."""
    scenario = drill_scenario(nodes)
    processes = sum(j.pods for j in scenario.jobs if j.runner is not Runner.SIMULATED)
    assert processes == 16 + BURST_PODS
    runners = {j.runner for j in scenario.jobs if j.queue == OFFLINE}
    assert runners == {Runner.TORCH, Runner.STANDIN}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"nodes": 23}, "the drill needs at least 24 nodes"),
        ({"peak_s": 0.0}, "the peak must last a positive time"),
        ({"grace_s": -1.0}, "the grace must be a positive time"),
    ],
)
def test_a_drill_that_cannot_be_run_is_refused_saying_why(
    arguments: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        drill_scenario(**arguments)  # type: ignore[arg-type]


def test_the_drills_node_agents_kill_a_checkpointed_victim_sooner_and_wait_as_the_demos_else() -> (
    None
):
    knobs = drill_node_agent(2.0)
    assert knobs.node_exit_grace_s == 2.0
    assert knobs.model_dump(exclude={"node_exit_grace_s"}) == DEMO_NODE_AGENT.model_dump(
        exclude={"node_exit_grace_s"}
    )
    with pytest.raises(ValueError, match="the exit grace must not be negative"):
        drill_node_agent(-1.0)
