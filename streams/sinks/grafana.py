"""Mark incidents on Grafana dashboards: one region annotation per alert.

A firing alert becomes an annotation at its start (``POST /api/annotations``,
tags ``peerwatch``, the alertname, node and group, so dashboards find them by
tag); when it resolves the region is closed (``PATCH /api/annotations/:id``
with ``timeEnd``). If the annotation id is unknown at resolve time (the worker
restarted in between), the whole region is posted at once instead.

Delivery follows the Alertmanager sink: a queue of pending operations, retried
with backoff while Grafana is away (transport errors, 5xx); a 4xx is logged
and dropped (our request is wrong; repeating it cannot help). The token is
sent as ``Authorization: Bearer`` and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

from detectors.alerts import AlertChange
from streams.alerting import alert_annotations, alert_labels
from streams.sinks.credentials import without_userinfo

log = logging.getLogger("peerwatch.grafana")


@dataclass
class _Op:
    key: tuple[tuple[str, str], ...]
    change: AlertChange


class GrafanaSink:
    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        *,
        token: str | None = None,
        dashboard_uid: str | None = None,
        bucket_ms: int = 30_000,
        backoff_max_s: float = 30.0,
    ) -> None:
        base, self._auth = without_userinfo(url)  # no password in what httpx logs
        self._base = base.rstrip("/")
        self._client = client
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._dashboard_uid = dashboard_uid
        self._bucket_ms = bucket_ms
        self._backoff_max_s = backoff_max_s
        self._ids: dict[tuple[tuple[str, str], ...], int] = {}
        self._queue: deque[_Op] = deque()
        self._wake = asyncio.Event()

    def submit(self, changes: list[AlertChange]) -> None:
        for change in changes:
            self._queue.append(_Op(tuple(sorted(alert_labels(change).items())), change))
        if self._queue:
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

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

    async def _apply(self, op: _Op) -> bool:
        """Send one operation; False if Grafana is away (retry), True when done or dropped."""
        change = op.change
        known = self._ids.get(op.key)
        if change.status == "firing" and known is not None:
            return True  # a re-send of an open region: nothing to mark
        if change.status == "resolved" and known is not None:
            request = self._client.build_request(
                "PATCH",
                f"{self._base}/api/annotations/{known}",
                json={"timeEnd": change.bucket_ts + self._bucket_ms},
                headers=self._headers,
            )
        else:
            request = self._client.build_request(
                "POST",
                f"{self._base}/api/annotations",
                json=self._body(change, with_end=change.status == "resolved"),
                headers=self._headers,
            )
        try:
            reply = await self._client.send(request, auth=self._auth)
        except httpx.TransportError as exc:
            log.warning("grafana_unavailable error=%r pending=%d", exc, len(self._queue))
            return False
        if reply.status_code >= 500:
            log.warning(
                "grafana_unavailable status=%d pending=%d", reply.status_code, len(self._queue)
            )
            return False
        if reply.status_code >= 400:
            log.error("grafana_rejected status=%d reply=%s", reply.status_code, reply.text[:300])
            return True
        if change.status == "firing":
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._ids[op.key] = int(reply.json()["id"])
        else:
            self._ids.pop(op.key, None)
        return True

    async def flush(self) -> bool:
        """Apply queued operations in order; True when the queue is empty."""
        while self._queue:
            if not await self._apply(self._queue[0]):
                return False
            self._queue.popleft()
        return True

    async def run(self) -> None:
        """Deliver forever: what is queued now, then whatever is submitted later."""
        backoff = 0.5
        while True:
            while not await self.flush():
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._backoff_max_s)
            backoff = 0.5
            await self._wake.wait()
            self._wake.clear()
