"""Yields through the Kubernetes API: the Eviction API, and pod lookups for the other signallers.

``KubernetesEvictionSignaller.signal`` creates an Eviction per pod with the
yield's grace period: the kubelet runs the pod's preStop hook, then sends
SIGTERM, and SIGKILLs at the end of the grace period, so the trainer SDK's
SIGTERM handler saves the emergency checkpoint. An eviction refused by a
PodDisruptionBudget (HTTP 429) falls back to a delete with the same grace: the
controller has already decided this job yields (as Volcano itself deletes
preemption victims without consulting budgets), and waiting on a budget would
miss the deadline. ``alive`` reads the pod (gone or Succeeded/Failed: not
running); ``kill`` deletes with grace 0.

The official client is synchronous; each call runs in a worker thread. Reads
ask for the raw JSON (``_preload_content=False``) rather than typed models,
as ``gpuyield.streams.kube_resources`` does: only a few fields are needed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from gpuyield.agents.node.pods import PodRef

log = logging.getLogger(__name__)

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
TERMINAL_PHASES = ("Succeeded", "Failed")


def _grace_seconds(grace_s: float) -> int:
    # Kubernetes takes whole seconds; 0 would mean "immediately", which a graceful stop is not.
    return max(1, math.ceil(grace_s))


class KubernetesPods:
    """Reads of pods by name (raw JSON), shared by the signallers and the GPU counter."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *, timeout_s: float = 10.0) -> None:
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.timeout_s = timeout_s

    async def read(self, pod: PodRef) -> dict[str, Any] | None:
        """The pod object, or None when it does not exist."""

        def call() -> dict[str, Any] | None:
            try:
                response: Any = self.core.read_namespaced_pod(
                    pod.name,
                    pod.namespace,
                    _preload_content=False,
                    _request_timeout=self.timeout_s,
                )
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            try:
                document: dict[str, Any] = json.loads(response.data)
            finally:
                response.release_conn()
            return document

        return await asyncio.to_thread(call)


class KubernetesPodUidResolver:
    """Pod name → UID through the API server (for ``hostpid.HostPidSignaller``)."""

    def __init__(self, pods: KubernetesPods) -> None:
        self._pods = pods

    async def uid(self, pod: PodRef) -> str | None:
        document = await self._pods.read(pod)
        if document is None:
            return None
        uid = document.get("metadata", {}).get("uid")
        return str(uid) if uid else None


class KubernetesGpuCounter:
    """GPUs the pods hold: the sum of their containers' GPU limits."""

    def __init__(self, pods: KubernetesPods) -> None:
        self._pods = pods

    async def gpus(self, pods: Sequence[PodRef]) -> int:
        total = 0
        for pod in pods:
            document = await self._pods.read(pod)
            if document is None:
                continue
            for container in document.get("spec", {}).get("containers", []):
                limits = container.get("resources", {}).get("limits", {}) or {}
                for name in GPU_RESOURCES:
                    try:
                        total += int(limits.get(name, 0))
                    except (TypeError, ValueError):
                        continue
        return total


class KubernetesEvictionSignaller:
    """Graceful stop by eviction, kill by a zero-grace delete."""

    def __init__(self, pods: KubernetesPods) -> None:
        self._pods = pods

    async def signal(self, pods: Sequence[PodRef], grace_s: float) -> None:
        for pod in pods:
            await asyncio.to_thread(self._evict, pod, _grace_seconds(grace_s))

    def _evict(self, pod: PodRef, grace: int) -> None:
        core = self._pods.core
        body = kubernetes.client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=kubernetes.client.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
            delete_options=kubernetes.client.V1DeleteOptions(grace_period_seconds=grace),
        )
        try:
            response: Any = core.create_namespaced_pod_eviction(
                pod.name,
                pod.namespace,
                body,
                _preload_content=False,
                _request_timeout=self._pods.timeout_s,
            )
            response.release_conn()
            log.info("pod %s: evicted with a %d s grace period", pod, grace)
        except ApiException as exc:
            if exc.status == 404:
                log.info("pod %s: already gone", pod)
            elif exc.status == 429:
                log.warning(
                    "pod %s: eviction refused (disruption budget); deleting with a %d s grace",
                    pod,
                    grace,
                )
                self._delete(pod, grace)
            else:
                raise

    def _delete(self, pod: PodRef, grace: int) -> None:
        try:
            response: Any = self._pods.core.delete_namespaced_pod(
                pod.name,
                pod.namespace,
                grace_period_seconds=grace,
                body=kubernetes.client.V1DeleteOptions(grace_period_seconds=grace),
                _preload_content=False,
                _request_timeout=self._pods.timeout_s,
            )
            response.release_conn()
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def alive(self, pods: Sequence[PodRef]) -> bool:
        for pod in pods:
            document = await self._pods.read(pod)
            if document is not None and document.get("status", {}).get("phase") not in (
                TERMINAL_PHASES
            ):
                return True
        return False

    async def kill(self, pods: Sequence[PodRef]) -> None:
        for pod in pods:
            log.warning("pod %s: deleting with no grace", pod)
            await asyncio.to_thread(self._delete_now, pod)

    def _delete_now(self, pod: PodRef) -> None:
        # grace 0 is the API's "now" (the kubelet SIGKILLs); 1 s is kubectl's --now.
        self._delete(pod, 0)
