"""Which pods a command names, as ``namespace/name`` references.

Commands carry bare pod names next to the job (``namespace/name``): a Volcano
Job's pods live in the job's namespace, so the namespace comes from the job.
A pod name that already holds a ``/`` is taken as qualified. A job without a
namespace (local runs, tests) puts its pods in ``default``, as kubectl would.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyield.schemas.messages import YieldCommand

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    """One pod: where the signallers look it up."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return self.key


def split_job(job: str) -> tuple[str, str]:
    """``namespace/name`` of a job (``default`` when the job names no namespace)."""
    namespace, _, name = job.rpartition("/")
    return namespace or DEFAULT_NAMESPACE, name


def pod_refs(command: YieldCommand) -> tuple[PodRef, ...]:
    """The command's pods, qualified with the job's namespace, sorted and without repeats."""
    namespace, _ = split_job(command.job)
    refs = set()
    for pod in command.pods:
        if "/" in pod:
            pod_namespace, _, name = pod.rpartition("/")
            refs.add(PodRef(pod_namespace, name))
        else:
            refs.add(PodRef(namespace, pod))
    return tuple(sorted(refs))
