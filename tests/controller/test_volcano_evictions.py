"""volcano-evicting: pods a scheduler evicted beside gpuyield, read from the marks Volcano's
evictor writes on its victims, raise one incident that is resolved once they stop."""

from __future__ import annotations

import copy

from cluster_objects import Obj, pod, rfc3339
from harness import NOW, Controller, production_demand, shared_pool
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyield.agents.controller import volcano_evictions
from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.kube_facts import eviction_mark, pod_record
from gpuyield.agents.controller.records import PodRecord
from gpuyield.schemas.messages import Alert, AlertKind, AlertState

QUIET_S = ControllerConfig().volcano_evicting_quiet_s


def evicted_by_volcano(obj: Obj, action: str = "reclaim", *, release: str = "1.13") -> Obj:
    """``obj`` as Volcano's ``defaultEvictor.Evict`` leaves it before its DELETE: Ready
    False for reason Evict and, from 1.13, DisruptionTarget PreemptionByScheduler."""
    marked = copy.deepcopy(obj)
    conditions = [c for c in marked["status"]["conditions"] if c["type"] != "Ready"]
    conditions.append(
        {
            "type": "Ready",
            "status": "False",
            "reason": "Evict",
            "message": f"Pod is evicted, because of {action}",
            "lastTransitionTime": rfc3339(NOW),
        }
    )
    if release >= "1.13":
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "volcano: preempting to accommodate a higher priority pod",
                "lastTransitionTime": rfc3339(NOW),
            }
        )
    marked["status"]["conditions"] = conditions
    return marked


def kubelet_stopped(obj: Obj) -> Obj:
    """The kubelet's next status: it owns Ready and rewrites it; DisruptionTarget stays."""
    later = copy.deepcopy(obj)
    for condition in later["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(reason="ContainersNotReady", message="containers not ready")
    later["metadata"]["deletionTimestamp"] = rfc3339(NOW + 1)
    return later


def with_condition(obj: Obj, kind: str, reason: str, message: str = "") -> Obj:
    marked = copy.deepcopy(obj)
    marked["status"]["conditions"].append(
        {"type": kind, "status": "True", "reason": reason, "message": message}
    )
    return marked


def of(c: Controller) -> list[Alert]:
    return [a for a in c.alerts if a.kind is AlertKind.VOLCANO_EVICTING]


SWEEP_0 = pod("sweep-0", 0, namespace="research", node="gpu-00")
SWEEP_1 = pod("sweep-1", 0, namespace="research", node="gpu-02")


# -- the marks ---------------------------------------------------------------------------


def test_volcanos_evict_condition_names_its_action() -> None:
    mark = eviction_mark(evicted_by_volcano(SWEEP_0, "reclaim", release="1.9"))
    assert mark == {"scheduler": "volcano", "action": "reclaim"}


def test_a_disruption_target_alone_names_the_scheduler_that_preempted() -> None:
    marked = with_condition(
        SWEEP_0,
        "DisruptionTarget",
        "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority pod",
    )
    assert eviction_mark(marked) == {"scheduler": "default-scheduler", "action": "preempt"}


def test_evictions_gpuyield_or_the_kubelet_make_carry_no_scheduler_mark() -> None:
    for reason in ("EvictionByEvictionAPI", "TerminationByKubelet", "DeletionByTaintManager"):
        assert eviction_mark(with_condition(SWEEP_0, "DisruptionTarget", reason)) is None
    assert eviction_mark(kubelet_stopped(SWEEP_0)) is None
    assert eviction_mark(SWEEP_0) is None


def test_the_pod_record_keeps_the_mark() -> None:
    record = PodRecord.model_validate(pod_record(evicted_by_volcano(SWEEP_0, "preempt")))
    assert record.evicted is not None
    assert (record.evicted.scheduler, record.evicted.action) == ("volcano", "preempt")


# -- counting, purely ----------------------------------------------------------------------


def record_of(obj: Obj) -> PodRecord:
    return PodRecord.model_validate(pod_record(obj))


def lifecycle(index: int, evicted: bool, missed: bool, repeats: int) -> list[tuple[str, Obj]]:
    """One pod's watch events: created, then (if evicted) marked ``repeats`` times and
    stopped by the kubelet (or, ``missed``, none of that seen), then deleted."""
    plain = pod("sweep-0", index, namespace="research", node="gpu-00")
    if not evicted:
        return [("seen", plain), ("seen", plain), ("deleted", plain)]
    marked = evicted_by_volcano(plain)
    shown = [] if missed else [("seen", marked)] * repeats + [("seen", kubelet_stopped(marked))]
    return [("seen", plain), *shown, ("deleted", kubelet_stopped(marked))]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_each_evicted_pod_counts_once_whatever_the_interleaving(data: st.DataObject) -> None:
    pods = data.draw(
        st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(1, 3)), max_size=5)
    )
    queues = [lifecycle(i, *p) for i, p in enumerate(pods)]
    order = data.draw(st.permutations([i for i, q in enumerate(queues) for _ in q]))
    records: dict[int, PodRecord] = {}
    incident = None
    for index in order:
        what, obj = queues[index].pop(0)
        previous = records.get(index)
        if what == "deleted":
            current = volcano_evictions.deleted(previous, obj)
            records.pop(index, None)
        else:
            current = records[index] = record_of(obj)
        seen = volcano_evictions.on_pod(previous, current, f"p{index}", incident, NOW, QUIET_S)
        if seen is not None:
            incident = seen[0]
    evicted = sum(1 for p in pods if p[0])
    assert (incident.pods if incident is not None else 0) == evicted


