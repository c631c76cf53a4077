"""The jobs of the small bound tests: a gang across two full nodes, and a preemptor of
two identical pods that wants room for both."""

from __future__ import annotations

from builders import HOUR, NOW, JobBuilder, a_job, a_pod

from gpuyield.schemas import JobState


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
