"""The live decider gives way to a production job with an SLA (issue 10).

A Volcano Job annotated ``gpuyield.io/sla-seconds`` has a budget from its
creation: research jobs in their cooldown may yield for it (last), its demand
skips the retry backoff, and once it has waited ``sla_risk_share`` of its
budget one ``sla-at-risk`` alert says so.
"""

from __future__ import annotations

import pytest
from cluster_objects import T0, pod, pod_group
from harness import NOW, Controller, production_demand, shared_pool

from gpuyield.agents.controller.config import ControllerConfig
from gpuyield.agents.controller.kube_facts import FactError, volcano_job_record
from gpuyield.schemas import Policy
from gpuyield.schemas import kube_objects as k
from gpuyield.schemas.labels import SLA_ANNOTATION
from gpuyield.schemas.messages import AlertKind, AlertState

HOUR = 3600.0
# Research has run 6 h (since T0); a cooldown of 8 h spares it from every ordinary demand.
LONG_COOLDOWN = ControllerConfig(policy=Policy(cooldown_s=8 * HOUR))


def fine_tune_with_sla(c: Controller, sla_s: str | None, pods: int = 1) -> None:
    """The fine-tune's Volcano Job, created at T0 (6 h before NOW), then its demand."""
    annotations = {SLA_ANNOTATION: sla_s} if sla_s is not None else None
    c.add(
        k.a_volcano_job(
            "ft-llama",
            namespace="prod",
            queue="production",
            replicas=pods,
            phase="Pending",
            annotations=annotations,
            created_at=T0,
        ),
        NOW - 30,
    )
    production_demand(c, pods=pods)


def pool(config: ControllerConfig = LONG_COOLDOWN) -> Controller:
    c = shared_pool()
    c.config = config
    return c


def test_without_an_sla_the_cooldown_spares_every_victim() -> None:
    c = pool()
    fine_tune_with_sla(c, None)
    assert c.decisions == []


def test_a_job_with_an_sla_gets_its_victims_despite_their_cooldown_without_an_alert() -> None:
    c = pool()
    fine_tune_with_sla(c, str(100 * HOUR))  # 6 h waited of 100 h: 6 % < 10 %, not at risk
    (decision,) = c.decisions
    assert [v.job for v in decision.plan.victims] == ["research/sweep-0"]
    assert "it has an SLA: cooldowns and eviction limits give way" in decision.plan.explanation[0]
    assert [a for a in c.alerts if a.kind is AlertKind.SLA_AT_RISK] == []


def test_a_job_at_risk_gets_its_victims_and_says_why() -> None:
    c = pool()
    fine_tune_with_sla(c, str(10 * HOUR))  # 6 h waited of 10 h: 60 %
    (decision,) = c.decisions
    assert [v.job for v in decision.plan.victims] == ["research/sweep-0"]
    assert "SLA at risk: waited 21600 s of its 36000 s budget" in decision.plan.explanation[0]
    assert decision.snapshot.jobs  # the record replays: its snapshot carries the deadline
    (preemptor,) = (j for j in decision.snapshot.jobs if j.name == "prod/ft-llama")
    assert preemptor.sla_deadline == T0 + 10 * HOUR


def test_the_incident_raises_one_alert_naming_the_budget() -> None:
    c = pool()
    fine_tune_with_sla(c, str(10 * HOUR))
    c.tick(NOW + 60)
    c.tick(NOW + 120)
    (alert,) = [a for a in c.alerts if a.kind is AlertKind.SLA_AT_RISK]
    assert alert.job == "prod/ft-llama"
    assert alert.details["budget_s"] == 10 * HOUR


def test_a_job_with_an_sla_skips_the_retry_backoff() -> None:
    # Five 8-GPU pods on 32 GPUs: no plan, whatever is evicted, so rounds keep failing. A
    # demand without an SLA backs off (60 s, 120 s, ...); one with an SLA is planned every 10 s.
    config = LONG_COOLDOWN.model_copy(
        update={"demand_retry_s": 60.0, "demand_backoff_max_s": 3600.0, "sla_retry_s": 10.0}
    )
    rounds = {}
    for sla in (None, str(10 * HOUR)):
        c = pool(config)
        fine_tune_with_sla(c, sla, pods=5)
        for t in range(20, 600, 20):
            c.tick(NOW + t)
        rounds[sla] = c.records["demand/prod/ft-llama"]["failures"]
    assert rounds[None] < rounds[str(10 * HOUR)]


@pytest.mark.parametrize("bad", ["soon", "-5", "0", "nan", "inf", str(400 * 86400)])
def test_an_unreadable_sla_names_the_annotation(bad: str) -> None:
    job = k.a_volcano_job("ft", namespace="prod", annotations={SLA_ANNOTATION: bad})
    with pytest.raises(FactError, match=r"prod/ft: annotation gpuyield\.io/sla-seconds"):
        volcano_job_record(job)


def test_the_alert_is_resolved_once_the_job_is_placed() -> None:
    c = pool()
    fine_tune_with_sla(c, str(10 * HOUR))
    placed = pod("ft-llama", 0, namespace="prod", priority=1000, node="gpu-00")
    c.change(placed, NOW + 120)
    c.change(pod_group("ft-llama", namespace="prod", queue="production"), NOW + 120)
    c.tick(NOW + 180)
    states = [a.state for a in c.alerts if a.kind is AlertKind.SLA_AT_RISK]
    assert states == [AlertState.FIRING, AlertState.RESOLVED]


def test_a_job_past_its_own_sla_budget_raises_pending_past_sla() -> None:
    """No global pending_sla_s is set: the job's own annotation is its budget."""
    c = pool()
    fine_tune_with_sla(c, str(5 * HOUR))  # created 6 h ago: past its 5 h budget
    c.tick(NOW + 60)
    (alert,) = [a for a in c.alerts if a.kind is AlertKind.PENDING_PAST_SLA]
    assert alert.details["sla_s"] == 5 * HOUR
