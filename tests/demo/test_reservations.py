"""The demo's simulated Volcano honours the decider's holds, as Volcano honours gpuyield's taint.

The story of the demo's failed runs, step 1: the node freed for one fine-tune
was given to another fine-tune of equal priority. Here the research jobs fill
the four nodes (``llm-sweep`` on gpu-0 and gpu-1, ``rl-elastic`` and
``tiny-a`` on gpu-2, ``tiny-b`` and ``tiny-c`` on gpu-3); the decider holds
gpu-3 for ``prod/ft-chat`` (8 GPUs), whose two victims leave one at a time,
while ``prod/ft-eval`` (4 GPUs, same priority, submitted first) waits too.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer

from gpuyield.agents.demo.cluster import SimCluster
from gpuyield.agents.demo.reservations import ReservationFeed
from gpuyield.agents.demo.scenario import DemoScenario, demo_scenario
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Reservation, ReservationState
from gpuyield.streams.topics import TopicSpec

from .test_cluster import Events, FakeLauncher

T = 1_800_000_000.0
FT_CHAT, FT_EVAL = "prod/ft-chat", "prod/ft-eval"


def hold(job: str, nodes: dict[str, int], *, until: float = T + 300, at: float = T) -> Reservation:
    return Reservation(
        job=job,
        state=ReservationState.HELD,
        nodes=nodes,
        until=until,
        decision_id=f"decision-{job}",
        reason="GPUs freed for this job are held until Volcano places it",
        at=at,
    )


def release(job: str, *, at: float) -> Reservation:
    return hold(job, {}, at=at).model_copy(update={"state": ReservationState.RELEASED})


@dataclass
class Published:
    """The reservations topic as the cluster's feed reads it: what was published, in order."""

    messages: list[Reservation] = field(default_factory=list)
    read: int = 0

    async def read_to_end(self) -> list[Reservation]:
        out, self.read = self.messages[self.read :], len(self.messages)
        return out


def scenario() -> DemoScenario:
    return demo_scenario(random.Random(0), seed=0, duration_s=30)


async def contested(
    published: Published | None,
) -> tuple[SimCluster, FakeLauncher, DemoScenario]:
    """Research running, both fine-tunes submitted and left unschedulable."""
    s = scenario()
    launcher = FakeLauncher()
    cluster = SimCluster(s, launcher, Events(), published)
    for plan in s.jobs:
        if not plan.burst:
            cluster.submit(plan, T)
    await cluster.tick(T, {})
    burst = {p.key: p for p in s.jobs if p.burst}
    cluster.submit(burst[FT_EVAL], T + 1)
    cluster.submit(burst[FT_CHAT], T + 2)
    await cluster.tick(T + 2, {})
    return cluster, launcher, s


def nodes_of(cluster: SimCluster, key: str) -> set[str | None]:
    job = cluster.job(key)
    assert job is not None
    return {p.node for p in job.pods.values()}


async def test_research_leaves_gpu_3_to_tiny_b_and_tiny_c() -> None:
    cluster, _, _ = await contested(None)
    assert nodes_of(cluster, "research/tiny-b") == {"gpu-3"}
    assert nodes_of(cluster, "research/tiny-c") == {"gpu-3"}
    assert nodes_of(cluster, FT_EVAL) == nodes_of(cluster, FT_CHAT) == {None}


async def test_without_a_hold_the_first_job_in_allocate_order_takes_the_freed_gpus() -> None:
    cluster, launcher, _ = await contested(None)
    launcher.exit("research/tiny-b", 0)
    await cluster.tick(T + 10, {})
    assert nodes_of(cluster, FT_EVAL) == {"gpu-3"}  # the GPUs freed for ft-chat


