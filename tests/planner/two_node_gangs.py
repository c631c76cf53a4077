"""The jobs of the small bound tests: a gang across two full nodes, a preemptor of two
identical pods that wants room for both, and a third node no plan can empty."""

from __future__ import annotations

from builders import HOUR, NOW, JobBuilder, a_job, a_node, a_pod, a_snapshot

from gpuyield.schemas import JobState, Snapshot


def gang_across_a_and_b() -> JobBuilder:
    """A 16-GPU gang, one 8-GPU pod on each of nodes a and b, an hour without a checkpoint."""
    return (
        a_job("gang")
        .with_pods(a_pod("gang-0", 8, "a"), a_pod("gang-1", 8, "b"))
        .min_available(2)
        .started(NOW - HOUR)
        .submitted(NOW - 2 * HOUR)
    )


def two_pod_preemptor(gpus: int = 8) -> JobBuilder:
    """Job "pre": two pending pods of ``gpus`` each, at a priority above every other job."""
    return (
        a_job("pre")
        .priority(5000)
        .with_pods(a_pod("pre-0", gpus), a_pod("pre-1", gpus))
        .in_state(JobState.PENDING)
        .submitted(NOW - 30)
    )


def a_and_b_and_a_pinned_half_c() -> Snapshot:
    """Nodes a and b full with the gang; node c half held by a job that may not be evicted
    and half by one that may: no plan frees c whole for the preemptor's 8-GPU pods."""
    return a_snapshot(
        nodes=[a_node("a"), a_node("b"), a_node("c")],
        jobs=[
            gang_across_a_and_b(),
            a_job("pinned").not_preemptable().running(pods=[("c", 4)]),
            a_job("half").running(pods=[("c", 4)], started_at=NOW - HOUR),
            two_pod_preemptor(),
        ],
    )
