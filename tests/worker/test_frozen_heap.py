"""The worker's frozen heap: full collections skip what lives, and nothing dead is kept for long."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "controller"))

from harness import shared_pool

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.worker.frozen_heap import FrozenHeap
from gpuyield.agents.worker.shell import DeciderIndex, TableView


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    """A record that refers to itself: garbage only the cyclic collector can free."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """The test process's heap is let go after each test, whatever the test froze."""
    yield
    gc.unfreeze()


def cycle() -> weakref.ref[Node]:
    """A self-referencing object the caller holds only weakly: alive until collected."""
    return weakref.ref(Node())


def test_freezing_takes_what_lives_out_of_every_collection() -> None:
    kept = Node()
    FrozenHeap(3600.0, Clock()).freeze()
    assert gc.is_tracked(kept)
    assert all(kept is not o for o in gc.get_objects())  # what collections walk
    assert gc.get_freeze_count() > 0


def test_garbage_made_before_a_freeze_is_collected_not_frozen() -> None:
    dead = cycle()
    FrozenHeap(3600.0, Clock()).freeze()
    assert dead() is None


def test_a_cycle_that_dies_while_frozen_waits_until_the_interval_passes() -> None:
    clock = Clock()
    heap = FrozenHeap(3600.0, clock)
    node = Node()
    gone = weakref.ref(node)
    heap.freeze()
    del node  # garbage now, but frozen: no collection looks at it
    gc.collect()
    clock.now += 3599.0
    heap.refresh()
    assert gone() is not None
    clock.now += 1.0
    heap.refresh()  # the interval passed: let go, collected, the rest frozen again
    assert gone() is None
    assert gc.get_freeze_count() > 0


def test_release_gives_every_frozen_object_back_to_the_collector() -> None:
    heap = FrozenHeap(3600.0, Clock())
    node = Node()
    gone = weakref.ref(node)
    heap.freeze()
    del node
    heap.release()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


def test_a_released_heap_is_not_frozen_again_by_the_clock_alone() -> None:
    clock = Clock()
    heap = FrozenHeap(60.0, clock)
    heap.freeze()
    heap.release()
    clock.now += 3600.0
    heap.refresh()
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_an_interval_that_is_not_positive_is_refused_by_name(interval: float) -> None:
    with pytest.raises(ValueError, match="refreeze_s must be positive"):
        FrozenHeap(interval)


def test_the_decider_index_freezes_once_built_and_lets_go_when_reset() -> None:
    table = {k.encode(): v for k, v in shared_pool().records.items()}
    index = DeciderIndex(ControllerConfig(), FrozenHeap(3600.0, Clock()))
    built = index.of(TableView(table))
    assert gc.get_freeze_count() > 0
    assert all(built is not o for o in gc.get_objects())  # the index is among the frozen
    index.reset()
    assert gc.get_freeze_count() == 0
