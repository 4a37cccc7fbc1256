"""A group that moved to another worker (a rebalance) is forgotten here, whole.

``Pipeline.forget`` drops its window, detector, GPU-health and alert state, so
that if the group comes back it is restored from the table (the new owner's
newer snapshot) rather than continued from stale memory; the Alertmanager sink
stops re-sending its firing alerts, which the new owner may have resolved.
"""

from __future__ import annotations

import asyncio
import json

import httpx

from detectors.group import ScoringParams
from streams.catalog import DEFAULT_FEATURES, load_xid_catalog
from streams.frames import Frame
from streams.sinks.alertmanager import AlertmanagerSink
from streams.worker.pipeline import Pipeline

B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(6)]


def pipeline() -> Pipeline:
    return Pipeline(DEFAULT_FEATURES, ScoringParams(), load_xid_catalog("report"))


def score(p: Pipeline, group: str, buckets: range) -> None:
    for i in buckets:
        ts = T0 + i * B
        for node in NODES:
            p.add(Frame(group, node, ts, {"procs_running": 10.0, "xid_last@0": 0.0}), ts / 1000)
        p.due(group, ts / 1000 + 60)


def test_a_forgotten_group_holds_nothing_and_restores_the_newer_snapshot() -> None:
    old, new = pipeline(), pipeline()
    score(old, "job-a", range(3))
    new.restore("job-a", json.loads(json.dumps(old.snapshot("job-a"))))
    score(new, "job-a", range(3, 6))  # the new owner moves on
    old.forget("job-a")
    assert "job-a" not in old.windows and "job-a" not in old.groups
    assert not old.node_health.snapshot("job-a")
    old.restore("job-a", json.loads(json.dumps(new.snapshot("job-a"))))
    assert old.window("job-a").closed_upto == T0 + 5 * B


def test_the_sink_stops_resending_a_forgotten_groups_alerts() -> None:
    posted: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        posted.extend(a["labels"]["group"] for a in json.loads(request.content))
        return httpx.Response(200)

    def alert(group: str) -> dict:
        labels = {"alertname": "PeerwatchNodeCollapse", "group": group, "node": "n1"}
        return {"status": "firing", "labels": labels, "starts_at_s": T0 / 1000}

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            sink = AlertmanagerSink("http://am", client, resend_s=0.05)
            sink.keep_firing([alert("job-a"), alert("job-b")])
            sink.forget_group("job-a")
            task = asyncio.create_task(sink.run())
            await asyncio.sleep(0.3)
            task.cancel()

    asyncio.run(run())
    assert posted and set(posted) == {"job-b"}
