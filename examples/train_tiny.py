"""A tiny training script that yields gracefully: the trainer SDK in five lines.

It trains a small MLP on synthetic data that is a pure function of the seed,
the epoch and the position in it, so a run stopped by SIGTERM (or SIGUSR1) and
resumed from its emergency checkpoint ends with the same parameters, bit for
bit, as a run never stopped. The tests compare the result files.

    python examples/train_tiny.py --checkpoint-dir /tmp/ck --steps 200 --job ns/tiny
    python examples/train_tiny.py ... --ddp 2          # 2 ranks on gloo, spawned here
    python examples/train_tiny.py ... --device cuda    # on the GPU (NCCL between ranks)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python examples/train_tiny.py ...
                                                       # one rank per pod, as Volcano starts them

Exit status 0 after a completed run and after a yield (the job resumes later).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.multiprocessing.spawn import (
    ProcessExitedException,
    ProcessRaisedException,
    start_processes,
)
from torch.nn.parallel import DistributedDataParallel

from gpuyield.agents.trainer import (
    GracefulTrainer,
    HeartbeatSink,
    JsonLinesSink,
    KafkaHeartbeatSink,
    NullSink,
)

FEATURES = 8
SAMPLES = 512

logger = logging.getLogger("train_tiny")


class SyntheticData:
    """A resumable, sharded data stream: the state is (epoch, index), like DistributedSampler's.

    The dataset is drawn once from the seed; each epoch's order is a permutation
    seeded by (seed, epoch), and rank r reads every world-th sample of it. No
    hidden generator state, so saving two ints is enough to resume exactly.
    """

    def __init__(self, seed: int, rank: int, world: int, batch: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(SAMPLES, FEATURES, generator=generator)
        weights = torch.randn(FEATURES, 1, generator=generator)
        self.y = torch.tanh(self.x @ weights) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
        self.seed, self.rank, self.world, self.batch = seed, rank, world, batch
        self.batches_per_epoch = SAMPLES // world // batch
        self.epoch = 0
        self.index = 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.index == self.batches_per_epoch:
            self.epoch, self.index = self.epoch + 1, 0
        order = torch.randperm(
            SAMPLES, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        )
        shard = order[self.rank :: self.world]
        rows = shard[self.index * self.batch : (self.index + 1) * self.batch]
        self.index += 1
        return self.x[rows], self.y[rows]

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


def parameters_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def make_sink(args: argparse.Namespace) -> HeartbeatSink:
    if args.kafka_bootstrap:
        return KafkaHeartbeatSink(args.kafka_bootstrap, topic=args.kafka_topic)
    if args.heartbeat_file:
        return JsonLinesSink(args.heartbeat_file)
    return NullSink()


def device_for(name: str, rank: int) -> torch.device:
    """The rank's device: the CPU, or the GPU of its local rank.

    On a GPU the run is made deterministic (cuBLAS's fixed workspace, and
    deterministic kernels), so a resumed run can be compared bit for bit.
    """
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: torch sees no CUDA device")
    local = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def train(rank: int, world: int, args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format=f"%(asctime)s rank{rank} %(name)s %(message)s")
    torch.set_num_threads(1)  # the same reduction order in every run: bit-identical results
    device = device_for(args.device, rank)
    torch.manual_seed(args.seed + rank)  # dropout differs per rank, as in real jobs
    np.random.seed(args.seed + rank)  # the input noise below
    if world > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world)

    net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
    net = net.to(device)  # dropout on a GPU draws from its CUDA generator, which the SDK saves
    model: nn.Module = net
    if world > 1:
        ids = [device.index] if device.type == "cuda" else None
        model = DistributedDataParallel(net, device_ids=ids)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.9)
    data = SyntheticData(args.seed, rank, world, args.batch)

    session = GracefulTrainer(
        args.checkpoint_dir,
        job=args.job,
        pod=args.pod,
        heartbeat=make_sink(args),
        total_steps=args.steps,
        checkpoint_every_steps=args.checkpoint_every,
        checkpoint_interval_s=args.checkpoint_interval_s,
        heartbeat_every_steps=args.heartbeat_every_steps,
    )
    start = session.resume(model=model, optimizer=optimizer, scheduler=scheduler, data=data)
    for step in range(start, args.steps):
        x, y = data.next_batch()
        x = x + torch.from_numpy(np.random.normal(0.0, 0.01, x.shape).astype(np.float32))
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        scheduler.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if session.step_done(step + 1):
            break
    code = session.finish()

    if args.result:
        path = Path(args.result)
        if world > 1:
            path = path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
        result = {
            "status": "yielded" if session.yielded else "completed",
            "reason": session.yield_reason,
            "step": session.step,
            "started_at": start,
            "sha256": parameters_sha256(net),
            "world_size": world,
            "rank": rank,
            "heartbeats_dropped": session.heartbeat_stats.dropped,
        }
        path.write_text(json.dumps(result, indent=2) + "\n")
    if world > 1:
        # Every rank leaves together: a rank that tears the group down while its
        # peer is still in a collective makes gloo abort the peer ("terminate
        # called without an active exception").
        dist.barrier()
        dist.destroy_process_group()
    return code


def _spawned(rank: int, world: int, args: argparse.Namespace) -> None:
    code = train(rank, world, args)
    if code:
        sys.exit(code)


def spawn(world: int, args: argparse.Namespace) -> int:
    """Run ``world`` ranks in this pod; a signal to this process is passed on to every rank."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    context = start_processes(  # type: ignore[no-untyped-call]
        _spawned, args=(world, args), nprocs=world, join=False, start_method="spawn"
    )

    def forward(signum: int, _frame: FrameType | None) -> None:
        for process in context.processes:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signum)

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, forward)
    try:
        while not context.join():
            pass
    except ProcessExitedException as exc:
        return exc.exit_code or 1
    except ProcessRaisedException:
        return 1
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--job", default="default/train-tiny")
    parser.add_argument("--pod", default=None, help="default: $POD_NAME or the host name")
    parser.add_argument("--heartbeat-file", help="append heartbeats to this JSON-lines file")
    parser.add_argument("--kafka-bootstrap", help="send heartbeats to this Kafka broker")
    parser.add_argument("--kafka-topic", default="gpuyield.heartbeats")
    parser.add_argument("--heartbeat-every-steps", type=int, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=None, help="steps")
    parser.add_argument("--checkpoint-interval-s", type=float, default=None)
    parser.add_argument("--ddp", type=int, default=1, help="world size, spawned here")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds, to slow it down")
    parser.add_argument("--result", help="write the final step and parameter hash here (JSON)")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # one rank per process (torchrun)
        return train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    if args.ddp > 1:
        return spawn(args.ddp, args)
    return train(0, 1, args)


if __name__ == "__main__":
    sys.exit(main())
