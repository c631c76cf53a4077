"""Every Kubernetes label, annotation and taint key gpuyield reads or writes, in one place.

The watch, the reservations, the archive, the audit, the node agents and the
object builders all name the same keys; one module keeps a typo in one of
them from silently splitting what they agree on.
"""

from __future__ import annotations

GPU = "nvidia.com/gpu"
"""The extended resource a GPU pod requests (limits; requests must equal them)."""

# -- Volcano's and Kubernetes' own ---------------------------------------------

JOB_LABEL = "volcano.sh/job-name"
"""On every pod of a Volcano Job: the job's name."""

GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
"""On a pod: its PodGroup (plain pods grouped by hand have no job label)."""

PREEMPTABLE = "volcano.sh/preemptable"
"""Annotation or label; ``"false"`` keeps a job from ever being a victim."""

# -- gpuyield's ----------------------------------------------------------------

SLA_ANNOTATION = "gpuyield.io/sla-seconds"
"""On a Volcano Job or PodGroup: seconds from its creation by which it must have
finished. A waiting job past ``sla_risk_share`` of that budget is at risk, and
production's claim then overrides cooldowns, eviction limits and protection."""

COMMAND_ID_ANNOTATION = "gpuyield.io/command-id"
"""On the Volcano bus Command a node agent creates: the yield command it carries out."""

TAINT_KEY = "gpuyield.io/reserved"
"""The NoSchedule taint on a node whose freed GPUs are held for a preemptor."""

RESERVED_LABEL = "gpuyield.io/reserved"
"""Set with the taint: a reconcile finds the held nodes by label, not by listing all."""

HOLDERS_ANNOTATION = "gpuyield.io/reserved-for"
"""On a held node: the preemptors the hold is for."""
