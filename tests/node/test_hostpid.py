"""The hostPID signaller finds a pod's processes by UID in /proc, whatever the cgroup layout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuyield.agents.node import procfs
from gpuyield.agents.node.hostpid import HostPidSignaller, StaticUidResolver
from gpuyield.agents.node.pods import PodRef

UID = "6b1c9f2e-55d3-4bb2-a3ea-2a0f1c9e8d11"
OTHER_UID = "0a0a0a0a-1111-2222-3333-444444444444"
POD = PodRef("team", "train-0")
OTHER = PodRef("team", "other-0")


def cgroup_text(style: str, uid: str, container: str) -> str:
    """A /proc/<pid>/cgroup as each (cgroup version, driver) pair writes it."""
    under = uid.replace("-", "_")
    if style == "v2-systemd":
        return (
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{under}.slice/cri-containerd-{container}.scope\n"
        )
    if style == "v2-cgroupfs":
        return f"0::/kubepods/burstable/pod{uid}/{container}\n"
    if style == "v1-systemd":
        path = f"/kubepods.slice/kubepods-pod{under}.slice/docker-{container}.scope"
        return f"12:memory:{path}\n11:cpu,cpuacct:{path}\n1:name=systemd:{path}\n"
    if style == "v1-cgroupfs":
        path = f"/kubepods/besteffort/pod{uid}/{container}"
        return f"12:memory:{path}\n4:pids:{path}\n"
    raise AssertionError(style)


def add_process(
    root: Path, pid: int, *, cgroup: str, name: str, ppid: int, state: str = "S (sleeping)"
) -> None:
    entry = root / str(pid)
    entry.mkdir()
    (entry / "cgroup").write_text(cgroup)
    (entry / "status").write_text(f"Name:\t{name}\nState:\t{state}\nPid:\t{pid}\nPPid:\t{ppid}\n")


STYLES = ["v1-cgroupfs", "v1-systemd", "v2-cgroupfs", "v2-systemd"]


def fake_node(root: Path, style: str) -> None:
    """Our pod: pause, a shell running torchrun with a worker, a sidecar; and another pod."""
    add_process(root, 1, cgroup="0::/init.scope\n", name="systemd", ppid=0)
    add_process(
        root, 900, cgroup="0::/system.slice/containerd.service\n", name="containerd-shim", ppid=1
    )
    add_process(root, 1001, cgroup=cgroup_text(style, UID, "aaa111"), name="pause", ppid=900)
    add_process(root, 1002, cgroup=cgroup_text(style, UID, "bbb222"), name="sh", ppid=900)
    add_process(root, 1003, cgroup=cgroup_text(style, UID, "bbb222"), name="torchrun", ppid=1002)
    add_process(root, 1004, cgroup=cgroup_text(style, UID, "bbb222"), name="python", ppid=1003)
    add_process(root, 1005, cgroup=cgroup_text(style, UID, "ccc333"), name="sidecar", ppid=900)
    add_process(root, 2001, cgroup=cgroup_text(style, OTHER_UID, "ddd444"), name="python", ppid=900)
    (root / "self").mkdir()  # not a pid: ignored


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []

    def __call__(self, pid: int, signum: int) -> bool:
        self.sent.append((pid, signum))
        return True


@pytest.mark.parametrize("style", STYLES)
def test_the_pod_is_found_by_uid_in_every_cgroup_style(tmp_path: Path, style: str) -> None:
    fake_node(tmp_path, style)
    found = procfs.pod_processes(tmp_path, UID)
    assert sorted(p.pid for p in found) == [1001, 1002, 1003, 1004, 1005]
    work = procfs.workload(found)
    assert sorted(p.pid for p in work) == [1002, 1003, 1004, 1005]  # no pause
    assert sorted(p.pid for p in procfs.container_mains(work)) == [1002, 1005]


@pytest.mark.parametrize("style", STYLES)
async def test_signal_reaches_each_containers_main_process_and_kill_all(
    tmp_path: Path, style: str
) -> None:
    fake_node(tmp_path, style)
    sent = Recorder()
    signaller = HostPidSignaller(
        StaticUidResolver({POD.key: UID, OTHER.key: OTHER_UID}), proc_root=tmp_path, send=sent
    )
    await signaller.signal([POD], grace_s=30)
    assert sent.sent == [(1002, signal.SIGTERM), (1005, signal.SIGTERM)]
    sent.sent.clear()
    await signaller.kill([POD])
    assert sorted(sent.sent) == [(pid, signal.SIGKILL) for pid in (1002, 1003, 1004, 1005)]
    assert await signaller.alive([POD])


async def test_a_pod_whose_processes_are_zombies_or_unknown_is_not_alive(tmp_path: Path) -> None:
    add_process(tmp_path, 10, cgroup=cgroup_text("v2-cgroupfs", UID, "p"), name="pause", ppid=1)
    add_process(
        tmp_path,
        11,
        cgroup=cgroup_text("v2-cgroupfs", UID, "c"),
        name="python",
        ppid=1,
        state="Z (zombie)",
    )
    signaller = HostPidSignaller(
        StaticUidResolver({POD.key: UID}), proc_root=tmp_path, send=Recorder()
    )
    assert not await signaller.alive([POD])
    assert not await signaller.alive([PodRef("team", "no-such-pod")])


def test_a_uid_that_only_prefixes_another_does_not_match() -> None:
    text = cgroup_text("v2-cgroupfs", UID + "ff", "c")
    assert procfs.container_path(text, UID) is None


async def test_a_real_process_is_signalled_through_a_faked_cgroup(tmp_path: Path) -> None:
    """A real child whose /proc entry is faked for the cgroup and real for its state."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"],
    )
    try:
        entry = tmp_path / str(child.pid)
        entry.mkdir()
        (entry / "cgroup").write_text(cgroup_text("v2-systemd", UID, "abc"))
        (entry / "status").symlink_to(f"/proc/{child.pid}/status")
        signaller = HostPidSignaller(StaticUidResolver({POD.key: UID}), proc_root=tmp_path)
        assert await signaller.main_pids(POD) == [child.pid]
        assert await signaller.alive([POD])
        await signaller.signal([POD], grace_s=5)
        assert child.wait(timeout=10) == -signal.SIGTERM
        # Reaped: its real /proc entry is gone, so the faked one reads as gone too.
        assert not await signaller.alive([POD])
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_is_running_tells_zombies_from_live_processes() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    # Until reaped, the exited child is a zombie: not running.
    while procfs.is_running(child.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not procfs.is_running(child.pid)
    child.wait()
    assert not procfs.is_running(child.pid)
    assert procfs.is_running(os.getpid())
