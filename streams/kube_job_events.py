"""Writing ``events.k8s.io/v1`` Events with the official client (``kubectl describe``'s record).

The Events themselves are built from the decisions (``agents/controller/job_events.py``);
this is the call. An Event is best effort, as in Kubernetes itself: a failure is
logged and returned, never raised, and never holds a decision back. A 409
AlreadyExists is success: Event names derive from the decision, so it is the
same Event written again after a redelivery.

The official client is synchronous; callers on an event loop run ``create`` in
a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, cast

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Object = dict[str, Any]


class EventWriter:
    """Creates Events through one ``ApiClient`` (the worker's Kubernetes access)."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api = kubernetes.client.EventsV1Api(api_client)

    def create(self, events: Iterable[Object]) -> list[str]:
        """Create each Event; return a line per one that could not be written."""
        failures: list[str] = []
        for event in events:
            meta = event["metadata"]
            try:
                # A plain dict body: the client serialises it as it is.
                body = cast(Any, event)
                self.api.create_namespaced_event(meta["namespace"], body, _preload_content=False)
            except ApiException as exc:
                if exc.status == 409:
                    continue  # written before: the same decision, redelivered
                failures.append(f"{meta['namespace']}/{meta['name']}: {exc.status} {exc.reason}")
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                failures.append(f"{meta['namespace']}/{meta['name']}: {exc}")
        for failure in failures:
            log.warning("could not write the Kubernetes Event %s", failure)
        return failures
