"""gpuyield doctor on the command line: a table or JSON lines, exit 0 healthy, 1 findings,
2 unreadable input (one line, no traceback); from a dump, or live from the API server (the
repo's fake, behind a real socket)."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.kube_api import FakeKubeApi, write_kubeconfig
from typer.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).parent / "controller"))

from test_doctor import GOOD_CONF, healthy

from gpuyield.cli import app

RUNNER = CliRunner()


def dump(tmp_path: Path, objects: list[dict[str, object]]) -> str:
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def broken() -> list[dict[str, object]]:
    objects = healthy()
    objects[6]["spec"]["policies"] = [{"event": "PodEvicted", "action": "RestartJob"}]  # type: ignore[index]
    return objects


def test_a_healthy_dump_exits_0_and_says_so(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["doctor", dump(tmp_path, healthy())])
    assert result.exit_code == 0, result.output
    assert "nothing wrong" in result.stdout


def test_findings_exit_1_with_a_table_naming_the_check_and_the_fix(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["doctor", dump(tmp_path, broken())])
    assert result.exit_code == 1
    assert "restart-on-eviction" in result.stdout
    assert "research/sweep" in result.stdout


def test_json_gives_one_finding_per_line_with_its_fields(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["doctor", "--json", dump(tmp_path, broken())])
    assert result.exit_code == 1
    (line,) = result.stdout.splitlines()
    assert json.loads(line) == {
        "check": "restart-on-eviction",
        "severity": "critical",
        "object": "Job/research/sweep",
        "message": json.loads(line)["message"],
        "fix": json.loads(line)["fix"],
    }


def test_the_dump_may_come_on_stdin(tmp_path: Path) -> None:
    text = json.dumps({"kind": "List", "items": broken()})
    result = RUNNER.invoke(app, ["doctor", "--json", "-"], input=text)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["check"] == "restart-on-eviction"


def test_a_scheduler_conf_beside_the_dump_is_checked(tmp_path: Path) -> None:
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text(GOOD_CONF.replace("enqueue, allocate", "enqueue, allocate, preempt"))
    objects = healthy()[:-1]
    result = RUNNER.invoke(
        app, ["doctor", "--json", "--scheduler-conf", str(conf), dump(tmp_path, objects)]
    )
    assert result.exit_code == 1
    assert json.loads(result.stdout)["check"] == "volcano-preempt-enabled"


def test_input_that_is_not_json_exits_2_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text("items:\n- kind: Node\n")
    result = RUNNER.invoke(app, ["doctor", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "not JSON" in result.stderr
    assert "-o json" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_file_or_a_document_without_items_exits_2(tmp_path: Path) -> None:
    missing = RUNNER.invoke(app, ["doctor", str(tmp_path / "nope.json")])
    assert (missing.exit_code, missing.stderr) == (
        2,
        f"gpuyield: {tmp_path / 'nope.json'}: no such file\n",
    )
    path = tmp_path / "odd.json"
    path.write_text('{"hello": 1}')
    odd = RUNNER.invoke(app, ["doctor", str(path)])
    assert odd.exit_code == 2
    assert "no items" in odd.stderr


# -- the live cluster -------------------------------------------------------------------


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKubeApi]:
    """An API server holding the healthy cluster (its scheduler ConfigMap included)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in ("GPUYIELD_KUBECONFIG", "GPUYIELD_KUBE_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    with FakeKubeApi() as api:
        for obj in healthy():
            api.create(obj)
        yield api


def live(api: FakeKubeApi, tmp_path: Path, *args: str) -> Result:
    config = api.write_kubeconfig(tmp_path / "kubeconfig")
    return RUNNER.invoke(app, ["doctor", "--kubeconfig", str(config), *args])


def test_without_a_dump_the_live_cluster_is_read_and_a_healthy_one_exits_0(
    cluster: FakeKubeApi, tmp_path: Path
) -> None:
    result = live(cluster, tmp_path)
    assert result.exit_code == 0, result.output
    listed = len(healthy()) - 1  # the scheduler ConfigMap is read apart, not listed
    assert f"{listed} objects checked ({cluster.url}): nothing wrong" in result.stdout
    assert result.stderr == ""


def test_the_live_cluster_is_listed_in_pages_and_the_scheduler_configmap_read(
    cluster: FakeKubeApi, tmp_path: Path
) -> None:
    live(cluster, tmp_path)
    calls = [(r.verb, r.path) for r in cluster.requests if r.verb != "discovery"]
    assert calls == [
        ("list", "/api/v1/nodes"),
        ("list", "/api/v1/pods"),
        ("list", "/apis/batch.volcano.sh/v1alpha1/jobs"),
        ("list", "/apis/scheduling.volcano.sh/v1beta1/podgroups"),
        ("list", "/apis/scheduling.volcano.sh/v1beta1/queues"),
        ("get", "/api/v1/namespaces/volcano-system/configmaps/volcano-scheduler-configmap"),
    ]
    assert all(r.query.get("limit") == "500" for r in cluster.requests if r.verb == "list")


def test_live_findings_are_the_ones_the_same_objects_give_as_a_dump(
    cluster: FakeKubeApi, tmp_path: Path
) -> None:
    job = next(o for o in broken() if o["kind"] == "Job")
    cluster.replace(job)
    conf = next(o for o in healthy() if o["kind"] == "ConfigMap")
    conf["data"]["volcano-scheduler.conf"] = GOOD_CONF.replace("allocate", "allocate, reclaim")  # type: ignore[index]
    cluster.replace(conf)

    from_api = live(cluster, tmp_path, "--json")
    from_dump = RUNNER.invoke(app, ["doctor", "--json", dump(tmp_path, [*broken()[:-1], conf])])

    assert from_api.exit_code == from_dump.exit_code == 1
    assert [json.loads(line) for line in from_api.stdout.splitlines()] == [
        json.loads(line) for line in from_dump.stdout.splitlines()
    ]
    assert [json.loads(line)["check"] for line in from_api.stdout.splitlines()] == [
        "restart-on-eviction",
        "volcano-preempt-enabled",
    ]


def test_a_scheduler_configmap_rbac_hides_is_said_on_stderr_and_the_rest_checked(
    cluster: FakeKubeApi, tmp_path: Path
) -> None:
    cluster.forbid("get", "configmaps", user="gpuyield")
    result = live(cluster, tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("gpuyield: volcano-preempt-enabled not checked: cannot read")
    assert "(forbidden): HTTP 403 Forbidden" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_list_rbac_denies_exits_2_with_rbacs_message_in_one_line(
    cluster: FakeKubeApi, tmp_path: Path
) -> None:
    cluster.forbid("list", "pods", user="gpuyield")
    result = live(cluster, tmp_path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"gpuyield: cannot list pods at {cluster.url}: HTTP 403")
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_a_cluster_without_volcano_exits_2_saying_so(cluster: FakeKubeApi, tmp_path: Path) -> None:
    cluster.uninstall("batch.volcano.sh")
    result = live(cluster, tmp_path)
    assert result.exit_code == 2
    assert result.stderr == (
        f"gpuyield: cannot list jobs.batch.volcano.sh at {cluster.url}: HTTP 404 Not Found: "
        "the server could not find the requested resource (is Volcano installed? the API "
        "serves no batch.volcano.sh/v1alpha1)\n"
    )


def test_an_api_server_that_cannot_be_reached_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    result = RUNNER.invoke(app, ["doctor", "--kubeconfig", str(config)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        f"gpuyield: cannot reach the Kubernetes API at http://127.0.0.1:{port}: "
    )
    assert "Connection refused" in result.stderr
    assert result.stderr.count("\n") == 1


def test_no_kubernetes_configuration_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = RUNNER.invoke(app, ["doctor", "--kubeconfig", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert result.stderr.startswith("gpuyield: cannot load the Kubernetes configuration: ")
    assert result.stderr.count("\n") == 1


def test_a_dump_and_a_kubeconfig_together_are_refused(tmp_path: Path) -> None:
    result = RUNNER.invoke(
        app, ["doctor", dump(tmp_path, healthy()), "--kubeconfig", str(tmp_path / "k")]
    )
    assert result.exit_code == 2
    assert "give them or a dump" in result.stderr
