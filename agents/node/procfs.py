"""Reading processes from a ``/proc`` tree: which belong to a pod, and which still run.

The root is a parameter (``/proc`` on a host, a directory of fake entries in
tests). Only three files per process are read: ``cgroup`` (which pod and
container it belongs to), ``status`` (``Name``, ``State``, ``PPid``). A process
that vanishes while it is read is simply skipped: on a live host that race is
normal.

How a pod shows in a cgroup path depends on the kubelet's cgroup driver:

- cgroupfs: ``/kubepods/burstable/pod6b1c9f2e-55d3-4bb2-a3ea-2a0f1c9e8d11/<container>``
- systemd:  ``/kubepods.slice/kubepods-burstable.slice/``
  ``kubepods-burstable-pod6b1c9f2e_55d3_4bb2_a3ea_2a0f1c9e8d11.slice/cri-containerd-<id>.scope``

(guaranteed pods lack the QoS level), and cgroup v1 lists one line per
hierarchy (``12:memory:/kubepods/...``) where v2 has one (``0::/kubepods...``).
The path component after the pod's is the container.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

PAUSE_NAMES = frozenset({"pause"})
"""The sandbox ("pause") container's process: never signalled, it holds the pod's namespaces."""


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    name: str
    state: str  # the State letter: R, S, D, Z, X, ...
    container: str  # the cgroup path up to and including the container component

    @property
    def running(self) -> bool:
        return self.state not in ("Z", "X")


def _pod_component(uid: str) -> re.Pattern[str]:
    """Matches the pod's own cgroup path component, for both drivers."""
    dashed = re.escape(uid.lower())
    underscored = re.escape(uid.lower().replace("-", "_"))
    return re.compile(rf"^(?:.*-)?pod(?:{dashed}|{underscored})(?:\.slice)?$")


def container_path(cgroup_text: str, uid: str) -> str | None:
    """The container's cgroup path if a ``/proc/<pid>/cgroup`` text puts it in the pod."""
    component = _pod_component(uid)
    for line in cgroup_text.splitlines():
        _, _, path = line.partition(":")
        _, _, path = path.partition(":")
        parts = path.split("/")
        for index, part in enumerate(parts):
            if component.match(part.lower()):
                return "/".join(parts[: index + 2])
    return None


def read_status(proc_root: Path, pid: int) -> tuple[str, str, int] | None:
    """``(Name, State letter, PPid)`` of a process, or None when it is gone."""
    try:
        text = (proc_root / str(pid) / "status").read_text(errors="replace")
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    try:
        return fields.get("Name", ""), fields.get("State", "?")[:1], int(fields.get("PPid", "0"))
    except ValueError:
        return None


def pids(proc_root: Path) -> list[int]:
    try:
        return sorted(int(entry.name) for entry in proc_root.iterdir() if entry.name.isdigit())
    except OSError:
        return []


def pod_processes(proc_root: Path, uid: str) -> list[ProcInfo]:
    """Every process (pause included) whose cgroup puts it in the pod with ``uid``."""
    found: list[ProcInfo] = []
    for pid in pids(proc_root):
        try:
            cgroup = (proc_root / str(pid) / "cgroup").read_text(errors="replace")
        except OSError:
            continue
        container = container_path(cgroup, uid)
        if container is None:
            continue
        status = read_status(proc_root, pid)
        if status is None:
            continue
        name, state, ppid = status
        found.append(ProcInfo(pid, ppid, name, state, container))
    return found


def workload(processes: list[ProcInfo]) -> list[ProcInfo]:
    """The pod's running processes, without the sandbox (pause) container."""
    pause = {p.container for p in processes if p.name in PAUSE_NAMES and p.running}
    return [p for p in processes if p.running and p.container not in pause]


def container_mains(processes: list[ProcInfo]) -> list[ProcInfo]:
    """Each container's main process: the one whose parent is outside its container.

    That is the process the container runtime itself would SIGTERM (PID 1 of
    the container), so a training script started through a shell or torchrun
    sees the signal the way it would under a kubelet.
    """
    members: dict[str, set[int]] = {}
    for proc in processes:
        members.setdefault(proc.container, set()).add(proc.pid)
    return [p for p in processes if p.ppid not in members[p.container]]


def is_running(pid: int, proc_root: Path = Path("/proc")) -> bool:
    """True while ``pid`` exists and is not a zombie (a child its parent has not reaped).

    Without a readable status (no procfs, or the process exited this instant)
    the signal-0 probe decides; the next poll settles the race.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    status = read_status(proc_root, pid)
    return status is None or status[1] not in ("Z", "X")


def send(pid: int, signum: int) -> bool:
    """Send a signal; False when the process is already gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
        return True
    return False
