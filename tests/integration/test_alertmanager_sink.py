"""AlertmanagerSink against a real Alertmanager: delivery, resolve, outage, outbox, resend, identity

Every test uses its own ``alertname`` (or node) and reads Alertmanager's API v2 back with
a matcher on it, so tests share the session's Alertmanager without seeing each
other's alerts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from detectors.alerts import NODE_COLLAPSE, AlertParams, Observation, step_alerts
from detectors.fusion import Signal
from streams.lab.launchers import Alertmanager, free_port
from streams.sinks.alertmanager import AlertmanagerSink, rfc3339
from streams.sinks.payloads import to_payload
from tests.integration import harness

ARRIVE_TIMEOUT_S = 10.0


def unique_alertname() -> str:
    return f"PeerwatchTest{uuid.uuid4().hex[:10]}"


def alert(alertname: str, status: str = "firing", node: str = "gpu-01") -> dict[str, Any]:
    """An alert state as peerwatch's alerting hands it to the sink."""
    return {
        "status": status,
        "labels": {"alertname": alertname, "node": node, "group": "train-a", "severity": "warning"},
        "annotations": {"summary": f"{node} deviates from its peers", "score": "7.5"},
        "starts_at_s": time.time() - 60,
        "generator_url": "http://peerwatch.test/groups/train-a",
    }


async def active_alerts(client: httpx.AsyncClient, base_url: str, alertname: str) -> list[dict]:
    """Alerts Alertmanager holds as active (not resolved) with this alertname."""
    reply = await client.get(
        f"{base_url}/api/v2/alerts", params={"filter": f'alertname="{alertname}"'}
    )
    reply.raise_for_status()
    return list(reply.json())


async def wait_for(check: Callable[[], Any], timeout_s: float = ARRIVE_TIMEOUT_S) -> Any:
    """``harness.wait_for`` at Alertmanager's pace (it answers within milliseconds)."""
    return await harness.wait_for(check, timeout_s, "Alertmanager's view", every_s=0.1)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@contextlib.asynccontextmanager
async def running(sink: AlertmanagerSink) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(sink.run(), name="alertmanager-sink")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # re-raises what run() died of, if it died


@pytest_asyncio.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


# --- (a) firing, then resolved ------------------------------------------------------------------


