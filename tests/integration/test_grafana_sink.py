"""The Grafana annotations contract: a region per incident, closed when it resolves.

No Grafana build installs here, so an in-process aiohttp server speaks the
documented annotations API (POST /api/annotations → {"id"}, PATCH
/api/annotations/:id) and records what it was sent; the sink runs over real
HTTP against it, through an outage.
"""

from __future__ import annotations

import asyncio

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer

from detectors.alerts import AlertChange
from streams.sinks.grafana import GrafanaSink

T0 = 1_760_000_010_000


def _change(status: str, bucket_ts: int) -> AlertChange:
    return AlertChange(
        "PeerwatchNodeCollapse",
        "gpu081",
        "llm",
        status,
        "critical",
        12.0,
        (),
        "collapse: intr_rate 80 K < 0.5 * peer median 300 K",
        bucket_ts,
        T0,
        T0,
    )


class FakeGrafana:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict, str | None]] = []
        self.down = False

    async def post(self, request: web.Request) -> web.Response:
        return await self._record(request, {"id": 41 + len(self.requests), "message": "added"})

    async def patch(self, request: web.Request) -> web.Response:
        return await self._record(request, {"message": "updated"})

    async def _record(self, request: web.Request, reply: dict) -> web.Response:
        if self.down:
            return web.json_response({"message": "unavailable"}, status=503)
        auth = request.headers.get("Authorization")
        self.requests.append((request.method, request.path, await request.json(), auth))
        return web.json_response(reply)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/annotations", self.post)
        app.router.add_patch("/api/annotations/{id}", self.patch)
        return app


async def test_a_firing_alert_opens_a_region_that_its_resolve_closes() -> None:
    grafana = FakeGrafana()
    async with TestServer(grafana.app()) as server, httpx.AsyncClient() as client:
        sink = GrafanaSink(str(server.make_url("")), client, token="s3cret", dashboard_uid="gpu")
        sink.submit([_change("firing", T0)])
        assert await sink.flush()
        sink.submit([_change("firing", T0 + 30_000)])  # a re-send: no new annotation
        sink.submit([_change("resolved", T0 + 120_000)])
        assert await sink.flush()
    (post, patch) = grafana.requests
    assert post[0] == "POST" and post[1] == "/api/annotations"
    assert post[2]["time"] == T0 and post[2]["dashboardUID"] == "gpu"
    assert {"peerwatch", "PeerwatchNodeCollapse", "node:gpu081"} <= set(post[2]["tags"])
    assert post[3] == "Bearer s3cret"
    assert patch[:2] == ("PATCH", "/api/annotations/41")
    assert patch[2] == {"timeEnd": T0 + 150_000}


async def test_an_alert_that_fired_and_resolved_during_an_outage_is_one_region() -> None:
    grafana = FakeGrafana()
    grafana.down = True
    async with TestServer(grafana.app()) as server, httpx.AsyncClient() as client:
        sink = GrafanaSink(str(server.make_url("")), client)
        sink.submit([_change("firing", T0), _change("resolved", T0 + 60_000)])
        assert not await sink.flush()
        assert sink.pending == 1 and grafana.requests == []  # the latest state per alert
        grafana.down = False
        task = asyncio.create_task(sink.run())
        for _ in range(100):
            if sink.pending == 0:
                break
            await asyncio.sleep(0.05)
        task.cancel()
    ((method, _, body, _),) = grafana.requests
    assert method == "POST" and body["time"] == T0 and body["timeEnd"] == T0 + 90_000


async def test_a_region_opened_before_an_outage_is_closed_after_it() -> None:
    grafana = FakeGrafana()
    async with TestServer(grafana.app()) as server, httpx.AsyncClient() as client:
        sink = GrafanaSink(str(server.make_url("")), client)
        sink.submit([_change("firing", T0)])
        assert await sink.flush()
        grafana.down = True
        sink.submit([_change("resolved", T0 + 60_000)])
        assert not await sink.flush()
        grafana.down = False
        assert await sink.flush()
    assert [r[0] for r in grafana.requests] == ["POST", "PATCH"]


async def test_a_resolve_without_a_known_region_posts_the_whole_region() -> None:
    grafana = FakeGrafana()
    async with TestServer(grafana.app()) as server, httpx.AsyncClient() as client:
        sink = GrafanaSink(str(server.make_url("")), client)
        sink.submit([_change("resolved", T0 + 60_000)])  # e.g. after a worker restart
        assert await sink.flush()
    ((method, _, body, _),) = grafana.requests
    assert method == "POST" and body["time"] == T0 and body["timeEnd"] == T0 + 90_000
