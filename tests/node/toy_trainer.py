"""A trainer-like process for the node agent's tests: steps, heartbeats, a checkpoint on SIGTERM.

Lighter than the torch example (starts in well under a second) and able to
misbehave on purpose: ``--ignore-sigterm`` (only SIGKILL stops it) and
``--save-delay`` (a slow emergency checkpoint, to crash the agent mid-yield).

    python toy_trainer.py --bootstrap HOST:PORT --topic T --job ns/j --pod p \\
        --ready FILE --checkpoint FILE [--ignore-sigterm] [--save-delay S]

It saves a periodic checkpoint at step 5, sends a heartbeat every 10 steps
(20 ms each), writes ``--ready`` once its first heartbeat is on the broker, and
on SIGTERM, at the next step: waits ``--save-delay``, writes ``{"step": N}`` to
``--checkpoint`` (temp file + rename), sends the heartbeat that reports it,
exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import Heartbeat


def save(path: Path, step: int) -> float:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, path)
    return time.time()


async def main(args: argparse.Namespace) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, max_batch_size=1)
    await producer.start()
    stop = asyncio.Event()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    ckpt_step: int | None = None
    ckpt_at: float | None = None

    async def beat(step: int) -> None:
        heartbeat = Heartbeat(
            job=args.job,
            pod=args.pod,
            step=step,
            progress=0.0,
            last_checkpoint_step=ckpt_step,
            last_checkpoint_at=ckpt_at,
            sent_at=time.time(),
        )
        await producer.send_and_wait(args.topic, encode(heartbeat), key=args.job.encode())

    step = 0
    try:
        while True:
            await asyncio.sleep(0.02)
            step += 1
            if stop.is_set():
                await asyncio.sleep(args.save_delay)
                ckpt_step, ckpt_at = step, save(args.checkpoint, step)
                await beat(step)
                return 0
            if step == 5:
                ckpt_step, ckpt_at = step, save(args.checkpoint, step)
            if step % 10 == 0:
                await beat(step)
                if step == 10:
                    args.ready.write_text(str(os.getpid()))
    finally:
        await producer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--pod", required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--save-delay", type=float, default=0.0)
    sys.exit(asyncio.run(main(parser.parse_args())))