def test_a_new_incident_opens_only_after_a_quiet_period() -> None:
    mark = record_of(evicted_by_volcano(SWEEP_0))
    first = volcano_evictions.on_pod(None, mark, "a", None, NOW, QUIET_S)
    assert first is not None
    assert first[1] is not None
    more = volcano_evictions.on_pod(None, mark, "b", first[0], NOW + QUIET_S - 1, QUIET_S)
    assert more is not None
    assert more[1] is None
    assert (more[0].since, more[0].pods) == (NOW, 2)
    later = volcano_evictions.on_pod(None, mark, "c", more[0], NOW + 2 * QUIET_S, QUIET_S)
    assert later is not None
    assert later[1] is not None
    assert (later[0].since, later[0].pods) == (NOW + 2 * QUIET_S, 1)


# -- through the decider -------------------------------------------------------------------


def test_a_pod_volcano_reclaims_raises_one_critical_alert_naming_it() -> None:
    c = shared_pool()
    marked = evicted_by_volcano(SWEEP_0, "reclaim")
    c.change(marked, NOW)
    c.change(kubelet_stopped(marked), NOW + 1)
    c.delete(kubelet_stopped(marked), NOW + 30)
    (alert,) = of(c)
    assert (alert.severity, alert.job, alert.state) == (
        "critical",
        "research/sweep-0",
        AlertState.FIRING,
    )
    assert alert.details == {
        "scheduler": "volcano",
        "action": "reclaim",
        "pod": "research/sweep-0-worker-0",
        "node": "gpu-00",
        "gpus": 8,
    }


def test_an_eviction_seen_only_in_the_deletion_still_counts() -> None:
    """A relist after an outage may show only the DELETED object, with its marks."""
    c = shared_pool()
    c.delete(kubelet_stopped(evicted_by_volcano(SWEEP_0, "preempt")), NOW)
    assert [a.details["action"] for a in of(c)] == ["preempt"]


def test_evictions_while_the_incident_is_open_raise_nothing_more() -> None:
    c = shared_pool()
    c.change(evicted_by_volcano(SWEEP_0), NOW)
    c.change(evicted_by_volcano(SWEEP_1, "preempt"), NOW + 600)
    c.tick(NOW + 601)
    assert len(of(c)) == 1
    incident = c.records["volcano-evicting"]
    assert incident["pods"] == 2
    assert incident["jobs"] == ["research/sweep-0", "research/sweep-1"]
    assert incident["actions"] == ["preempt", "reclaim"]


def test_the_incident_is_resolved_once_quiet_and_a_later_eviction_is_a_new_one() -> None:
    c = shared_pool()
    c.change(evicted_by_volcano(SWEEP_0), NOW)
    c.tick(NOW + QUIET_S - 1)
    assert [a.state for a in of(c)] == [AlertState.FIRING]
    c.tick(NOW + QUIET_S)
    c.tick(NOW + QUIET_S + 15)
    c.change(evicted_by_volcano(SWEEP_1), NOW + QUIET_S + 30)
    firing, resolved, again = of(c)
    assert (resolved.alert_id, resolved.state) == (firing.alert_id, AlertState.RESOLVED)
    assert (again.state, again.job) == (AlertState.FIRING, "research/sweep-1")
    assert again.alert_id != firing.alert_id


def test_a_new_incident_in_the_step_that_ends_the_old_one_still_resolves_it() -> None:
    c = shared_pool()
    c.change(evicted_by_volcano(SWEEP_0), NOW)
    c.tick(NOW + QUIET_S - 1)  # still open
    c.change(evicted_by_volcano(SWEEP_1), NOW + QUIET_S + 5)  # before the next tick
    assert [a.state for a in of(c)] == [
        AlertState.FIRING,
        AlertState.FIRING,
        AlertState.RESOLVED,
    ]
    assert of(c)[2].alert_id == of(c)[0].alert_id


def test_gpuyields_own_yield_raises_no_volcano_evicting() -> None:
    c = shared_pool()
    production_demand(c)
    assert c.commands
    for command in c.commands:  # the node agents evict through the Eviction API
        job = command.job.split("/")[1]
        k = int(command.node[-2:]) % 2  # sweep-j runs pod k on gpu-(2j + k)
        victim = pod(job, k, namespace="research", node=command.node)
        evicting = with_condition(victim, "DisruptionTarget", "EvictionByEvictionAPI")
        c.change(kubelet_stopped(evicting), NOW + 2)
        c.delete(kubelet_stopped(evicting), NOW + 20)
    c.tick(NOW + 30)
    assert of(c) == []
    assert "volcano-evicting" not in c.records


def test_a_replay_of_the_same_events_raises_the_same_alert_ids() -> None:
    def run() -> list[str]:
        c = shared_pool()
        c.change(evicted_by_volcano(SWEEP_0), NOW)
        c.tick(NOW + QUIET_S + 1)
        return [f"{a.alert_id}:{a.state.value}" for a in of(c)]

    assert run() == run()