async def test_a_held_node_takes_only_its_preemptors_pods() -> None:
    published = Published()
    cluster, launcher, _ = await contested(published)
    published.messages.append(hold(FT_CHAT, {"gpu-3": 8}, at=T + 3))  # before any yield
    launcher.exit("research/tiny-b", 0)
    await cluster.tick(T + 10, {})
    assert nodes_of(cluster, FT_EVAL) == {None}  # 4 GPUs free on gpu-3, held for ft-chat
    launcher.exit("research/tiny-c", 0)
    await cluster.tick(T + 12, {})
    assert nodes_of(cluster, FT_CHAT) == {"gpu-3"}
    assert nodes_of(cluster, FT_EVAL) == {None}


async def test_the_hold_ends_once_its_preemptor_is_placed() -> None:
    published = Published()
    cluster, launcher, _ = await contested(published)
    published.messages.append(hold(FT_CHAT, {"gpu-3": 8}, at=T + 3))
    launcher.exit("research/tiny-b", 0)
    launcher.exit("research/tiny-c", 0)
    await cluster.tick(T + 10, {})
    assert nodes_of(cluster, FT_CHAT) == {"gpu-3"}
    assert cluster.held(T + 10) == {}


async def test_an_expired_or_released_hold_opens_the_node_again() -> None:
    for ended in (
        [hold(FT_CHAT, {"gpu-3": 8}, until=T + 8, at=T + 3)],
        [hold(FT_CHAT, {"gpu-3": 8}, at=T + 3), release(FT_CHAT, at=T + 9)],
    ):
        published = Published()
        cluster, launcher, _ = await contested(published)
        published.messages.extend(ended)
        launcher.exit("research/tiny-b", 0)
        await cluster.tick(T + 10, {})
        assert nodes_of(cluster, FT_EVAL) == {"gpu-3"}
        assert cluster.held(T + 10) == {}


async def test_the_feed_reads_every_hold_published_before_it_is_asked(
    kafka_bootstrap: str, topic_prefix: str, fresh_topics: dict[str, TopicSpec]
) -> None:
    kafka = {"bootstrap_servers": kafka_bootstrap}
    topic = fresh_topics["gpuyield.reservations"].name
    feed = ReservationFeed(kafka=kafka, prefix=topic_prefix)
    producer = AIOKafkaProducer(**kafka, acks="all")
    await feed.start()
    await producer.start()
    try:
        assert await feed.read_to_end() == []
        first = [hold(FT_CHAT, {"gpu-3": 8}), hold(FT_EVAL, {"gpu-2": 4}, at=T + 1)]
        for message in first:
            await producer.send_and_wait(topic, encode(message), key=message.job.encode())
        await producer.send_and_wait(topic, b'{"v": 1, "job": "prod/x", "state": "maybe"}')
        later = release(FT_CHAT, at=T + 5)
        await producer.send_and_wait(topic, encode(later), key=later.job.encode())
        # No wait for delivery to a poller: whatever the broker acknowledged is read now.
        assert await feed.read_to_end() == [*first, later]  # the malformed one skipped
        assert await feed.read_to_end() == []
    finally:
        await producer.stop()
        await feed.stop()


async def test_two_preemptors_holding_one_node_both_get_their_gpus_there() -> None:
    published = Published()
    cluster, launcher, s = await contested(published)
    ft_code = next(p for p in s.jobs if p.key == "prod/ft-code")
    cluster.submit(ft_code, T + 3)
    await cluster.tick(T + 3, {})
    # gpu-2 is freed for two 4-GPU fine-tunes: rl-elastic's two pods and tiny-a yield.
    published.messages += [hold(FT_EVAL, {"gpu-2": 4}), hold(ft_code.key, {"gpu-2": 4})]
    launcher.exit("research/rl-elastic", 0)
    launcher.exit("research/rl-elastic", 1)
    launcher.exit("research/tiny-a", 0)
    await cluster.tick(T + 10, {})
    assert nodes_of(cluster, FT_EVAL) == nodes_of(cluster, ft_code.key) == {"gpu-2"}
