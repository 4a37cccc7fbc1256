"""Deliver alerts to Alertmanager's v2 API, surviving its outages.

Alertmanager identifies an alert by its label set, so the outbox
(:mod:`streams.sinks.outbox`, shared with the Grafana sink) keeps only the
latest state per label set: an outage of any length costs memory bounded by the
number of distinct alerts, and when Alertmanager is back it receives exactly the
current truth; journaled, what was decided survives a worker restart.

Firing alerts are re-sent every ``resend_s`` with
``endsAt = now + 4 × resend_s`` (as Prometheus does), so Alertmanager resolves
them by itself if peerwatch dies; resolved alerts are re-sent with their
resolve time as ``endsAt`` for ``resolved_resend_s`` (Prometheus: 15 min), so
a stale "firing" that a stalled connection delivers late is overruled.

Errors::

    httpx.TransportError / 5xx  -> keep, back off, retry (Alertmanager away)
    4xx                          -> log the reply and drop that batch (our bug;
                                    retrying the same bytes cannot succeed)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import httpx

from streams.sinks.credentials import without_userinfo
from streams.sinks.outbox import Outbox, Outcome, alert_key, deliver_forever
from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.alertmanager")

Payload = dict[str, Any]


def rfc3339(epoch_s: float) -> str:
    return (
        datetime.fromtimestamp(epoch_s, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


class AlertmanagerSink:
    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        *,
        resend_s: float = 60.0,
        resolved_resend_s: float = 15 * 60.0,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        on_result: Callable[[str, int], None] | None = None,
        outbox: Outbox | None = None,
        auth: httpx.Auth | None = None,
    ) -> None:
        base, url_auth = without_userinfo(url)  # no password in what httpx logs
        # httpx.Auth() is "no auth", what a request's auth=None meant
        self._auth: httpx.Auth = auth or url_auth or httpx.Auth()
        self._endpoint = base.rstrip("/") + "/api/v2/alerts"
        self._client = client
        self._resend_s = resend_s
        self._backoff_max_s = backoff_max_s
        self._clock = clock
        self._on_result = on_result or (lambda outcome, n: None)
        self._resolved_resend_s = resolved_resend_s
        self._firing: dict[str, Payload] = {}  # alerts to keep re-sending
        # Resolved alerts, re-sent until the deadline (as Prometheus does for 15 min): a stale
        # "firing" that a stalled network delivers after the resolve is overruled again.
        self._resolved: dict[str, tuple[Payload, float]] = {}
        # latest undelivered state per alert (journaled: survives a restart)
        self._outbox = outbox if outbox is not None else Outbox()
        self._wake = asyncio.Event()
        self._next_resend = clock() + resend_s

    def submit(self, alerts: Iterable[Payload]) -> None:
        """Queue alert states (``status`` "firing" or "resolved"); delivery is async."""
        for alert in alerts:
            key = alert_key(alert["labels"])
            if alert.get("status") == "resolved":
                self._firing.pop(key, None)
                now = self._clock()
                alert = {**alert, "ends_at_s": now}  # one endsAt for every re-send
                self._resolved[key] = (alert, now + self._resolved_resend_s)
            else:
                self._firing[key] = alert
                self._resolved.pop(key, None)
            self._outbox.put(key, alert)
        self._wake.set()

    def keep_firing(self, alerts: Iterable[Payload]) -> None:
        """Make sure these firing alerts are re-sent, without queueing them now.

        After a worker restart the detector state (from its table) knows what is
        firing; this puts those alerts back on the resend schedule.
        """
        for alert in alerts:
            self._firing.setdefault(alert_key(alert["labels"]), alert)

    def forget_group(self, group: str) -> None:
        """Stop re-sending ``group``'s firing alerts: another worker owns the group now and
        re-sends (or resolves) them itself. Undelivered states stay queued."""
        for key in [k for k, a in self._firing.items() if a["labels"].get("group") == group]:
            del self._firing[key]
        for key in [k for k, (a, _) in self._resolved.items() if a["labels"]["group"] == group]:
            del self._resolved[key]

    @property
    def pending(self) -> int:
        return len(self._outbox)

    def _wire(self, alert: Payload, now: float) -> Payload:
        starts = min(alert["starts_at_s"], now)  # replays may run ahead of the wall clock
        if alert.get("status") == "resolved":
            ends = max(alert.get("ends_at_s", now), starts + 0.001)
        else:
            ends = now + 4 * self._resend_s
        return {
            "labels": alert["labels"],
            "annotations": alert.get("annotations", {}),
            "startsAt": rfc3339(starts),
            "endsAt": rfc3339(ends),
            "generatorURL": alert.get("generator_url", ""),
        }

    async def _send(self, batch: dict[str, Payload]) -> Outcome:
        now = self._clock()
        body = [self._wire(a, now) for a in batch.values()]
        try:
            reply = await self._client.post(
                self._endpoint, json=body, timeout=10.0, auth=self._auth
            )
        except httpx.TransportError as exc:
            log.warning("alertmanager_unavailable", error=exc, pending=len(batch))
            self._on_result("unavailable", len(batch))
            return Outcome.RETRY
        if reply.status_code >= 500:
            log.warning("alertmanager_unavailable", status=reply.status_code, pending=len(batch))
            self._on_result("unavailable", len(batch))
            return Outcome.RETRY
        if reply.status_code >= 400:
            log.error(
                "alertmanager_rejected",
                status=reply.status_code,
                reply=reply.text[:300],
                n=len(batch),
            )
            self._on_result("rejected", len(batch))
            return Outcome.REJECTED
        log.info("alerts_sent", n=len(batch), status=reply.status_code)
        self._on_result("sent", len(batch))
        return Outcome.SENT

    async def flush(self) -> bool:
        """Try to deliver the outbox once. True when it is empty afterwards."""
        if not len(self._outbox):
            return True
        batch = self._outbox.items()
        if await self._send(batch) is not Outcome.RETRY:
            self._outbox.done(batch)
        return not len(self._outbox)

    def _queue_resends(self) -> None:
        """On the resend tick: firing alerts, and resolved ones still inside their window."""
        now = self._clock()
        if now < self._next_resend:
            return
        for key, alert in self._firing.items():
            if key not in self._outbox:
                self._outbox.put(key, alert)
        for key, (alert, until) in list(self._resolved.items()):
            if now >= until:
                del self._resolved[key]
            elif key not in self._outbox:
                self._outbox.put(key, alert)
        self._next_resend = now + self._resend_s

    async def run(self) -> None:
        """Deliver forever: on submit, on every resend tick, with backoff while away."""
        await deliver_forever(
            self._outbox,
            self._send,
            self._wake,
            backoff_max_s=self._backoff_max_s,
            before_send=self._queue_resends,
            timeout_s=lambda: max(0.0, self._next_resend - self._clock()),
        )
