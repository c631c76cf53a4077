"""Record what ``step`` decides for a seeded stream, for the decider's differential test.

``tests/controller/test_decider_index.py`` replays the recorded inputs
through today's ``step`` and requires every outcome to be byte-identical to
the recording. The recordings in ``tests/controller/data/`` (the inputs, and
each outcome's SHA-256 digest) were made with the decider that rebuilt its job
views from the whole table on every step (before issue 14's index): they pin
the behaviour the index must not change. Record them again only when the
decider's behaviour changes on purpose.

    .venv/bin/python bench/decider_reference.py tests/controller/data/decider_reference.jsonl.gz

``--redigest`` keeps a recording's inputs and replays them through today's
``step`` (without an index, as recorded) for new digests: for a change of
behaviour on purpose that does not change the inputs (December 2026: plans
counted impossible before the search say so in other words; the tables,
commands and holds stayed identical at every step, checked side by side).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from typing import Any

from decider_stream import Stream

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.decider import Input, Outcome, step
from gpuyield.schemas.messages import JobProgress, KubeEvent, Tick, YieldAck

KINDS: dict[str, type[Input]] = {
    "kube": KubeEvent,
    "progress": JobProgress,
    "ack": YieldAck,
    "tick": Tick,
}


def kind_of(message: Input) -> str:
    return next(k for k, model in KINDS.items() if isinstance(message, model))


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """An outcome as JSON, every message in its wire form (``encode``)."""
    return {
        "writes": outcome.writes,
        "decisions": [d.model_dump_json() for d in outcome.decisions],
        "commands": [c.model_dump_json() for c in outcome.commands],
        "alerts": [a.model_dump_json() for a in outcome.alerts],
        "reservations": [r.model_dump_json() for r in outcome.reservations],
    }


def digest(outcome: Outcome) -> str:
    """SHA-256 of ``outcome_json``: equal digests, byte-identical outcomes."""
    text = json.dumps(outcome_json(outcome), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def record(path: str, nodes: int, inputs: int, urgent_every: int, share: float, seed: int) -> None:
    config = ControllerConfig()
    stream = Stream(nodes, seed=seed, urgent_every=urgent_every, unschedulable_share=share)
    records: dict[str, Any] = {}
    messages: list[Input] = [Tick(at=stream.now), *stream.initial()]
    with gzip.open(path, "wt") as out:
        n = 0
        while n < len(messages) + inputs:
            message = messages[n] if n < len(messages) else next(stream)
            origin = f"reference/0/{n}"
            outcome = step(records, message, origin, config)
            for key, value in outcome.writes.items():
                if value is None:
                    records.pop(key, None)
                else:
                    records[key] = value
            stream.answer(outcome)
            line = {
                "origin": origin,
                "kind": kind_of(message),
                "message": message.model_dump_json(),
                "digest": digest(outcome),
                "sent": [len(outcome.decisions), len(outcome.commands), len(outcome.alerts)],
            }
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
            n += 1


def redigest(path: str) -> int:
    """Replace each entry's digest with today's ``step``'s; how many changed."""
    config = ControllerConfig()
    records: dict[str, Any] = {}
    with gzip.open(path, "rt") as lines:
        entries = [json.loads(line) for line in lines]
    changed = 0
    for entry in entries:
        message = KINDS[entry["kind"]].model_validate_json(entry["message"])
        outcome = step(records, message, entry["origin"], config)
        for key, value in outcome.writes.items():
            if value is None:
                records.pop(key, None)
            else:
                records[key] = value
        new = digest(outcome)
        changed += new != entry["digest"]
        entry["digest"] = new
        entry["sent"] = [len(outcome.decisions), len(outcome.commands), len(outcome.alerts)]
    with gzip.open(path, "wt") as out:
        for entry in entries:
            out.write(json.dumps(entry, separators=(",", ":")) + "\n")
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=2500)
    parser.add_argument("--urgent-every", type=int, default=150)
    parser.add_argument("--unschedulable-share", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--redigest",
        action="store_true",
        help="keep the recording's inputs at PATH; replace each outcome's digest with today's",
    )
    args = parser.parse_args()
    if args.redigest:
        print(f"{redigest(args.path)} digests changed in {args.path}")
        return
    record(
        args.path, args.nodes, args.inputs, args.urgent_every, args.unschedulable_share, args.seed
    )


if __name__ == "__main__":
    main()
