"""The shipped Alertmanager config end to end: peerwatch's sink posts real detector alerts
to the real Alertmanager running deploy/alertmanager/alertmanager.yml (its webhook URLs
pointed at a receiver in this test), which routes, inhibits and delivers them."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiohttp import web

from detectors.alerts import NODE_COLLAPSE, NODE_DEVIATION, AlertChange
from detectors.fusion import Signal
from detectors.gpu_health import GpuHealthParams, GpuHealthState, step_gpu_health
from streams.catalog import load_xid_catalog
from streams.lab.launchers import Alertmanager, free_port
from streams.sinks.alertmanager import AlertmanagerSink
from streams.sinks.payloads import AlertLinks, to_payload
from tests.integration.conftest import start_or_fail

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"
B = 30_000
LINKS = AlertLinks(
    "https://git.example.com/peerwatch/blob/main/docs/runbooks",
    "https://grafana.example.com/d/peerwatch/peerwatch",
)


class Receiver:
    """An on-call webhook: records every notification body by path."""

    def __init__(self) -> None:
        self.port = free_port()
        self.got: dict[str, list[dict[str, Any]]] = {}

    async def handle(self, request: web.Request) -> web.Response:
        self.got.setdefault(request.path, []).append(await request.json())
        return web.Response(status=200)

    def alerts(self, path: str) -> list[dict[str, Any]]:
        return [a for body in self.got.get(path, []) for a in body["alerts"]]

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        app = web.Application()
        app.router.add_post("/{path:.*}", self.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        try:
            yield
        finally:
            await runner.cleanup()


def shipped_config_to(receiver: Receiver, directory: Path) -> Path:
    """The shipped config with only its webhook URLs changed (to the test's receiver)."""
    config = yaml.safe_load(CONFIG.read_text())
    for entry in config["receivers"]:
        for hook in entry.get("webhook_configs", []):
            hook["url"] = f"http://127.0.0.1:{receiver.port}/{entry['name']}"
    path = directory / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def xid_alert(bucket_ts: int) -> AlertChange:
    """A real XID 79 decision (NVIDIA catalog: critical, RESTART_BM) on gpu-a GPU 3."""
    state = GpuHealthState.new(load_xid_catalog("nvidia"), GpuHealthParams())
    step_gpu_health(
        state, "job-r", bucket_ts - B, {"gpu-a": {"xid_last@3": 0.0}}, GpuHealthParams()
    )
    (change,) = step_gpu_health(
        state, "job-r", bucket_ts, {"gpu-a": {"xid_last@3": 79.0}}, GpuHealthParams()
    )
    return change


def peer_alert(alertname: str, node: str, severity: str, bucket_ts: int) -> AlertChange:
    signal = Signal("intr_rate", -9.0, 80_000.0, 300_000.0, None)
    return AlertChange(
        alertname, node, "job-r", "firing", severity, 9.0, (signal,), "interrupts collapsed",  # type: ignore[arg-type]
        bucket_ts, bucket_ts, bucket_ts,
    )  # fmt: skip


async def test_the_shipped_routing_pages_the_xid_drains_the_node_and_inhibits_symptoms(
    tmp_path: Path,
) -> None:
    """XID 79 on gpu-a: on-call's webhook and the drain hook get it, with its runbook, the
    dashboard link and the action label; gpu-a's collapse is inhibited by it; a warning
    deviation on gpu-b reaches no webhook."""
    receiver = Receiver()
    alertmanager = Alertmanager(tmp_path / "am", config=shipped_config_to(receiver, tmp_path))
    start_or_fail(alertmanager)
    now_ms = int(time.time() * 1000) // B * B
    changes = [
        xid_alert(now_ms),
        peer_alert(NODE_COLLAPSE, "gpu-a", "critical", now_ms),
        peer_alert(NODE_DEVIATION, "gpu-b", "warning", now_ms),
    ]
    outcomes: list[str] = []
    try:
        async with receiver.serving(), httpx.AsyncClient() as client:
            sink = AlertmanagerSink(
                alertmanager.url, client, on_result=lambda outcome, n: outcomes.append(outcome)
            )
            task = asyncio.create_task(sink.run())
            sink.submit(to_payload(c, LINKS) for c in changes)
            deadline = time.monotonic() + 30  # group_wait is 10 s
            while not (receiver.alerts("/oncall") and receiver.alerts("/node-remediation")):
                if time.monotonic() > deadline:
                    pytest.fail(f"no notification within 30 s; got {receiver.got}, {outcomes}")
                await asyncio.sleep(0.2)
            await asyncio.sleep(3)  # the other groups flushed at the same group_wait
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        alertmanager.stop()

    assert outcomes and set(outcomes) == {"sent"}
    (paged,) = receiver.alerts("/oncall")
    (drain,) = receiver.alerts("/node-remediation")
    assert paged["labels"] == drain["labels"]
    assert paged["labels"] | {
        "alertname": "PeerwatchXid", "node": "gpu-a", "gpu": "3", "severity": "critical",
        "action": "RESTART_BM", "source": "peerwatch",
    } == paged["labels"]  # fmt: skip
    assert paged["annotations"]["runbook_url"] == (
        "https://git.example.com/peerwatch/blob/main/docs/runbooks/PeerwatchXid.md"
    )
    assert paged["generatorURL"].startswith(
        "https://grafana.example.com/d/peerwatch/peerwatch?var-group=job-r&var-node=gpu-a&from="
    )
    every = [
        a["labels"]["alertname"]
        for body in receiver.got.values()
        for b in body
        for a in b["alerts"]
    ]
    assert every == ["PeerwatchXid", "PeerwatchXid"], receiver.got
    assert not math.isnan(float(paged["annotations"]["score"]))
