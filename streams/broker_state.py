"""A lost broker state is detected and reported, never lived with.

The embedded Tansu broker keeps everything in memory. When it restarts under
a running worker or node agent, every topic, changelog and committed offset is
gone, and the clients reconnect as if nothing happened: Tansu creates each
topic they name again with its default of 4 partitions (the decider's topics
must have one), the consumers find their offsets out of range, and the worker
used to go on reporting ready while processing nothing (issue 11).

A process that reads and writes the controller's topics takes a baseline once
its topics exist (``observe``: the broker's cluster id, and the partition
count of each of its topics, read from metadata of *all* topics, since naming
an unknown topic would create it) and ``guard_broker`` compares against it
every ``GPUYIELD_BROKER_CHECK_S``. A changed cluster id, a topic gone, a
partition count changed, or an embedded broker that exited: the broker state
is lost. The process logs one critical line saying what was lost and exits at
once with status ``EXIT_BROKER_LOST`` (75, EX_TEMPFAIL: "try again"), for its
supervisor (Kubernetes, ``bench/bench_faults.py``'s loop) to restart it.
Exiting is simpler and safer than rebuilding in place: faust's tables,
assignments and offsets all assume the broker they started on; and exiting at
once stops its producers from writing more into topics the broker made up.

The restarted worker (``start_on_broker``) creates the topics and compares the
broker's cluster id with the one it recorded in its state directory on its
last start. A different one means a new broker, whose topics hold only what
reconnecting clients made it create in the last seconds, with Tansu's default
of 4 partitions: it deletes those whose layout differs from the registry and
creates them again from the registry, before any of its own clients start. It
then rebuilds its tables from what is on the new broker and goes on. Only the
worker repairs (the one writer of the changelogs); a node agent just restarts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from gpuyield.streams.topics import TopicSpec, ensure_topics

log = logging.getLogger(__name__)

EXIT_BROKER_LOST = 75
"""EX_TEMPFAIL: the broker lost its state; a restart of this process recovers."""

REPAIR_ROUNDS = 3
"""Delete-and-create rounds: other clients may make the broker create a topic again meanwhile."""


@dataclass(frozen=True)
class BrokerState:
    """What a process relies on: the broker's identity and its topics' layout."""

    cluster_id: str | None
    partitions: Mapping[str, int]
    """The watched topics that exist, with their partition counts."""


def lost_state(baseline: BrokerState, current: BrokerState) -> str | None:
    """Why ``current`` is no longer the broker state the process started on, or None."""
    reasons = []
    if baseline.cluster_id is not None and current.cluster_id != baseline.cluster_id:
        reasons.append(
            f"the broker's cluster id is {current.cluster_id}, was {baseline.cluster_id}: "
            "a new broker (a memory-only one restarted) with none of the old topics and offsets"
        )
    for topic, count in sorted(baseline.partitions.items()):
        now = current.partitions.get(topic)
        if now is None:
            reasons.append(f"topic {topic} is gone")
        elif now != count:
            reasons.append(f"topic {topic} has {now} partitions, had {count}")
    return "; ".join(reasons) or None


def _admin(client_kwargs: Mapping[str, Any], timeout_s: float) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(
        **client_kwargs, request_timeout_ms=int(timeout_s * 1000), client_id="gpuyield-guard"
    )


async def _observe_with(admin: AIOKafkaAdminClient, topics: Iterable[str]) -> BrokerState:
    cluster = await admin.describe_cluster()
    # describe_topics(None) asks for every topic: naming an unknown one would create it
    described = await admin.describe_topics(None)
    counts = {item["topic"]: len(item["partitions"]) for item in described}
    return BrokerState(cluster.get("cluster_id"), {t: counts[t] for t in topics if t in counts})


async def observe(
    client_kwargs: Mapping[str, Any], topics: Iterable[str], *, timeout_s: float = 10.0
) -> BrokerState:
    """The broker's cluster id and the layout of ``topics`` (those that exist), creating none."""
    admin = _admin(client_kwargs, timeout_s)
    await admin.start()
    try:
        return await _observe_with(admin, list(topics))
    finally:
        await admin.close()


