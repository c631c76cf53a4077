"""Forwarding the alert stream to a webhook or to Alertmanager, at least once, in order.

A platform team hears about trouble where it already listens: its on-call
webhook, or the Alertmanager its Prometheus feeds. The forwarder is a
subscriber of ``gpuyield.alerts`` with its own consumer group:

- **at least once:** an alert's offset is committed only after the receiver
  answered 2xx; a failure is retried with exponential backoff (capped, never
  given up: an unreachable receiver delays alerts, it does not lose them), and
  a forwarder that restarts begins after the last delivered alert;
- **in order:** the topic has one partition and alerts are delivered one at a
  time, so each job's alerts (all alerts, in fact) arrive in the order they
  were raised;
- **deduplicated by id:** ``(alert_id, state)`` delivered once per forwarder
  run (a replay or an at-least-once producer can put one alert on the topic
  twice); receivers get the id as ``Idempotency-Key`` to drop the rare
  duplicate a crash between delivery and commit leaves.

Alertmanager (``/api/v2/alerts``) gets each alert with ``alertname``
(``Gpuyield`` + the kind in CamelCase), ``severity``, ``kind``, ``alert_id``
and ``gpuyield_job`` labels; a resolved alert carries ``endsAt``, which is how
Alertmanager learns that an incident ended.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from gpuyield.schemas.decoding import MessageError, decode, encode
from gpuyield.schemas.messages import Alert, AlertState

log = logging.getLogger(__name__)


class DeliveryError(RuntimeError):
    """The receiver did not take the alert (a non-2xx answer, or no answer)."""


class Delivery(Protocol):
    def send(self, alert: Alert) -> None: ...


def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> None:
    request = urllib.request.Request(  # noqa: S310 - the operator's configured URL
        url, data=body, method="POST", headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            status = response.status
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"{url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DeliveryError(f"{url}: {exc}") from None
    if not 200 <= status < 300:
        raise DeliveryError(f"{url} answered {status}")


@dataclass(frozen=True)
class WebhookDelivery:
    """POSTs the alert as its wire JSON (the ``Alert`` schema)."""

    url: str
    timeout_s: float = 10.0

    def send(self, alert: Alert) -> None:
        key = f"{alert.alert_id}:{alert.state.value}"
        _post(self.url, encode(alert), {"Idempotency-Key": key}, self.timeout_s)


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def alertname(kind: str) -> str:
    """``yield-hard-killed`` -> ``GpuyieldYieldHardKilled``."""
    return "Gpuyield" + "".join(part.capitalize() for part in kind.split("-"))


def to_alertmanager(alert: Alert) -> dict[str, Any]:
    """One alert in Alertmanager's v2 ``postableAlert`` form."""
    labels = {
        "alertname": alertname(alert.kind.value),
        "severity": alert.severity,
        "kind": alert.kind.value,
        "alert_id": alert.alert_id,
    }
    if alert.job:
        labels["gpuyield_job"] = alert.job
    doc: dict[str, Any] = {
        "labels": labels,
        "annotations": {
            "summary": alert.message,
            "details": json.dumps(alert.details, sort_keys=True),
        },
        "startsAt": _rfc3339(alert.raised_at),
    }
    if alert.state is AlertState.RESOLVED:
        # Alertmanager refuses an end before the start (a skewed clock can write one).
        doc["endsAt"] = _rfc3339(max(alert.resolved_at or alert.raised_at, alert.raised_at))
    return doc


@dataclass(frozen=True)
class AlertmanagerDelivery:
    """POSTs to ``<url>/api/v2/alerts``."""

    url: str
    timeout_s: float = 10.0

    def send(self, alert: Alert) -> None:
        body = json.dumps([to_alertmanager(alert)]).encode()
        _post(self.url.rstrip("/") + "/api/v2/alerts", body, {}, self.timeout_s)


@dataclass(frozen=True)
class Backoff:
    """Seconds before attempt n+1: base x 2^n, at most ``cap_s``."""

    base_s: float = 0.5
    cap_s: float = 60.0

    def delay(self, failures: int) -> float:
        return float(min(self.cap_s, self.base_s * 2 ** max(0, failures - 1)))


class Forwarder:
    """Delivers each alert read from the topic, retrying until it is taken.

    ``commit(offset)`` is called with the next offset to read once everything
    before it was delivered (or deliberately skipped: an unreadable message,
    or an alert of a kind not forwarded, is logged and skipped).
    """

    def __init__(
        self,
        delivery: Delivery,
        commit: Callable[[int], None],
        *,
        kinds: frozenset[str] | None = None,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
        should_stop: Callable[[], bool] = lambda: False,
        remember: int = 10_000,
    ) -> None:
        self.delivery = delivery
        self.commit = commit
        self.kinds = kinds
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.should_stop = should_stop
        self.remember = remember
        self.delivered: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.attempts = 0
        self.failures = 0

    def handle(self, offset: int, value: bytes | None) -> bool:
        """Deliver one message; False if asked to stop before it was taken."""
        try:
            alert = decode(Alert, value)
        except MessageError as exc:
            log.warning("alerts@%d is unreadable and is not forwarded: %s", offset, exc)
            self.commit(offset + 1)
            return True
        key = (alert.alert_id, alert.state.value)
        if key in self.delivered or (self.kinds is not None and alert.kind.value not in self.kinds):
            self.commit(offset + 1)
            return True
        failures = 0
        while True:
            self.attempts += 1
            try:
                self.delivery.send(alert)
                break
            except DeliveryError as exc:
                failures += 1
                self.failures += 1
                wait = self.backoff.delay(failures)
                log.warning(
                    "alert %s not delivered (%s); retry in %.1f s", alert.alert_id, exc, wait
                )
                if self.should_stop():
                    return False
                self.sleep(wait)
        self.delivered[key] = None
        if len(self.delivered) > self.remember:
            self.delivered.popitem(last=False)
        self.commit(offset + 1)
        return True

    def handle_all(self, messages: Iterable[tuple[int, bytes | None]]) -> bool:
        return all(self.handle(offset, value) for offset, value in messages)
