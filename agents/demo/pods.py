"""The processes in the simulated pods: real torch trainers and stand-ins, registered by PID.

A pod's process is registered with ``LocalPodRegistry`` as soon as it starts,
so the node agents' local signaller can find it: that registry is the demo's
stand-in for the kubelet knowing which container is which pod. Torch pods run
``examples/train_tiny.py`` (a real model, real checkpoints, heartbeats straight
to Kafka through the SDK's sink); the others run ``gpuyield.agents.demo.standin``.
Both write a result file whose ``status`` tells a completed run from a yield.
``Runner.SIMULATED`` pods have no process at all: pods of tenants that no
yield can touch (the drill's serving fleet and other queues, up to a hundred
nodes), which would only add interpreters to a small machine; a deletion
ends them at once, as a process that exits on SIGTERM would.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import signal
from dataclasses import dataclass
from pathlib import Path

import gpuyield.agents
from gpuyield.agents.demo.children import Children, child_env, python
from gpuyield.agents.demo.cluster import PodExit
from gpuyield.agents.demo.scenario import JobPlan, Runner
from gpuyield.agents.node.local_signaller import LocalPodRegistry

log = logging.getLogger(__name__)

PREFIX = "pod:"
TORCH_STEP_SLEEP_S = 0.2
"""train_tiny.py pauses this long per step: a few steps a second, so a yield lands mid-run."""
HEARTBEAT_EVERY_STEPS = 5


def find_train_tiny() -> tuple[Path | None, str]:
    """``examples/train_tiny.py`` if torch can run it here, else None and why not.

    The example lives in the source tree next to the packages (an editable
    install resolves there); torch and numpy come with the ``trainer`` extra.
    """
    missing = [m for m in ("torch", "numpy") if importlib.util.find_spec(m) is None]
    if missing:
        return None, (
            f"{' and '.join(missing)} not installed (pip install 'gpuyield[trainer]'): "
            "every pod runs a stand-in trainer"
        )
    script = Path(gpuyield.agents.__file__).resolve().parents[1] / "examples" / "train_tiny.py"
    if not script.is_file():
        return None, f"{script} not found (a source checkout has it): every pod runs a stand-in"
    return script, ""


@dataclass(frozen=True, slots=True)
class PodPaths:
    workdir: Path

    def checkpoints(self, job: JobPlan) -> Path:
        return self.workdir / "checkpoints" / job.namespace / job.name

    def result(self, job: JobPlan, pod: str) -> Path:
        return self.workdir / "results" / f"{job.namespace}.{pod}.json"

    def log(self, job: JobPlan, pod: str) -> Path:
        return self.workdir / "logs" / f"{job.namespace}.{pod}.log"


class PodLauncher:
    """Starts, signals and reaps pod processes (the ``cluster.Launcher`` of the demo)."""

    def __init__(
        self,
        children: Children,
        registry: LocalPodRegistry,
        *,
        workdir: Path,
        bootstrap: str,
        heartbeats_topic: str,
        train_tiny: Path | None,
        seed: int,
    ) -> None:
        self._children = children
        self._registry = registry
        self._paths = PodPaths(workdir)
        self._bootstrap = bootstrap
        self._topic = heartbeats_topic
        self._train_tiny = train_tiny
        self._seed = seed
        self._pods: dict[str, tuple[JobPlan, str, int]] = {}
        self._simulated: dict[str, int] = {}  # running pods without a process -> rank
        self._ended: list[PodExit] = []  # simulated pods deleted since the last ``exits``
        self.started: dict[Runner, int] = dict.fromkeys(Runner, 0)

    def runner(self, job: JobPlan) -> Runner:
        """What actually runs the job: torch falls back to a stand-in when it is unavailable."""
        if job.runner is Runner.TORCH and self._train_tiny is None:
            return Runner.STANDIN
        return job.runner

    def argv(self, job: JobPlan, pod: str, rank: int) -> list[str]:
        result = self._paths.result(job, pod)
        if self.runner(job) is Runner.TORCH:
            assert self._train_tiny is not None
            return [
                python(), str(self._train_tiny),
                "--checkpoint-dir", str(self._paths.checkpoints(job)),
                "--steps", str(job.total_steps),
                "--job", job.key,
                "--pod", pod,
                "--kafka-bootstrap", self._bootstrap,
                "--kafka-topic", self._topic,
                "--heartbeat-every-steps", str(HEARTBEAT_EVERY_STEPS),
                "--checkpoint-every", str(job.checkpoint_every),
                "--step-sleep", str(TORCH_STEP_SLEEP_S),
                "--seed", str(self._seed),
                "--result", str(result),
                "--log-level", "INFO",
            ]  # fmt: skip
        checkpoint = self._paths.checkpoints(job) / f"{pod}.json"
        argv = [
            python(), "-m", "gpuyield.agents.demo.standin",
            "--bootstrap", self._bootstrap,
            "--topic", self._topic,
            "--job", job.key,
            "--pod", pod,
            "--rank", str(rank),
            "--checkpoint", str(checkpoint),
            "--result", str(result),
            "--steps-per-s", str(job.steps_per_s),
            "--checkpoint-every", str(job.checkpoint_every),
            "--total-steps", str(job.total_steps),
            "--start-step", str(job.start_step),
        ]  # fmt: skip
        return [*argv, "--finishes"] if job.finishes else argv

    async def launch(self, job: JobPlan, pod: str, rank: int) -> int:
        key = f"{job.namespace}/{pod}"
        if self.runner(job) is Runner.SIMULATED:
            self._simulated[key] = rank
            self.started[Runner.SIMULATED] += 1
            return 0
        for folder in (self._paths.checkpoints(job), self._paths.log(job, pod).parent):
            folder.mkdir(parents=True, exist_ok=True)
        result = self._paths.result(job, pod)
        result.parent.mkdir(parents=True, exist_ok=True)
        result.unlink(missing_ok=True)  # a fresh run says afresh how it ended
        process = self._children.spawn(
            PREFIX + key,
            self.argv(job, pod, rank),
            log_path=self._paths.log(job, pod),
            env=child_env({}),
        )
        self._pods[PREFIX + key] = (job, pod, rank)
        await self._registry.register(key, process.pid)
        self.started[self.runner(job)] += 1
        return process.pid

    def terminate(self, job: JobPlan, pod: str) -> None:
        if not self._end_simulated(job, pod):
            self._children.signal(f"{PREFIX}{job.namespace}/{pod}", signal.SIGTERM)

    def kill(self, job: JobPlan, pod: str) -> None:
        if not self._end_simulated(job, pod):
            self._children.signal(f"{PREFIX}{job.namespace}/{pod}", signal.SIGKILL)

    def _end_simulated(self, job: JobPlan, pod: str) -> bool:
        """A simulated pod ends on its deletion (reaped by the next ``exits``); False: not one."""
        key = f"{job.namespace}/{pod}"
        rank = self._simulated.pop(key, None)
        if rank is None:
            return False
        self._ended.append(PodExit(job.key, rank, 0, completed=False))
        return True

    async def exits(self) -> list[PodExit]:
        out, self._ended = self._ended, []
        for name, code in self._children.poll_ended(PREFIX):
            known = self._pods.pop(name, None)
            if known is None:
                continue
            job, pod, rank = known
            await self._registry.forget(f"{job.namespace}/{pod}")
            status = self.result_status(job, pod)
            log.info("%s/%s exited with status %d (%s)", job.namespace, pod, code, status)
            out.append(PodExit(job.key, rank, code, completed=status == "completed"))
        return out

    def result_status(self, job: JobPlan, pod: str) -> str | None:
        try:
            document = json.loads(self._paths.result(job, pod).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        status = document.get("status") if isinstance(document, dict) else None
        return str(status) if status is not None else None

    def stop_all(self, timeout_s: float) -> None:
        """SIGTERM every pod (they checkpoint), SIGKILL what is left after ``timeout_s``."""
        self._children.stop(list(self._pods), timeout_s)
        self._pods.clear()
        self._simulated.clear()
