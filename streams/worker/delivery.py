"""The worker's HTTP sinks (Alertmanager, Grafana) behind one ``submit``.

Each configured sink runs as a task of its own with its HTTP client open for the
worker's life; its undelivered changes are journaled in ``outbox_dir``, so a restart
delivers what was decided before it. Until a sink's task has started, ``submit``
passes it by: the changes are on the alerts topic, and the firing ones come back to
Alertmanager with the group's next bucket (``keep_firing``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from detectors.vocabulary import AlertChange
from streams.settings import Settings
from streams.sinks.alertmanager import AlertmanagerSink
from streams.sinks.credentials import SinkAccess, access_for
from streams.sinks.grafana import GrafanaSink
from streams.sinks.outbox import open_outbox
from streams.sinks.payloads import AlertLinks, to_payload
from streams.telemetry.metrics import WorkerMetrics

SinkName = Literal["alertmanager", "grafana"]


class _Sink(Protocol):
    async def run(self) -> None: ...


@dataclass(frozen=True)
class _Plan:
    """How one sink is made once its client is open."""

    name: SinkName
    make: Callable[[SinkAccess, httpx.AsyncClient, Path], _Sink]
    client_options: dict[str, Any]


class Sinks:
    """The sinks ``settings`` configures; ``tasks`` are what the worker runs for them."""

    def __init__(self, settings: Settings, metrics: WorkerMetrics, links: AlertLinks) -> None:
        self._settings = settings
        self._links = links
        self._running: dict[SinkName, _Sink] = {}  # the sinks whose task has started
        # undelivered alerts are journaled here, so a restart delivers what was decided before
        self._outbox_dir = settings.outbox_dir or settings.datadir / "outbox"

        def on_delivery(outcome: str, n: int) -> None:
            metrics.deliveries.labels(sink="alertmanager", outcome=outcome).inc(n)

        def alertmanager(access: SinkAccess, client: httpx.AsyncClient, dir: Path) -> _Sink:
            return AlertmanagerSink(
                access.url,
                client,
                auth=access.auth,
                resend_s=settings.alert_resend_s,
                on_result=on_delivery,
                outbox=open_outbox(dir, "alertmanager"),
            )

        def grafana(access: SinkAccess, client: httpx.AsyncClient, dir: Path) -> _Sink:
            return GrafanaSink(
                access.url,
                client,
                auth=access.auth,
                dashboard_uid=settings.grafana_dashboard_uid,
                bucket_ms=settings.bucket_ms,
                outbox=open_outbox(dir, "grafana"),
            )

        self._plans = [
            plan
            for plan, url in (
                (_Plan("alertmanager", alertmanager, {}), settings.alertmanager_url),
                (_Plan("grafana", grafana, {"timeout": 10.0}), settings.grafana_url),
            )
            if url
        ]

    def submit(self, changes: list[AlertChange], active: Iterable[AlertChange]) -> None:
        """A bucket's alert changes, and the alerts still firing after it (re-sent)."""
        if isinstance(grafana := self._running.get("grafana"), GrafanaSink):
            grafana.submit(changes)
        if isinstance(alertmanager := self._running.get("alertmanager"), AlertmanagerSink):
            alertmanager.submit(to_payload(c, self._links) for c in changes)
            alertmanager.keep_firing(to_payload(a, self._links) for a in active)

    def forget_group(self, group: str) -> None:
        """Another worker owns ``group`` now: it re-sends the group's alerts, not this one."""
        if isinstance(alertmanager := self._running.get("alertmanager"), AlertmanagerSink):
            alertmanager.forget_group(group)

    def tasks(self) -> list[Callable[[], Awaitable[None]]]:
        return [self._runner(plan) for plan in self._plans]

    def _runner(self, plan: _Plan) -> Callable[[], Awaitable[None]]:
        async def deliver() -> None:
            access = access_for(self._settings, plan.name)
            async with access.client(**plan.client_options) as client:
                sink = self._running[plan.name] = plan.make(access, client, self._outbox_dir)
                try:
                    await sink.run()
                finally:
                    del self._running[plan.name]

        deliver.__name__ = f"deliver_to_{plan.name}"  # Faust names the task by it
        return deliver
