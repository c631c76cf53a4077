"""The decider's journal: the order in which it took its inputs, for ``gpuyield replay``.

The decider reads four single-partition topics (watch events, job progress,
acks, ticks) as one stream. The positions of its inputs are on those topics,
but the interleaving, which decides what each step saw, is recorded nowhere
else: the worker puts one ``JournalEntry`` on ``gpuyield.decider-journal``
for each input, before it processes it. The first entry a worker writes as
the decider's owner carries ``start``: how many records its table held, their
digest, and its configuration. A replay starts at a start with an empty
table (a new deployment) and, at each later start, checks that it rebuilt
the table the worker recovered (docs/design/0005-replay.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.records import Record
from gpuyield.schemas.messages import JournalEntry, JournalStart


def table_digest(records: Mapping[str, Record]) -> str:
    """SHA-256 of the records, in key order: equal tables give equal digests."""
    digest = hashlib.sha256()
    for key in sorted(records):
        digest.update(json.dumps([key, records[key]], separators=(",", ":")).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def start_of(records: Mapping[str, Record], config: ControllerConfig) -> JournalStart:
    return JournalStart(records=len(records), digest=table_digest(records), config=config)


class Journal:
    """One worker's journal writer: the first entry it makes is a start."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.started = False

    def entry(
        self, topic: str, partition: int, offset: int, records: Mapping[str, Record], at: float
    ) -> JournalEntry:
        """The entry for the input at ``topic/partition/offset``, about to be processed."""
        start = None
        if not self.started:
            start = start_of(records, self.config)
            self.started = True
        return JournalEntry(topic=topic, partition=partition, offset=offset, at=at, start=start)
