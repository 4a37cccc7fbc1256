"""An alert decided while Alertmanager is away is delivered after the worker restarts.

The first sink queues the alert against an Alertmanager port nobody listens on
and is abandoned without delivering (the worker died); a second sink on the same
outbox directory, as the restarted worker opens it, delivers it to the real
Alertmanager.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import pytest

from streams.lab.launchers import free_port
from streams.sinks.alertmanager import AlertmanagerSink
from streams.sinks.outbox import alert_key, open_outbox
from tests.integration.test_alertmanager_sink import (
    active_alerts,
    alert,
    unique_alertname,
    wait_for,
)

pytestmark = pytest.mark.integration


async def test_an_undelivered_alert_is_delivered_after_a_restart(
    alertmanager_url: str, tmp_path: Path
) -> None:
    name = unique_alertname()
    outbox_dir = tmp_path / "outbox"
    async with httpx.AsyncClient() as client:
        dead = f"http://127.0.0.1:{free_port()}"
        journal = open_outbox(outbox_dir, "alertmanager")
        before = AlertmanagerSink(dead, client, outbox=journal)
        before.submit([alert(name)])
        assert not await before.flush()  # Alertmanager unreachable: kept
        journal.close()  # the worker dies: the OS drops its lock, the flushed journal stays

        after = AlertmanagerSink(
            alertmanager_url, client, outbox=open_outbox(outbox_dir, "alertmanager")
        )
        assert after.pending == 1
        assert await after.flush()
        (got,) = await wait_for(lambda: active_alerts(client, alertmanager_url, name))
    assert got["labels"]["alertname"] == name and got["labels"]["node"] == "gpu-01"


async def test_a_restarted_sink_delivers_its_journal_at_once_not_on_the_next_resend(
    alertmanager_url: str, tmp_path: Path
) -> None:
    """``run()`` sends what the journal holds when it starts; before, it waited for the first
    resend tick (``resend_s``, 60 s by default) to deliver alerts decided before the crash."""
    name = unique_alertname()
    journal = open_outbox(tmp_path / "outbox", "alertmanager")
    journal.put(alert_key(alert(name)["labels"]), alert(name))
    journal.close()
    async with httpx.AsyncClient() as client:
        sink = AlertmanagerSink(
            alertmanager_url, client, outbox=open_outbox(tmp_path / "outbox", "alertmanager")
        )
        delivering = asyncio.create_task(sink.run())
        try:
            (got,) = await wait_for(lambda: active_alerts(client, alertmanager_url, name))
        finally:
            delivering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await delivering
    assert got["labels"]["alertname"] == name
