"""Volcano's scheduler configuration as Volcano reads it, and what gpuyield finds wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyield.agents.controller.volcano_conf import (
    EVICTING_ACTIONS,
    GPUYIELD_TIERS,
    REGISTERED_ACTIONS,
    FindingKind,
    SchedulerConfError,
    check_scheduler_conf,
    parse_scheduler_conf,
    preempting_alert,
)
from gpuyield.schemas.messages import AlertKind

GPUYIELD_CONF = Path(__file__).parents[2] / "deploy" / "volcano" / "volcano-scheduler.conf"

# Volcano's CI configuration (installer/helm/chart/volcano/config/volcano-scheduler-ci.conf),
# the stock file with preempt and reclaim on.
VOLCANO_CI_CONF = """\
actions: "enqueue, allocate, backfill, reclaim, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
  - name: sla
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
  - name: network-topology-aware
"""

HELM_DEFAULT_CONF = VOLCANO_CI_CONF.replace(", reclaim, preempt", "")


def _kinds(text: str) -> list[FindingKind]:
    return [f.kind for f in check_scheduler_conf(parse_scheduler_conf(text))]


def test_gpuyields_configuration_has_no_findings() -> None:
    conf = parse_scheduler_conf(GPUYIELD_CONF.read_text(encoding="utf-8"))

    assert conf.actions == ("enqueue", "allocate", "backfill")
    assert tuple(tier.names for tier in conf.tiers) == GPUYIELD_TIERS
    assert check_scheduler_conf(conf) == ()


def test_the_helm_charts_default_has_no_findings() -> None:
    assert _kinds(HELM_DEFAULT_CONF) == []


def test_preempt_and_reclaim_are_one_finding_naming_both_in_order() -> None:
    conf = parse_scheduler_conf(VOLCANO_CI_CONF)

    (finding,) = check_scheduler_conf(conf)

    assert finding.kind is FindingKind.EVICTING_ACTIONS
    assert finding.names == ("reclaim", "preempt")
    assert finding.alerts
    assert "`reclaim` and `preempt`" in finding.message


@pytest.mark.parametrize("action", ["preempt", "reclaim", "gangpreempt", "gangreclaim"])
def test_every_evicting_action_alone_is_found(action: str) -> None:
    (finding,) = check_scheduler_conf(
        parse_scheduler_conf(HELM_DEFAULT_CONF.replace("backfill", f"backfill, {action}"))
    )

    assert finding.names == (action,)


def test_action_names_are_trimmed_as_volcano_trims_them() -> None:
    conf = parse_scheduler_conf('actions: "  enqueue,allocate ,  preempt  "')

    assert conf.actions == ("enqueue", "allocate", "preempt")


def test_an_action_volcano_does_not_register_makes_the_whole_file_invalid() -> None:
    # Issue volcano-sh/volcano#5827: `gangPreempt` made Volcano fall back to its default.
    with pytest.raises(SchedulerConfError, match=r"no action 'gangPreempt'.*'gangpreempt'"):
        parse_scheduler_conf('actions: "enqueue, allocate, gangPreempt"')


@pytest.mark.parametrize(
    "text",
    ['actions: "enqueue, allocate,"', "tiers: []", 'actions: ""', ""],
    ids=["trailing comma", "no actions key", "empty string", "empty file"],
)
def test_an_empty_action_name_is_invalid(text: str) -> None:
    with pytest.raises(SchedulerConfError, match="empty action name"):
        parse_scheduler_conf(text)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("actions: [enqueue, allocate]", "one string of comma-separated names"),
        ("- enqueue", "not a mapping"),
        ('actions: "enqueue"\ntiers: {plugins: []}', "tiers must be a list"),
        ('actions: "enqueue"\ntiers: [{plugins: [{enablePreemptable: false}]}]', "has no name"),
        ('actions: "enqueue"\ntiers: [{plugins: priority}]', r"tiers\[0\] must be a mapping"),
        ('actions: "enqueue\n  tiers: [', "not YAML"),
    ],
)
def test_malformed_files_say_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(SchedulerConfError, match=complaint):
        parse_scheduler_conf(text)


def test_fields_volcano_does_not_know_are_ignored_like_the_go_decoder_does() -> None:
    conf = parse_scheduler_conf(
        'actions: "enqueue, allocate"\nsomething: 1\n'
        "tiers:\n- plugins:\n  - name: gang\n    enablePreemptable: false\n    colour: red\n"
    )

    assert conf.tiers[0].plugins[0].switches == {"enablePreemptable": False}


def test_no_enqueue_is_a_finding_but_not_an_alert() -> None:
    (finding,) = check_scheduler_conf(
        parse_scheduler_conf(HELM_DEFAULT_CONF.replace("enqueue, ", ""))
    )

    assert finding.kind is FindingKind.NO_ENQUEUE
    assert not finding.alerts


def test_missing_plugins_are_named_with_what_they_are_for() -> None:
    text = 'actions: "enqueue, allocate"\ntiers:\n- plugins: [{name: priority}, {name: drf}]'

    (finding,) = check_scheduler_conf(parse_scheduler_conf(text))

    assert finding.kind is FindingKind.MISSING_PLUGINS
    assert set(finding.names) == {"gang", "proportion", "predicates"}
    assert "gang (gangs are placed all-or-nothing" in finding.message


def test_the_alert_is_critical_and_names_the_actions_and_the_configmap() -> None:
    (finding,) = check_scheduler_conf(parse_scheduler_conf(VOLCANO_CI_CONF))

    alert = preempting_alert(
        finding,
        configmap="volcano-system/volcano-scheduler-configmap",
        key="volcano-scheduler.conf",
        resource_version="48213",
        cluster_id="gpu-west",
        raised_at=1_790_000_000.0,
    )

    assert alert.kind is AlertKind.VOLCANO_PREEMPTING
    assert alert.severity == "critical"
    assert alert.details["actions"] == ["reclaim", "preempt"]
    assert alert.details["configmap"] == "volcano-system/volcano-scheduler-configmap"
    assert alert.details["resource_version"] == "48213"
    assert alert.message.startswith("cluster gpu-west: ")


def test_the_alert_id_is_the_same_for_the_same_configuration_and_new_for_a_change() -> None:
    (finding,) = check_scheduler_conf(parse_scheduler_conf(VOLCANO_CI_CONF))

    def alert_id(version: str, at: float) -> str:
        return preempting_alert(
            finding,
            configmap="volcano-system/volcano-scheduler-configmap",
            key="volcano-scheduler.conf",
            resource_version=version,
            cluster_id="gpu-west",
            raised_at=at,
        ).alert_id

    assert alert_id("48213", 1.0) == alert_id("48213", 2.0)  # another replica, a restart
    assert alert_id("48213", 1.0) != alert_id("48299", 1.0)


def test_a_finding_that_is_not_about_evictions_is_no_alert() -> None:
    (finding,) = check_scheduler_conf(parse_scheduler_conf('actions: "allocate"'))[:1]

    with pytest.raises(ValueError, match="not an alert"):
        preempting_alert(
            finding, configmap="a/b", key="k", resource_version="1", cluster_id="c", raised_at=0
        )


@given(st.lists(st.sampled_from(sorted(REGISTERED_ACTIONS)), min_size=1, max_size=8))
def test_an_alert_exactly_when_an_evicting_action_is_configured(actions: list[str]) -> None:
    findings = check_scheduler_conf(parse_scheduler_conf(f'actions: "{", ".join(actions)}"'))

    alerting = [f for f in findings if f.alerts]
    evicting = [a for a in actions if a in EVICTING_ACTIONS]
    assert bool(alerting) == bool(evicting)
    if alerting:
        assert alerting[0].names == tuple(evicting)
