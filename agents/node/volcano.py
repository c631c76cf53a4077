"""Suspending and resuming a Volcano Job with bus ``Command`` objects (AbortJob / ResumeJob).

Volcano's job controller takes commands as ``bus.volcano.sh/v1alpha1``
``Command`` objects in the job's namespace, exactly what ``vcctl job suspend``
and ``vcctl job resume`` create (volcano ``pkg/cli/util``, ``CreateJobCommand``)::

    apiVersion: bus.volcano.sh/v1alpha1
    kind: Command
    metadata:
      name: <job>-abortjob-<hash of the command id>
      namespace: <job namespace>
      ownerReferences: [<the Job, controller: true>]
    action: AbortJob            # or ResumeJob
    target: <the same owner reference>      # Go field TargetObject, JSON "target"
    reason: GpuyieldYield
    message: <why>

``AbortJob`` kills the job's pods and keeps the job in ``Aborted`` until a
``ResumeJob``; unlike ``RestartJob`` it does not go round the retry budget
on the way out. (Volcano does count a ``ResumeJob`` as a retry: jobs that
yield often need a ``maxRetry`` that allows for it.) The owner reference
needs the Job's UID, so the Job is read first; it also makes Kubernetes
garbage-collect the command with the job.

The name is derived from the command id, so a second attempt after a crash
meets 409 AlreadyExists (success) instead of aborting twice; Volcano deletes
a command once it has handled it, so at worst a retry long after is one more,
harmless, AbortJob.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from gpuyield.agents.node.pods import split_job
from gpuyield.agents.node.suspenders import JobGone
from gpuyield.schemas.labels import COMMAND_ID_ANNOTATION

log = logging.getLogger(__name__)

BUS_GROUP = "bus.volcano.sh"
BUS_VERSION = "v1alpha1"
JOB_GROUP = "batch.volcano.sh"
JOB_VERSION = "v1alpha1"
ABORT_JOB = "AbortJob"
RESUME_JOB = "ResumeJob"
MANAGED_BY = "gpuyield"


def command_name(job_name: str, action: str, command_id: str) -> str:
    """A DNS-1123 name, stable per (job, action, command id)."""
    digest = hashlib.sha256(f"{action}/{command_id}".encode()).hexdigest()[:10]
    return f"{job_name[:200]}-{action.lower()}-{digest}"


def job_owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    """The controller reference to a Volcano Job, as ``metav1.NewControllerRef`` builds it."""
    metadata = job.get("metadata", {})
    return {
        "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}",
        "kind": "Job",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def bus_command(
    job: dict[str, Any], action: str, command_id: str, *, reason: str, message: str
) -> dict[str, Any]:
    """The ``Command`` object that asks Volcano's job controller to ``action`` the job."""
    owner = job_owner_reference(job)
    metadata = job.get("metadata", {})
    return {
        "apiVersion": f"{BUS_GROUP}/{BUS_VERSION}",
        "kind": "Command",
        "metadata": {
            "name": command_name(owner["name"], action, command_id),
            "namespace": metadata.get("namespace", "default"),
            "ownerReferences": [owner],
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {COMMAND_ID_ANNOTATION: command_id},
        },
        "action": action,
        "target": owner,
        "reason": reason,
        "message": message[:1024],
    }


class VolcanoJobSuspender:
    """``JobSuspender`` for Volcano Jobs: AbortJob to suspend, ResumeJob to resume."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *, timeout_s: float = 10.0) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._timeout_s = timeout_s

    async def suspend(self, job: str, *, command_id: str, reason: str) -> None:
        try:
            await self._send(
                job, ABORT_JOB, command_id, "GpuyieldYield", reason or "gpuyield yield"
            )
        except JobGone:
            log.info("job %s is gone: nothing to suspend", job)

    async def resume(self, job: str, *, command_id: str) -> None:
        await self._send(job, RESUME_JOB, command_id, "GpuyieldResume", "gpuyield resume")

    async def _send(
        self, job: str, action: str, command_id: str, reason: str, message: str
    ) -> None:
        await asyncio.to_thread(self._create, job, action, command_id, reason, message)

    def _create(self, job: str, action: str, command_id: str, reason: str, message: str) -> None:
        namespace, name = split_job(job)
        try:
            document: Any = self._custom.get_namespaced_custom_object(
                JOB_GROUP, JOB_VERSION, namespace, "jobs", name, _request_timeout=self._timeout_s
            )
        except ApiException as exc:
            if exc.status == 404:
                raise JobGone(f"Volcano Job {job} not found") from None
            raise
        body = bus_command(document, action, command_id, reason=reason, message=message)
        try:
            self._custom.create_namespaced_custom_object(
                BUS_GROUP,
                BUS_VERSION,
                namespace,
                "commands",
                body,
                _request_timeout=self._timeout_s,
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
            log.info("job %s: %s command %s already exists", job, action, body["metadata"]["name"])
            return
        log.info("job %s: %s (command %s)", job, action, body["metadata"]["name"])
