"""A suspended job resumes after its backoff, and never in front of a heavier waiting job."""

from __future__ import annotations

from gpuyield.agents.policy.resume import may_resume


def test_a_job_does_not_resume_before_its_backoff_ends() -> None:
    assert not may_resume(100, now=10.0, not_before=20.0, waiting_priorities=[])


def test_a_job_resumes_once_its_backoff_ends() -> None:
    assert may_resume(100, now=20.0, not_before=20.0, waiting_priorities=[])


def test_a_job_does_not_resume_while_a_heavier_job_waits() -> None:
    assert not may_resume(100, now=30.0, not_before=20.0, waiting_priorities=[1000])


def test_a_lighter_or_equal_waiting_job_does_not_hold_a_resume_back() -> None:
    assert may_resume(100, now=30.0, not_before=20.0, waiting_priorities=[100, 50])
