"""Reservations on the real scheduler: a taint on the held nodes, tolerations on the preemptor.

The decider holds the GPUs a yield frees for the job it freed them for
(``Reservation`` messages, ``reservation/<job>`` records). Volcano knows
nothing of that, so this module makes it true on the cluster
(docs/design/0004-reservations.md):

- every node some active hold names carries one taint
  ``gpuyield.io/reserved=<value>:NoSchedule``. The value names the set of jobs
  holding the node (a hash: a label value has 63 characters at most), so a
  node two holds share admits both preemptors and nobody else; Kubernetes
  allows one taint per key and effect, hence one taint, not one per hold. The
  same patch sets the label ``gpuyield.io/reserved=true`` (reconciles find
  the held nodes by it) and the annotation ``gpuyield.io/reserved-for``, the
  jobs, for people;
- every unbound pod of a holding job (label ``volcano.sh/job-name`` in the
  job's namespace) carries a toleration for the value of each node its job
  holds. Tolerations are added before taints change, so a preemptor never
  loses a node it holds, even for a moment.

Every write is a strategic merge patch that carries the ``resourceVersion``
it was computed from: taints and tolerations have no merge key, so the patch
replaces the whole list, and the version makes the API server refuse it
(409) if another controller changed the object in between; the object is
then read again and the change recomputed, a bounded number of times. So
other controllers' taints and tolerations survive. A node or pod that is
gone (404) needs nothing. ``reconcile`` makes the cluster match a set of
holds, including removing our taint from nodes nobody holds any more: after
a crash, the restarted owner cleans up what the dead one left.

The official client is synchronous; callers on an event loop run these
methods in a thread.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from gpuyield.schemas.labels import HOLDERS_ANNOTATION, JOB_LABEL, RESERVED_LABEL, TAINT_KEY
from gpuyield.schemas.messages import Reservation, ReservationState

logger = logging.getLogger(__name__)

Object = dict[str, Any]

TAINT_EFFECT = "NoSchedule"
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class Hold:
    """GPUs held for ``job`` (``namespace/name``) on ``nodes`` until ``until`` (epoch seconds)."""

    job: str
    nodes: frozenset[str]
    until: float

    def __post_init__(self) -> None:
        namespace, _, name = self.job.partition("/")
        if not namespace or not name:
            raise ValueError(f"a hold's job is namespace/name, not {self.job!r}")

    @classmethod
    def of(cls, reservation: Reservation) -> Hold:
        return cls(reservation.job, frozenset(reservation.nodes), reservation.until)

    @property
    def namespace(self) -> str:
        return self.job.partition("/")[0]

    @property
    def name(self) -> str:
        return self.job.partition("/")[2]


def taint_value(jobs: Iterable[str]) -> str:
    """The taint value for a node held by ``jobs``: 20 hex digits, a valid label value."""
    text = "\n".join(sorted(set(jobs)))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def reserved_taint(value: str) -> Object:
    return {"key": TAINT_KEY, "value": value, "effect": TAINT_EFFECT}


def reserved_toleration(value: str) -> Object:
    return {"key": TAINT_KEY, "operator": "Equal", "value": value, "effect": TAINT_EFFECT}


def holders_by_node(holds: Iterable[Hold]) -> dict[str, tuple[str, ...]]:
    """Each held node and the jobs holding it, sorted."""
    jobs: dict[str, set[str]] = {}
    for hold in holds:
        for node in hold.nodes:
            jobs.setdefault(node, set()).add(hold.job)
    return {node: tuple(sorted(held)) for node, held in jobs.items()}


class ReservationError(Exception):
    """The cluster could not be made to match the holds; ``str()`` says which object and why."""


@dataclass(frozen=True, slots=True)
class EnforcerSettings:
    request_timeout_s: float = 10.0
    """Per API call: a hung API server must not hold the decider for long."""

    conflict_retries: int = 5
    """Re-reads after a 409 Conflict before giving up on one object."""

    page_size: int = 500


@dataclass
class Report:
    """What one call changed, for logs and tests."""

    tainted: list[str] = field(default_factory=list)
    untainted: list[str] = field(default_factory=list)
    tolerating: list[str] = field(default_factory=list)
    """Pods (``namespace/name``) that got tolerations."""
    gone: list[str] = field(default_factory=list)
    """Objects that vanished while being changed (404): nothing to do for them."""

    def __bool__(self) -> bool:
        return bool(self.tainted or self.untainted or self.tolerating)


class _Gone(Exception):
    """404: the object does not exist (any more)."""


class _Conflict(Exception):
    """409: the object changed since it was read."""


class ReservationEnforcer:
    """The holds this owner knows, and the calls that make the cluster match them."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        settings: EnforcerSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._settings = settings or EnforcerSettings()
        self._clock = clock
        self._holds: dict[str, Hold] = {}

    @property
    def holds(self) -> dict[str, Hold]:
        """The active holds as this enforcer last applied them."""
        return dict(self._holds)

    # -- operations ---------------------------------------------------------

    def enforce(self, reservation: Reservation) -> Report:
        """Apply a ``held`` message, release a ``released`` one."""
        if reservation.state is ReservationState.HELD:
            return self.apply(Hold.of(reservation))
        return self.release(reservation.job, nodes=reservation.nodes)

    def apply(self, hold: Hold) -> Report:
        """Taint ``hold``'s nodes, let its unbound pods tolerate them; an expired hold: release."""
        if hold.until <= self._clock():
            return self.release(hold.job, nodes=hold.nodes)
        previous = self._holds.get(hold.job)
        self._holds[hold.job] = hold
        touched = set(hold.nodes) | (previous.nodes if previous else set())
        return self._converge(touched)

    def release(self, job: str, *, nodes: Iterable[str] = ()) -> Report:
        """End ``job``'s hold: its nodes lose our taint unless another active hold needs them."""
        previous = self._holds.pop(job, None)
        touched = set(nodes) | (previous.nodes if previous else set())
        return self._converge(touched)

    def reconcile(self, holds: Iterable[Hold], *, every_node: bool = False) -> Report:
        """Make the cluster match exactly ``holds`` (expired ones count as not held).

        Finds the nodes carrying our taint (by our label; ``every_node``: by
        listing all nodes, for a start after a crash), so a taint left by an
        owner that died before releasing it is removed; and adds tolerations
        to the holding jobs' pods that were created since (Volcano creates a
        job's pods when it admits the job, possibly after the hold was applied).
        """
        now = self._clock()
        self._holds = {h.job: h for h in holds if h.until > now}
        selector = None if every_node else RESERVED_LABEL
        ours = {
            name
            for name, taints, labels in self._list_nodes(selector)
            if _our_value(taints) is not None or RESERVED_LABEL in labels
        }
        return self._converge(ours | set(holders_by_node(self._holds.values())), every_job=True)

    # -- convergence ---------------------------------------------------------

    def _converge(self, nodes: set[str], *, every_job: bool = False) -> Report:
        report = Report()
        now = self._clock()
        for job, hold in list(self._holds.items()):
            if hold.until <= now:
                del self._holds[job]
                nodes |= hold.nodes
        holders = holders_by_node(self._holds.values())
        values = {node: taint_value(jobs) for node, jobs in holders.items()}
        # Tolerations first: a preemptor keeps every node it holds while values change.
        for hold in sorted(self._holds.values(), key=lambda h: h.job):
            if every_job or hold.nodes & nodes:
                wanted = {values[node] for node in hold.nodes}
                self._tolerate(hold, wanted, report)
        for node in sorted(nodes):
            jobs = holders.get(node, ())
            self._set_taint(node, values.get(node), jobs, report)
        if report:
            logger.info(
                "reservations: tainted %s, untainted %s, tolerations on %d pod(s)",
                report.tainted or "-",
                report.untainted or "-",
                len(report.tolerating),
            )
        return report

    def _tolerate(self, hold: Hold, values: set[str], report: Report) -> None:
        for pod in self._job_pods(hold):
            if not (pod.get("spec") or {}).get("nodeName"):  # a bound pod needs none
                self._tolerate_pod(hold.namespace, pod, values, report)

    def _tolerate_pod(self, namespace: str, pod: Object, values: set[str], report: Report) -> None:
        name = pod["metadata"]["name"]
        what = f"pod {namespace}/{name}"

        def change(current: Object) -> Object | None:
            spec = current.get("spec") or {}
            if spec.get("nodeName"):
                return None
            tolerations = list(spec.get("tolerations") or [])
            missing = sorted(values - _tolerated_values(tolerations))
            if not missing:
                return None
            tolerations += [reserved_toleration(v) for v in missing]
            return {"spec": {"tolerations": tolerations}}

        def read() -> Object:
            return self._read(
                what, lambda: self._core.read_namespaced_pod(name, namespace, **self._raw())
            )

        def write(body: Object) -> Any:
            return self._core.patch_namespaced_pod(
                name, namespace, body, _content_type=STRATEGIC, **self._raw()
            )

        if self._update(what, pod, read=read, write=write, change=change, report=report):
            report.tolerating.append(f"{namespace}/{name}")

    def _set_taint(
        self, node: str, value: str | None, jobs: tuple[str, ...], report: Report
    ) -> None:
        what = f"node {node}"

        def change(current: Object) -> Object | None:
            taints = list((current.get("spec") or {}).get("taints") or [])
            annotations = (current.get("metadata") or {}).get("annotations") or {}
            others = [t for t in taints if t.get("key") != TAINT_KEY]
            wanted = [*others, reserved_taint(value)] if value else others
            labels = (current.get("metadata") or {}).get("labels") or {}
            holders = ",".join(jobs) if jobs else None
            marked = "true" if value else None
            if (
                wanted == taints
                and annotations.get(HOLDERS_ANNOTATION) == holders
                and labels.get(RESERVED_LABEL) == marked
            ):
                return None
            return {
                "metadata": {
                    "labels": {RESERVED_LABEL: marked},
                    "annotations": {HOLDERS_ANNOTATION: holders},
                },
                "spec": {"taints": wanted},
            }

        def read() -> Object:
            return self._read(what, lambda: self._core.read_node(node, **self._raw()))

        try:
            current = read()
        except _Gone:
            report.gone.append(what)
            return
        done = self._update(
            what,
            current,
            read=read,
            write=lambda body: self._core.patch_node(
                node, body, _content_type=STRATEGIC, **self._raw()
            ),
            change=change,
            report=report,
        )
        if done:
            (report.tainted if value else report.untainted).append(node)

    # -- API calls -------------------------------------------------------------

    def _update(
        self,
        what: str,
        current: Object,
        *,
        read: Callable[[], Object],
        write: Callable[[Object], Any],
        change: Callable[[Object], Object | None],
        report: Report,
    ) -> bool:
        """Patch ``current`` with ``change``, guarded by its version; re-read on 409.

        True if a patch was written; False if none was needed or the object is gone.
        """
        for _ in range(self._settings.conflict_retries + 1):
            body = change(current)
            if body is None:
                return False
            version = (current.get("metadata") or {}).get("resourceVersion")
            body.setdefault("metadata", {})["resourceVersion"] = version
            try:
                self._call(what, functools.partial(write, body))
                return True
            except _Gone:
                report.gone.append(what)
                return False
            except _Conflict:
                logger.debug("%s changed since it was read; reading it again", what)
            try:
                current = read()
            except _Gone:
                report.gone.append(what)
                return False
        raise ReservationError(
            f"{what}: still conflicting after {self._settings.conflict_retries} re-reads "
            "(another controller keeps changing it)"
        )

    def _read(self, what: str, call: Callable[[], Any]) -> Object:
        obj = self._call(what, call)
        if not isinstance(obj, dict):
            raise ReservationError(f"{what}: the API server sent something that is not an object")
        return obj

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        """One request, its JSON decoded; 404 and 409 as exceptions of their own."""
        try:
            response = call()
        except ApiException as exc:
            if exc.status == 404:
                raise _Gone from None
            if exc.status == 409:
                raise _Conflict from None
            raise ReservationError(f"{what}: HTTP {exc.status} {_message(exc)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ReservationError(f"{what}: {type(exc).__name__}: {exc}") from None
        try:
            return json.loads(response.data)
        except ValueError:
            raise ReservationError(f"{what}: the API server's answer is not JSON") from None
        finally:
            response.release_conn()

    def _raw(self) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self._settings.request_timeout_s}

    def _job_pods(self, hold: Hold) -> Iterator[Object]:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "label_selector": f"{JOB_LABEL}={hold.name}",
                "limit": self._settings.page_size,
                **self._raw(),
            }
            if token:
                kwargs["_continue"] = token
            page = self._read(
                f"pods of {hold.job}",
                functools.partial(self._core.list_namespaced_pod, hold.namespace, **kwargs),
            )
            yield from page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def _list_nodes(
        self, selector: str | None
    ) -> Iterator[tuple[str, list[Object], Mapping[str, str]]]:
        """Each node's name, taints and labels (those matching ``selector``, if given)."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self._settings.page_size, **self._raw()}
            if selector:
                kwargs["label_selector"] = selector
            if token:
                kwargs["_continue"] = token
            page = self._read("the node list", functools.partial(self._core.list_node, **kwargs))
            for node in page.get("items") or ():
                meta = node["metadata"]
                taints = (node.get("spec") or {}).get("taints") or []
                yield meta["name"], taints, meta.get("labels") or {}
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return


def _our_value(taints: Iterable[Mapping[str, Any]]) -> str | None:
    for taint in taints:
        if taint.get("key") == TAINT_KEY:
            return str(taint.get("value") or "")
    return None


def _tolerated_values(tolerations: Iterable[Mapping[str, Any]]) -> set[str]:
    return {
        str(t.get("value") or "")
        for t in tolerations
        if t.get("key") == TAINT_KEY
        and (t.get("operator") or "Equal") == "Equal"
        and t.get("effect") in (TAINT_EFFECT, None, "")
    }


def _message(exc: ApiException) -> str:
    """The Status message of an error body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return f"{exc.reason}: {body['message']}"
    return str(exc.reason)


def holds_from(mapping: Mapping[str, tuple[Iterable[str], float]]) -> list[Hold]:
    """Holds from plain inputs: job -> (nodes, until)."""
    return [Hold(job, frozenset(nodes), until) for job, (nodes, until) in mapping.items()]
