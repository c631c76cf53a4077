"""A decision's Kubernetes Events are written behind the decider, not in its way.

The worker awaited one API round trip per Event (about 21 per decision)
before it took its next input, so a slow API server slowed every decision.
``EventWriting`` queues them and writes them in order from a task of its own;
the decider waits only when ``depth`` decisions' Events are unwritten, and a
graceful stop writes what is queued. Specified with the worker's own
``EventWriter`` on the faithful fake API server, held before each batch the
way a slow server holds a request.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "controller"))

import kubernetes.client
import pytest
from fakes.kube_api import FakeKubeApi
from fakes.kube_store import resource_of
from fakes.waiting import eventually
from harness import production_demand, shared_pool

from gpuyield.agents.worker.job_events import EventWriting
from gpuyield.schemas.messages import Decision
from gpuyield.streams.kube_job_events import EventWriter

EVENTS = resource_of("events.k8s.io/v1", "Event")


class HeldApiServer(EventWriter):
    """The worker's writer, each batch held until the test lets it through."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        super().__init__(api_client)
        self.open = threading.Event()
        self.started = 0

    def create(self, events: Iterable[Any]) -> list[str]:
        self.started += 1
        assert self.open.wait(30), "the test never let the batch through"
        return super().create(events)


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        yield api


@pytest.fixture
def writer(kube_api: FakeKubeApi) -> Iterator[HeldApiServer]:
    client = kubernetes.client.ApiClient(kube_api.configuration())
    held = HeldApiServer(client)
    yield held
    held.open.set()
    client.close()


@pytest.fixture
async def writing(writer: HeldApiServer) -> AsyncIterator[EventWriting]:
    service = EventWriting(writer, "gpuyield-worker-0", depth=2)
    await service.start()
    yield service
    writer.open.set()
    await service.stop()


def a_decision() -> tuple[Decision, dict[str, Any]]:
    """A yield decision (a victim, a spared candidate) and the records it was made on."""
    c = shared_pool()
    production_demand(c)
    [decision] = c.decisions
    return decision, c.records


def stored(api: FakeKubeApi) -> list[str]:
    return sorted(obj["reason"] for _, obj in api.call(lambda: api.store.snapshot(EVENTS, None)))


async def test_the_decider_goes_on_while_the_api_server_is_slow(
    kube_api: FakeKubeApi, writer: HeldApiServer, writing: EventWriting
) -> None:
    decision, records = a_decision()

    await asyncio.wait_for(writing.submit([decision], records), 5)

    await eventually(lambda: writer.started == 1, "the batch to reach the API server")
    assert stored(kube_api) == []  # still held: the submit did not wait for it
    writer.open.set()
    await eventually(lambda: stored(kube_api) == ["GracefulYield", "Spared"], "the Events")


async def test_with_depth_decisions_unwritten_the_decider_waits(
    kube_api: FakeKubeApi, writer: HeldApiServer, writing: EventWriting
) -> None:
    decision, records = a_decision()
    for _ in range(3):  # one being written, two queued: the depth
        await asyncio.wait_for(writing.submit([decision], records), 5)
    await eventually(lambda: writer.started == 1, "the first batch to reach the API server")

    fourth = asyncio.ensure_future(writing.submit([decision], records))
    await asyncio.sleep(0.2)
    assert not fourth.done()
    writer.open.set()
    await asyncio.wait_for(fourth, 10)


async def test_a_graceful_stop_writes_what_is_queued(
    kube_api: FakeKubeApi, writer: HeldApiServer, writing: EventWriting
) -> None:
    decision, records = a_decision()
    await writing.submit([decision], records)
    writer.open.set()

    await writing.stop()

    assert stored(kube_api) == ["GracefulYield", "Spared"]
    assert writing.unwritten == 0
    assert writing.failed == 0


async def test_events_refused_by_the_api_server_are_counted_not_raised(
    kube_api: FakeKubeApi, writer: HeldApiServer, writing: EventWriting
) -> None:
    decision, records = a_decision()
    writer.open.set()
    kube_api.stop()  # the API server is gone

    await writing.submit([decision], records)
    await eventually(lambda: writing.failed == 2, "both Events counted as not written")
    await writing.submit([decision], records)  # the writing goes on
    await eventually(lambda: writing.failed == 4, "the next decision's too")
