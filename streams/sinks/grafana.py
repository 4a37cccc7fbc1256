"""Mark incidents on Grafana dashboards: one region annotation per alert.

A firing alert becomes an annotation at its start (``POST /api/annotations``,
tags ``peerwatch``, the alertname, node and group, so dashboards find them by
tag); when it resolves the region is closed (``PATCH /api/annotations/:id``
with ``timeEnd``). If the annotation id is unknown at resolve time (the worker
restarted in between), the whole region is posted at once instead.

Delivery is the Alertmanager sink's (:mod:`streams.sinks.outbox`): the latest
change per alert, journaled when the worker has a data directory, retried with
backoff and jitter while Grafana is away (transport errors, 5xx); a 4xx is
logged and dropped (our request is wrong; repeating it cannot help). An alert
that fired and resolved during an outage becomes one whole region. The token
is sent as ``Authorization: Bearer`` and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx

from detectors.features import DEFAULT_BUCKET_MS
from detectors.vocabulary import AlertChange
from streams.sinks.credentials import BearerAuth, without_userinfo
from streams.sinks.outbox import Outbox, Outcome, alert_key, deliver_forever
from streams.sinks.payloads import alert_annotations, alert_labels
from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.grafana")


class GrafanaSink:
    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        *,
        token: str | None = None,
        dashboard_uid: str | None = None,
        bucket_ms: int = DEFAULT_BUCKET_MS,
        backoff_max_s: float = 30.0,
        outbox: Outbox | None = None,
        auth: httpx.Auth | None = None,
    ) -> None:
        base, url_auth = without_userinfo(url)  # no password in what httpx logs
        self._auth = auth or (BearerAuth(token) if token else url_auth)
        self._base = base.rstrip("/")
        self._client = client
        self._dashboard_uid = dashboard_uid
        self._bucket_ms = bucket_ms
        self._backoff_max_s = backoff_max_s
        self._ids: dict[str, int] = {}  # alert key -> its open region's annotation id
        self._outbox = outbox if outbox is not None else Outbox()
        self._wake = asyncio.Event()

    def submit(self, changes: list[AlertChange]) -> None:
        for change in changes:
            self._outbox.put(alert_key(alert_labels(change)), change.to_dict())
        if changes:
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._outbox)

    def _body(self, change: AlertChange, *, with_end: bool) -> dict[str, Any]:
        labels = alert_labels(change)
        notes = alert_annotations(change)
        tags = ["peerwatch", labels["alertname"], f"group:{labels['group']}"]
        if "node" in labels:
            tags.append(f"node:{labels['node']}")
        body: dict[str, Any] = {
            "time": change.starts_bucket_ts,
            "tags": tags,
            "text": f"{notes['summary']}: {notes['description']}",
        }
        if self._dashboard_uid:
            body["dashboardUID"] = self._dashboard_uid
        if with_end:
            body["timeEnd"] = change.bucket_ts + self._bucket_ms
        return body

    async def _apply(self, key: str, change: AlertChange) -> bool:
        """Send one alert's change; False if Grafana is away (retry), True when done or dropped."""
        known = self._ids.get(key)
        if change.status == "firing" and known is not None:
            return True  # a re-send of an open region: nothing to mark
        if change.status == "resolved" and known is not None:
            request = self._client.build_request(
                "PATCH",
                f"{self._base}/api/annotations/{known}",
                json={"timeEnd": change.bucket_ts + self._bucket_ms},
            )
        else:
            request = self._client.build_request(
                "POST",
                f"{self._base}/api/annotations",
                json=self._body(change, with_end=change.status == "resolved"),
            )
        try:
            reply = await self._client.send(request, auth=self._auth)
        except httpx.TransportError as exc:
            log.warning("grafana_unavailable", error=exc, pending=len(self._outbox))
            return False
        if reply.status_code >= 500:
            log.warning("grafana_unavailable", status=reply.status_code, pending=len(self._outbox))
            return False
        if reply.status_code >= 400:
            log.error("grafana_rejected", status=reply.status_code, reply=reply.text[:300])
            return True
        if change.status == "firing":
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._ids[key] = int(reply.json()["id"])
        else:
            self._ids.pop(key, None)
        return True

    async def _send(self, batch: dict[str, dict[str, Any]]) -> Outcome:
        """Apply the batch alert by alert, each taken out as it is done (a PATCH or POST
        must not be repeated after a later one failed)."""
        for key, item in batch.items():
            if not await self._apply(key, AlertChange.from_dict(item)):
                return Outcome.RETRY
            self._outbox.done({key: item})
        return Outcome.SENT

    async def flush(self) -> bool:
        """Apply what is queued once; True when nothing is left."""
        if len(self._outbox):
            await self._send(self._outbox.items())
        return not len(self._outbox)

    async def run(self) -> None:
        """Deliver forever: what is queued now, then whatever is submitted later."""
        self._wake.set()
        await deliver_forever(
            self._outbox, self._send, self._wake, backoff_max_s=self._backoff_max_s
        )
