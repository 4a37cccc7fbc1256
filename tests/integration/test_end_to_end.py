"""The spine, end to end on real parts.

simulator → HTTP remote_write → `peerwatch ingest` → Apache Kafka → `peerwatch
worker` (Faust) → Alertmanager and the ``peerwatch.alerts`` topic. A 60-node
job (plus 3 spares) runs through several checkpoint saves, then one node gets
an NVLink + bus fault. Alertmanager's own API must show a critical alert for
exactly that node, starting no later than the bucket that holds the XID, and
nothing for the 59 healthy nodes; the alerts topic must carry the same alerts
that the in-process pipeline decides for the same samples.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer

from streams.offline import run_offline
from streams.services import PeerwatchProcess, free_port
from streams.settings import Settings
from streams.sources.simulator import ClusterConfig, NvlinkBusFault, generate, replay

BUCKET_MS = 30_000
VICTIM = "gpu084"


def _scenario() -> tuple[ClusterConfig, int, int]:
    """Saves every ~10 min, the fault 40 simulated minutes in; ends 3 buckets after it."""
    now_ms = int(time.time() * 1000)
    start = (now_ms - 2 * 3600_000) // BUCKET_MS * BUCKET_MS
    onset = start + 40 * 60_000 + 7_000
    config = ClusterConfig(
        seed=11,
        start_ms=start,
        checkpoint_interval_s=600.0,
        faults=(NvlinkBusFault(node=VICTIM, gpu=3, onset_ms=onset),),
    )
    xid_bucket = onset // BUCKET_MS * BUCKET_MS
    return config, xid_bucket, xid_bucket + 3 * BUCKET_MS


async def _alerts_in_alertmanager(url: str) -> list[dict]:
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"{url}/api/v2/alerts", params={"filter": 'source="peerwatch"'})
    reply.raise_for_status()
    return reply.json()


async def _read_topic(bootstrap: str, topic: str, idle_s: float = 3.0) -> list[dict]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[dict] = []
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=int(idle_s * 1000))
            if not batch:
                return records
            for messages in batch.values():
                records.extend(json.loads(m.value) for m in messages)
    finally:
        await consumer.stop()


async def _wait_for(predicate, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.5)


async def test_only_the_faulty_node_alerts_at_or_before_its_xid(
    kafka_bootstrap: str, alertmanager_url: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    ingest_port, metrics_port = free_port(), free_port()
    env = {
        "PEERWATCH_KAFKA": f"kafka://{kafka_bootstrap}",
        "PEERWATCH_TOPIC_FRAMES": f"frames-{run}",
        "PEERWATCH_TOPIC_ALERTS": f"alerts-{run}",
        "PEERWATCH_TOPIC_XID": f"xid-{run}",
        "PEERWATCH_APP_ID": f"peerwatch-e2e-{run}",
        "PEERWATCH_GROUP_LABELS": '["train_job"]',
        "PEERWATCH_INGEST_PORT": str(ingest_port),
        "PEERWATCH_WORKER_WEB_PORT": str(metrics_port),
        "PEERWATCH_DATADIR": str(tmp_path / "worker"),
        "PEERWATCH_ALERTMANAGER_URL": alertmanager_url,
    }
    config, xid_bucket, end_ms = _scenario()
    ingest = PeerwatchProcess(
        ["ingest"], env, tmp_path / "ingest.log", f"http://127.0.0.1:{ingest_port}/-/ready"
    )
    worker = PeerwatchProcess(
        ["worker"],
        env,
        tmp_path / "worker.log",
        f"http://127.0.0.1:{metrics_port}/metrics",
        "peerwatch_worker_ready 1.0",
    )
    with ingest, worker:
        stats = await replay(f"http://127.0.0.1:{ingest_port}/api/v1/write", config, end_ms=end_ms)
        assert stats.rounds == (end_ms - config.start_ms) // BUCKET_MS

        async def victim_alerted() -> list[dict]:
            alerts = await _alerts_in_alertmanager(alertmanager_url)
            return [a for a in alerts if a["labels"].get("node") == VICTIM]

        await _wait_for(victim_alerted, 90, f"an Alertmanager alert for {VICTIM}")

        async def last_bucket_scored() -> bool:
            async with httpx.AsyncClient() as client:
                page = (await client.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
            return _scored(page) >= stats.rounds  # every bucket, the last one included

        await _wait_for(last_bucket_scored, 60, "the worker to score the last buckets")
        await asyncio.sleep(2)  # the sink posts asynchronously
        alerts = await _alerts_in_alertmanager(alertmanager_url)
        topic_records = await _read_topic(kafka_bootstrap, f"alerts-{run}")

    # Exactly the faulty node, critical, starting no later than the XID's bucket.
    assert {a["labels"].get("node") for a in alerts} == {VICTIM}, alerts
    collapse = [a for a in alerts if a["labels"]["alertname"] == "PeerwatchNodeCollapse"]
    assert collapse and collapse[0]["labels"]["severity"] == "critical"
    starts_ms = _epoch_ms(collapse[0]["startsAt"])
    assert starts_ms <= xid_bucket, (starts_ms, xid_bucket)
    assert "intr_rate" in collapse[0]["annotations"]["signals"]

    # The live path decided what the in-process pipeline decides for the same samples.
    offline = run_offline(generate(config, end_ms=end_ms), Settings(group_labels=["train_job"]))
    expected = [(c.status, c.alertname, c.node, c.bucket_ts) for c in offline.changes]
    live = [
        (r["status"], r["labels"]["alertname"], r["labels"].get("node"), r["bucket_ts"])
        for r in topic_records
    ]
    assert live == expected


def _scored(page: str) -> int:
    total = 0.0
    for line in page.splitlines():
        if line.startswith("peerwatch_worker_buckets_scored_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def _epoch_ms(rfc3339: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)