async def repair_topics(
    client_kwargs: Mapping[str, Any],
    specs: Sequence[TopicSpec],
    replication_factor: int,
    discard: Collection[str] = (),
) -> bool:
    """Give a new broker the registry's layout: delete drifted topics, create every topic.

    Only for a broker known to be new (its cluster id changed): its topics hold
    at most what reconnecting clients sent in the last seconds. ``discard``
    names topics deleted whatever their layout (the table changelogs: what a
    dying predecessor wrote into them on the new broker is no state to recover;
    measured, faust's recovery then waited on it forever). Returns whether the
    layout matches the registry in the end.
    """
    wanted = {spec.name: spec.partitions for spec in specs}
    first = True
    for _ in range(REPAIR_ROUNDS):
        state = await observe(client_kwargs, wanted)
        drifted = [
            t for t, n in state.partitions.items() if n != wanted[t] or (first and t in discard)
        ]
        first = False
        if drifted:
            admin = _admin(client_kwargs, 10.0)
            await admin.start()
            try:
                await admin.delete_topics(drifted)
            finally:
                await admin.close()
            log.warning("deleted, to be created from the registry: %s", drifted)
        await ensure_topics(client_kwargs, specs, replication_factor)
        state = await observe(client_kwargs, wanted)
        if state.partitions == wanted:
            return True
    return False


Exit = Callable[[int], object]


def _exit_now(status: int) -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(status)


async def guard_broker(
    what: str,
    client_kwargs: Mapping[str, Any],
    baseline: BrokerState,
    *,
    interval_s: float,
    alive: Callable[[], bool] | None = None,
    exit: Exit = _exit_now,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> str:
    """Check the broker every ``interval_s``; on a lost state log why and ``exit``.

    ``alive`` says whether an embedded broker this process owns still runs.
    An unreachable broker is not a lost one: the clients retry, and so does
    the guard. Returns the reason (when ``exit`` returns, as in tests).
    """
    while True:
        await sleep(interval_s)
        reason: str | None = None
        if alive is not None and not alive():
            reason = "the embedded broker this process started has exited"
        else:
            try:
                current = await observe(client_kwargs, baseline.partitions)
            except (KafkaError, OSError) as exc:
                log.debug("broker check: %s; trying again", exc)
                continue
            reason = lost_state(baseline, current)
        if reason is None:
            continue
        log.critical(
            "%s: the broker lost its state (%s); exiting with status %d so that its "
            "supervisor restarts it against the broker as it is now",
            what,
            reason,
            EXIT_BROKER_LOST,
        )
        exit(EXIT_BROKER_LOST)
        return reason


RECORD_FILE = "broker.json"
"""In the state directory: the cluster id of the broker of the worker's last start."""


def _recorded(path: Path) -> str | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("cluster_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


async def start_on_broker(
    client_kwargs: Mapping[str, Any],
    specs: Sequence[TopicSpec],
    replication_factor: int,
    record: Path | None,
    discard: Collection[str] = (),
) -> BrokerState:
    """Create the topics (repaired on a new broker), record the broker; return the baseline.

    ``record`` is ``<state_dir>/broker.json`` (None: the caller started the
    broker itself, so it is new and empty); ``discard``, the changelogs
    (see ``repair_topics``). Without a record (a first start),
    a layout that differs from the registry is only warned about, as
    ``ensure_topics`` does: it may be an operator's choice on a real Kafka.
    """
    names = [spec.name for spec in specs]
    await ensure_topics(client_kwargs, specs, replication_factor)
    state = await observe(client_kwargs, names)
    if record is None:  # a broker the caller has just started: new, and nothing to repair
        return state
    previous = _recorded(record)
    if previous is not None and previous != state.cluster_id:
        log.warning(
            "the broker is not the one of the last start (cluster id %s, was %s): it lost "
            "every topic and offset; giving its topics the registry's layout",
            state.cluster_id,
            previous,
        )
        if not await repair_topics(client_kwargs, specs, replication_factor, discard):
            log.error("the new broker's topics still differ from the registry")
        state = await observe(client_kwargs, names)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"cluster_id": state.cluster_id}), encoding="utf-8")
    return state