async def test_firing_alert_shows_up_with_its_labels_and_annotations(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    name = unique_alertname()
    sink = AlertmanagerSink(alertmanager_url, client)
    sent = alert(name)
    async with running(sink):
        sink.submit([sent])
        (shown,) = await wait_for(lambda: active_alerts(client, alertmanager_url, name))
    assert shown["labels"] == sent["labels"]
    assert shown["annotations"] == sent["annotations"]
    assert shown["status"]["state"] == "active"
    assert shown["generatorURL"] == sent["generator_url"]
    assert parse_time(shown["endsAt"]).timestamp() > time.time()
    assert sink.pending == 0


async def test_resolved_state_removes_the_alert_from_the_active_list(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    name = unique_alertname()
    sink = AlertmanagerSink(alertmanager_url, client)
    async with running(sink):
        sink.submit([alert(name)])
        await wait_for(lambda: active_alerts(client, alertmanager_url, name))
        sink.submit([alert(name, status="resolved")])

        async def gone() -> bool:
            return not await active_alerts(client, alertmanager_url, name)

        await wait_for(gone)
    assert sink.pending == 0


async def test_resolving_one_alert_leaves_the_others_firing(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    name = unique_alertname()
    sink = AlertmanagerSink(alertmanager_url, client)
    async with running(sink):
        sink.submit([alert(name, node="gpu-01"), alert(name, node="gpu-02")])

        async def both() -> bool:
            return len(await active_alerts(client, alertmanager_url, name)) == 2

        await wait_for(both)
        sink.submit([alert(name, status="resolved", node="gpu-01")])

        async def only_second() -> list[str]:
            shown = await active_alerts(client, alertmanager_url, name)
            return [a["labels"]["node"] for a in shown] == ["gpu-02"]

        await wait_for(only_second)


# --- (b) Alertmanager outage --------------------------------------------------------------------


async def test_alerts_submitted_during_an_outage_arrive_once_alertmanager_is_up(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    outcomes: list[tuple[str, int]] = []
    sink = AlertmanagerSink(
        url, client, backoff_max_s=1.0, on_result=lambda outcome, n: outcomes.append((outcome, n))
    )
    name = unique_alertname()
    alertmanager = Alertmanager(tmp_path / "alertmanager", port=port)
    async with running(sink):
        sink.submit([alert(name, node="gpu-01"), alert(name, node="gpu-02")])
        sink.submit([alert(name, node="gpu-03", status="resolved")])

        async def retried_twice() -> bool:
            return outcomes.count(("unavailable", 3)) >= 2

        await wait_for(retried_twice)
        assert sink.pending == 3  # nothing dropped while Alertmanager is away
        await asyncio.to_thread(alertmanager.start)
        try:

            async def arrived() -> list[str]:
                shown = await active_alerts(client, url, name)
                return sorted(a["labels"]["node"] for a in shown)

            assert await wait_for(arrived) == ["gpu-01", "gpu-02"]
            assert sink.pending == 0
            assert outcomes[-1] == ("sent", 3)
        finally:
            await asyncio.to_thread(alertmanager.stop)


# --- (c) the outbox keeps the latest state per label set ----------------------------------------


async def test_firing_then_resolved_before_delivery_sends_only_resolved_once(
    alertmanager_url: str,
) -> None:
    name = unique_alertname()
    posted: list[list[dict]] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST":
            posted.append(json.loads(request.content))

    async with httpx.AsyncClient(event_hooks={"request": [record]}) as client:
        sink = AlertmanagerSink(alertmanager_url, client)
        sink.submit([alert(name)])
        sink.submit([alert(name, status="resolved")])
        assert sink.pending == 1
        before = time.time()
        async with running(sink):

            async def delivered() -> bool:
                return sink.pending == 0 and bool(posted)

            await wait_for(delivered)
            await asyncio.sleep(0.3)  # room for a (wrong) second delivery
        after = time.time()
        assert len(posted) == 1 and len(posted[0]) == 1
        (wire,) = posted[0]
        assert wire["labels"]["alertname"] == name
        # resolved: endsAt is the send time (RFC 3339, truncated to the millisecond)
        ends_ms = round(parse_time(wire["endsAt"]).timestamp() * 1000)  # whole ms
        assert int(before * 1000) <= ends_ms <= int(after * 1000) + 1
        assert await active_alerts(client, alertmanager_url, name) == []


async def test_repeated_firing_submits_before_delivery_send_one_alert(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    name = unique_alertname()
    sink = AlertmanagerSink(alertmanager_url, client)
    for score in ("3.0", "5.0", "9.0"):
        sent = alert(name)
        sent["annotations"]["score"] = score
        sink.submit([sent])
    assert sink.pending == 1
    assert await sink.flush() is True
    (shown,) = await active_alerts(client, alertmanager_url, name)
    assert shown["annotations"]["score"] == "9.0"  # the latest state won


# --- (d) resend loop ----------------------------------------------------------------------------


async def test_resend_loop_moves_endsat_of_firing_alerts_forward(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    name = unique_alertname()
    sink = AlertmanagerSink(alertmanager_url, client, resend_s=0.5)
    async with running(sink):
        sink.submit([alert(name)])
        (first,) = await wait_for(lambda: active_alerts(client, alertmanager_url, name))
        first_end = parse_time(first["endsAt"])
        # endsAt = send time + 4 × resend_s: about 2 s ahead, so a resend keeps it alive
        assert 0 < (first_end.timestamp() - time.time()) <= 4 * 0.5 + 0.5

        async def moved_on() -> list[dict]:
            shown = await active_alerts(client, alertmanager_url, name)
            return [a for a in shown if parse_time(a["endsAt"]) > first_end]

        await wait_for(moved_on, timeout_s=5.0)
        await asyncio.sleep(2.5)  # longer than one endsAt horizon (2 s): resends keep it
        assert len(await active_alerts(client, alertmanager_url, name)) == 1


async def test_resend_loop_stops_resending_a_resolved_alert(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    """... once its ``resolved_resend_s`` has passed."""
    name = unique_alertname()
    posted: list[str] = []
    sink = AlertmanagerSink(
        alertmanager_url,
        client,
        resend_s=0.3,
        resolved_resend_s=0.5,
        on_result=lambda o, n: posted.append(o),
    )
    async with running(sink):
        sink.submit([alert(name)])
        await wait_for(lambda: active_alerts(client, alertmanager_url, name))
        sink.submit([alert(name, status="resolved")])

        async def gone() -> bool:
            return not await active_alerts(client, alertmanager_url, name)

        await wait_for(gone)
        await asyncio.sleep(0.8)  # past the resolved re-sends
        sends = len(posted)
        await asyncio.sleep(1.0)  # three resend ticks
    assert len(posted) == sends
    assert await active_alerts(client, alertmanager_url, name) == []


async def test_a_stale_firing_delivered_after_the_resolve_is_overruled_by_a_resend(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    """A request held by a stalled network reaches Alertmanager after the resolve (seen in
    `peerwatch chaos` with am-stall): the resolved state is re-sent and wins again."""
    name = unique_alertname()
    sink = AlertmanagerSink(alertmanager_url, client, resend_s=0.3)
    async with running(sink):
        sink.submit([alert(name)])
        await wait_for(lambda: active_alerts(client, alertmanager_url, name))
        # the firing state as a worker with the default re-send period sent it: 4 min endsAt
        stale = {
            "labels": alert(name)["labels"],
            "startsAt": rfc3339(time.time() - 60),
            "endsAt": rfc3339(time.time() + 240),
        }
        sink.submit([alert(name, status="resolved")])

        async def gone() -> bool:
            return not await active_alerts(client, alertmanager_url, name)

        await wait_for(gone)
        await client.post(f"{alertmanager_url}/api/v2/alerts", json=[stale])
        assert await active_alerts(client, alertmanager_url, name)  # it fires again ...
        await wait_for(gone)  # ... until the next re-send of the resolved state


async def test_keep_firing_puts_alerts_on_the_resend_schedule_without_sending_now(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    name = unique_alertname()
    sink = AlertmanagerSink(alertmanager_url, client, resend_s=0.5)
    sink.keep_firing([alert(name)])
    assert sink.pending == 0
    async with running(sink):
        (shown,) = await wait_for(lambda: active_alerts(client, alertmanager_url, name))
    assert shown["labels"]["alertname"] == name


# --- (e) alert identity: one node incident is one alert ------------------------------------------


async def node_alerts(client: httpx.AsyncClient, base_url: str, node: str) -> list[dict]:
    reply = await client.get(f"{base_url}/api/v2/alerts", params={"filter": f'node="{node}"'})
    reply.raise_for_status()
    return list(reply.json())


async def test_a_node_incident_whose_worst_gpu_changes_is_one_alert_and_resolves(
    alertmanager_url: str, client: httpx.AsyncClient
) -> None:
    """The lifecycle → payload → sink path, as the worker publishes: changes, then active."""
    node = f"gpu-{uuid.uuid4().hex[:10]}"
    key = (NODE_COLLAPSE, node)
    sink = AlertmanagerSink(alertmanager_url, client, resend_s=0.2)
    alerts: dict = {}
    seen_while_firing: list[int] = []
    start = int(time.time() * 1000) - 60_000
    async with running(sink):
        for i, gpu in enumerate(["2", "5", "7", None, None, None, None]):
            obs = {}
            if gpu is not None:  # stronger each bucket, so its signals (and worst GPU) move
                signal = Signal("gpu_util", -(5.0 + i), 0.0, 99.0, gpu)
                obs = {key: Observation("present", 5.0 + i, (signal,), f"collapse on gpu {gpu}")}
            step = step_alerts(
                alerts, obs, group="train-a", bucket_ts=start + i * 30_000, params=AlertParams()
            )
            alerts = dict(step.alerts)
            sink.submit(to_payload(c) for c in step.changes)
            sink.keep_firing(to_payload(a) for a in step.active)
            await asyncio.sleep(0.5)  # a few resend ticks
            if step.active:
                shown = await wait_for(lambda: node_alerts(client, alertmanager_url, node))
                seen_while_firing.append(len(shown))

        async def gone() -> bool:
            return not await node_alerts(client, alertmanager_url, node)

        await wait_for(gone)
        await asyncio.sleep(0.6)  # resend ticks must not bring a stale label set back
        assert await node_alerts(client, alertmanager_url, node) == []
    assert seen_while_firing == [1, 1, 1, 1, 1, 1]


# --- secrets ------------------------------------------------------------------------------------


async def test_the_url_password_reaches_no_log_and_still_authenticates(
    alertmanager_url: str, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A URL with userinfo: the alert is delivered (as Basic auth), and no log record of any
    logger, at any level, holds the password (httpx logged each request's URL at INFO)."""
    marker = f"pw-{uuid.uuid4().hex}"
    name = unique_alertname()
    host = alertmanager_url.split("://", 1)[1]
    sink = AlertmanagerSink(f"http://peerwatch:{marker}@{host}", client)
    seen: list[httpx.Request] = []

    async def keep(request: httpx.Request) -> None:
        seen.append(request)

    client.event_hooks["request"].append(keep)
    caplog.set_level(logging.DEBUG)
    async with running(sink):
        sink.submit([alert(name)])
        await wait_for(lambda: active_alerts(client, alertmanager_url, name))
    posts = [r for r in seen if r.method == "POST"]
    assert posts and all(r.headers["authorization"].startswith("Basic ") for r in posts)
    assert any(r.name == "httpx" for r in caplog.records)  # httpx did log the requests
    assert not [r.getMessage() for r in caplog.records if marker in r.getMessage()]
