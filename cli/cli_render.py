"""Rendering plans for people: the ``--explain`` table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gpuyield.schemas import Plan, RuleVerdict, Snapshot

_OUTCOME_STYLE = {"victim": "bold red", "spared": "green", "ineligible": "dim"}


def _deciding(verdicts: tuple[RuleVerdict, ...]) -> tuple[RuleVerdict, ...]:
    """Refusals if any; else what made it protected or allowed it across or within queues."""
    refused = tuple(v for v in verdicts if not v.allowed)
    if refused:
        return refused
    return tuple(v for v in verdicts if v.protected or v.rule in ("preempt-weight", "reclaim"))


def explain_table(console: Console, snapshot: Snapshot, plan: Plan) -> None:
    """Every candidate job, taken or not, with each rule's reason, W_eff and lost work."""
    state = "feasible" if plan.feasible else "NOT feasible"
    console.print(
        f"[bold]Plan for {plan.preemptor or '(no preemptor)'}[/bold]: "
        f"action [bold]{plan.action.value}[/bold], {state}"
    )
    for line in plan.explanation:
        console.print(f"  • {line}")
    if plan.placement:
        nodes = ", ".join(f"{pod} → {node}" for pod, node in plan.placement.items())
        console.print(f"  • placement: {nodes}")
    if not plan.candidates:
        return
    table = Table(title=f"Candidates at now={snapshot.now:.0f}", show_lines=True, expand=False)
    for header, justify in (
        ("job", "left"),
        ("queue", "left"),
        ("kind", "left"),
        ("GPUs", "right"),
        ("W_eff", "right"),
        ("lost GPU-s", "right"),
        ("outcome", "left"),
        ("rules", "left"),
    ):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    taken = {v.job: v for v in plan.victims}
    for cand in plan.candidates:
        victim = taken.get(cand.job)
        lost = victim.lost_gpu_seconds if victim else cand.lost_gpu_seconds
        outcome = cand.outcome + (" (protected)" if cand.protected else "")
        if victim and not victim.whole_job:
            outcome += f" ({len(victim.pods)} surplus pods)"
        reasons = "\n".join(
            f"{'✓' if v.allowed else '✗'} {v.rule}: {v.reason}" for v in _deciding(cand.verdicts)
        )
        table.add_row(
            cand.job,
            cand.queue,
            cand.relation,
            str(cand.gpus),
            f"{cand.w_eff:.1f}",
            f"{lost:.0f}",
            f"[{_OUTCOME_STYLE[cand.outcome]}]{outcome}[/]",
            reasons,
        )
    console.print(table)
