"""Properties of the decider over random message sequences (hypothesis).

Whatever Volcano reports, in whatever order, and however often Kafka
redelivers it: a pod is never asked to yield twice while its first yield may
still be under way, every command names pods its victim holds on that node,
and the same messages always give the same decisions.

"May still be under way": until the pod is gone, or until its command's
deadline, the acknowledgement slack and the leaving limit have all passed.
After that the first yield is presumed lost (its node agent gone) and asking
again is the recovery, not a repeat.
"""

from __future__ import annotations

from typing import Any

from cluster_objects import pod, pod_group
from harness import NOW, Controller, production_demand, shared_pool
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyield.agents.controller.decider import LEAVING_LIMIT_S
from gpuyield.schemas.messages import YieldAck, YieldOutcome

Op = tuple[str, int, int]

ops = st.lists(
    st.tuples(
        st.sampled_from(["demand", "ack", "gone", "tick", "again", "placed"]),
        st.integers(0, 5),
        st.integers(1, 400),
    ),
    min_size=1,
    max_size=25,
)


def run(script: list[Op]) -> Controller:
    """Play ``script`` against a fresh 4-node pool, checking the invariants after each step."""
    c = shared_pool()
    t = NOW
    last: Any = None
    in_flight: dict[str, float] = {}  # pod -> when its yield may be presumed lost
    config = c.config
    for kind, n, dt in script:
        t += dt
        before = len(c.commands)
        if kind == "demand":
            production_demand(c, f"ft-{n}", pods=1 + n % 2, at=t)
        elif kind == "ack" and c.commands:
            command = c.commands[n % len(c.commands)]
            last = YieldAck(command_id=command.command_id, decision_id=command.decision_id,
                            node=command.node, job=command.job,
                            outcome=YieldOutcome.CHECKPOINTED, acked_at=t)  # fmt: skip
            c.feed(last, origin=f"acks/0/{len(c.commands)}-{n}")
        elif kind == "gone" and c.commands:
            command = c.commands[n % len(c.commands)]
            namespace = command.job.split("/")[0]
            job = command.job.split("/")[1]
            for name in command.pods:
                index = int(name.rsplit("-", 1)[1])
                c.delete(pod(job, index, namespace=namespace, node=command.node), t)
                in_flight.pop(name, None)
        elif kind == "placed":
            c.change(pod_group(f"ft-{n}", namespace="prod", queue="production"), t)
        elif kind == "again" and last is not None:
            c.feed(last, origin="redelivered/0/0")
        else:
            c.tick(t)
        for command in c.commands[before:]:
            for name in command.pods:
                presumed_lost = in_flight.get(name, float("-inf"))
                assert t > presumed_lost, f"{name} asked to yield twice"
                in_flight[name] = command.deadline + config.ack_slack_s + LEAVING_LIMIT_S
        check_commands_match_their_decisions(c)
    return c


def check_commands_match_their_decisions(c: Controller) -> None:
    by_id = {d.decision_id: d for d in c.decisions}
    for command in c.commands:
        decision = by_id[command.decision_id]
        if not decision.plan.victims:
            continue  # a resume
        victim = next(v for v in decision.plan.victims if v.job == command.job)
        job = next(j for j in decision.snapshot.jobs if j.name == command.job)
        placed = {p.name.rsplit("/", 1)[-1]: p.node for p in job.pods}
        for name in command.pods:
            assert placed[name] == command.node
            assert any(p.rsplit("/", 1)[-1] == name for p in victim.pods)


@settings(max_examples=60)
@given(ops)
def test_no_pod_yields_twice_and_every_command_matches_its_decision(script: list[Op]) -> None:
    run(script)


@settings(max_examples=30)
@given(ops)
def test_the_same_messages_give_the_same_decisions(script: list[Op]) -> None:
    first, second = run(script), run(script)
    assert [d.model_dump_json() for d in first.decisions] == [
        d.model_dump_json() for d in second.decisions
    ]
    assert [c.model_dump_json() for c in first.commands] == [
        c.model_dump_json() for c in second.commands
    ]
