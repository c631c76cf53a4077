"""A stand-in trainer for the demo's pods that do not run torch: simulated steps, a real yield.

It behaves towards the node agent exactly like a trainer built on the SDK:
heartbeats on ``gpuyield.heartbeats`` (job, pod, rank, step, progress, the
last checkpoint's step and time), a periodic checkpoint every
``--checkpoint-every`` steps, and on SIGTERM, at the next step boundary, an
emergency checkpoint (temp file, fsync, rename), the heartbeat that reports
it, and exit 0. A restart resumes from the checkpoint file. It needs no
torch, so a demo can run many pods on a small machine; the signal path is
still the real one for every yield.

    python -m gpuyield.agents.demo.standin --bootstrap HOST:PORT --topic T \\
        --job ns/name --pod name --checkpoint FILE --result FILE \\
        [--rank 0] [--steps-per-s 4] [--checkpoint-every 40] [--total-steps N] \\
        [--start-step 0] [--finishes]

``--result`` receives ``{"status": "yielded"|"completed", "step", "started_at"}``,
the same fields as ``examples/train_tiny.py`` writes. Without ``--finishes``
it reaches ``--total-steps`` and keeps reporting that step (a research job
that outlives the demo). The pods of one job restart from the newest checkpoint
in ``--checkpoint``'s folder (see ``newest_checkpoint``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Heartbeat


def write_atomically(path: Path, document: dict[str, Any]) -> None:
    """Temp file, fsync, rename: a reader sees the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        out.write(json.dumps(document))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_checkpoint(path: Path) -> tuple[int, float] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        return int(document["step"]), float(document["saved_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def newest_checkpoint(path: Path) -> tuple[int, float] | None:
    """The job's newest checkpoint: ``path`` or a sibling rank's file in the same folder.

    The ranks of one job share its checkpoints, as a DDP job's ranks restore
    rank 0's: each pod writes its own file (no two writers on one file), and a
    restarted pod starts from the furthest step any of them saved. Otherwise
    two ranks that stopped a step apart would restart a step apart, and the
    demo would show a resume starting before the step its yield reported.
    """
    found = [read_checkpoint(path)]
    with contextlib.suppress(OSError):
        found += [
            read_checkpoint(p)
            for p in path.parent.glob("*.json")
            if p != path and not p.name.startswith(".")
        ]
    return max((f for f in found if f is not None), default=None)


class StandIn:
    def __init__(
        self, args: argparse.Namespace, producer: AIOKafkaProducer, stop: asyncio.Event
    ) -> None:
        self.args = args
        self.producer = producer
        self.stop = stop
        found = newest_checkpoint(args.checkpoint)
        self.started_at = found[0] if found else args.start_step
        self.step = self.started_at
        self.checkpoint_step: int | None = None
        self.checkpoint_at: float | None = None
        if found:
            self.checkpoint_step, self.checkpoint_at = found

    def save(self) -> None:
        now = time.time()
        write_atomically(self.args.checkpoint, {"step": self.step, "saved_at": now})
        self.checkpoint_step, self.checkpoint_at = self.step, now

    async def beat(self) -> None:
        total = self.args.total_steps
        heartbeat = Heartbeat(
            job=self.args.job,
            pod=self.args.pod,
            rank=self.args.rank,
            step=self.step,
            total_steps=total,
            progress=min(1.0, self.step / total),
            last_checkpoint_step=self.checkpoint_step,
            last_checkpoint_at=self.checkpoint_at,
            checkpoint_interval_s=self.args.checkpoint_every / self.args.steps_per_s,
            sent_at=time.time(),
        )
        await self.producer.send_and_wait(
            self.args.topic, encode(heartbeat), key=self.args.job.encode()
        )

    def result(self, status: str) -> None:
        write_atomically(
            self.args.result, {"status": status, "step": self.step, "started_at": self.started_at}
        )

    async def run(self) -> int:
        args = self.args
        if self.checkpoint_step is None:
            self.save()  # the progress it brought into the demo
        await self.beat()
        beat_every = max(1, round(args.steps_per_s))
        pause = 1.0 / args.steps_per_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), pause)
            if self.stop.is_set():  # a step boundary: the emergency checkpoint
                self.save()
                await self.beat()
                self.result("yielded")
                return 0
            if self.step >= args.total_steps:
                if args.finishes:
                    self.save()
                    await self.beat()
                    self.result("completed")
                    return 0
                continue
            self.step += 1
            if self.step % args.checkpoint_every == 0:
                self.save()
                await self.beat()
            elif self.step % beat_every == 0:
                await self.beat()


async def main(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, max_batch_size=1)
    await producer.start()
    try:
        return await StandIn(args, producer, stop).run()
    finally:
        await producer.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--pod", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--steps-per-s", type=float, default=4.0)
    parser.add_argument("--checkpoint-every", type=int, default=40)
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--start-step", type=int, default=0)
    parser.add_argument("--finishes", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
