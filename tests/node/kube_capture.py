"""A few Kubernetes API routes, enough for the node agent's calls, recording every request.

The shared fake API server (``tests/fakes/kube_api.py``) serves reads and
watches only; the node agent writes (evictions, deletions, Volcano bus
commands), so this small server answers those the way kube-apiserver does
(201 on create, 409 AlreadyExists, 404 NotFound, 429 for an eviction a
disruption budget refuses) and keeps the bodies the official client sent.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client
from aiohttp import web

Object = dict[str, Any]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


@dataclass
class CaptureApi:
    jobs: dict[str, Object] = field(default_factory=dict)  # "ns/name" -> Volcano Job
    pods: dict[str, Object] = field(default_factory=dict)  # "ns/name" -> Pod
    commands: dict[str, Object] = field(default_factory=dict)  # "ns/name" -> bus Command
    budget_blocks: set[str] = field(default_factory=set)  # pods whose eviction gets 429
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""

    def add_job(self, job: Object) -> Object:
        job = copy.deepcopy(job)
        job["metadata"].setdefault("uid", str(uuid.uuid4()))
        meta = job["metadata"]
        self.jobs[f"{meta['namespace']}/{meta['name']}"] = job
        return job

    def add_pod(self, pod: Object) -> Object:
        pod = copy.deepcopy(pod)
        pod["metadata"].setdefault("uid", str(uuid.uuid4()))
        meta = pod["metadata"]
        self.pods[f"{meta['namespace']}/{meta['name']}"] = pod
        return pod

    def configuration(self) -> kubernetes.client.Configuration:
        return kubernetes.client.Configuration(host=self.url)

    def of(self, method: str, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(Recorded(request.method, request.path, dict(request.query), body))
        parts = [p for p in request.path.split("/") if p]
        if parts[:4] == ["apis", "batch.volcano.sh", "v1alpha1", "namespaces"] and len(parts) == 7:
            job = self.jobs.get(f"{parts[4]}/{parts[6]}")
            if request.method == "GET" and job is not None:
                return web.json_response(job)
            return _status(404, "NotFound", f'jobs.batch.volcano.sh "{parts[6]}" not found')
        if (
            parts[:4] == ["apis", "bus.volcano.sh", "v1alpha1", "namespaces"]
            and request.method == "POST"
        ):
            key = f"{parts[4]}/{body['metadata']['name']}"
            if key in self.commands:
                return _status(409, "AlreadyExists", f'commands "{key}" already exists')
            self.commands[key] = body
            return web.json_response(body, status=201)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 6 and parts[4] == "pods":
            key = f"{parts[3]}/{parts[5]}"
            pod = self.pods.get(key)
            if pod is None:
                return _status(404, "NotFound", f'pods "{parts[5]}" not found')
            if len(parts) == 7 and parts[6] == "eviction" and request.method == "POST":
                if key in self.budget_blocks:
                    return _status(429, "TooManyRequests", "Cannot evict pod: disruption budget")
                pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                return web.json_response({"kind": "Status", "status": "Success"}, status=201)
            if request.method == "GET":
                return web.json_response(pod)
            if request.method == "DELETE":
                del self.pods[key]
                return web.json_response(pod)
        return _status(404, "NotFound", f"no route for {request.method} {request.path}")


@asynccontextmanager
async def capture_api() -> AsyncIterator[CaptureApi]:
    """The server on a free loopback port, on the test's own loop (the client runs in threads)."""
    api = CaptureApi()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api._handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    api.url = f"http://127.0.0.1:{port}"
    try:
        yield api
    finally:
        await runner.cleanup()
