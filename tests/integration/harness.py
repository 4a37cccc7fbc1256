"""Shared parts of the tests that run peerwatch's own processes end to end."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from aiokafka import AIOKafkaConsumer

from streams.services import PeerwatchProcess, free_port

T = TypeVar("T")


@dataclass
class Deployment:
    """The environment of one ingest + worker pair with topics of its own."""

    env: dict[str, str]
    ingest_port: int
    metrics_port: int
    alerts_topic: str
    workdir: Path
    job: str  # the simulated job's name: its peer group, unique to this deployment

    @classmethod
    def new(cls, kafka_bootstrap: str, alertmanager_url: str, workdir: Path) -> Deployment:
        run = uuid.uuid4().hex[:8]
        ingest_port, metrics_port = free_port(), free_port()
        env = {
            "PEERWATCH_KAFKA": f"kafka://{kafka_bootstrap}",
            "PEERWATCH_TOPIC_FRAMES": f"frames-{run}",
            "PEERWATCH_TOPIC_ALERTS": f"alerts-{run}",
            "PEERWATCH_TOPIC_XID": f"xid-{run}",
            "PEERWATCH_APP_ID": f"peerwatch-test-{run}",
            "PEERWATCH_GROUP_LABELS": '["train_job"]',
            "PEERWATCH_INGEST_PORT": str(ingest_port),
            "PEERWATCH_WORKER_WEB_PORT": str(metrics_port),
            "PEERWATCH_DATADIR": str(workdir / "worker"),
            "PEERWATCH_ALERTMANAGER_URL": alertmanager_url,
        }
        return cls(env, ingest_port, metrics_port, f"alerts-{run}", workdir, f"job-{run}")

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.ingest_port}/api/v1/write"

    def ingest(self) -> PeerwatchProcess:
        return PeerwatchProcess(
            ["ingest"],
            self.env,
            self.workdir / "ingest.log",
            f"http://127.0.0.1:{self.ingest_port}/-/ready",
        )

    def worker(self) -> PeerwatchProcess:
        return PeerwatchProcess(
            ["worker"],
            self.env,
            self.workdir / "worker.log",
            f"http://127.0.0.1:{self.metrics_port}/metrics",
            "peerwatch_worker_ready 1.0",
        )

    async def buckets_scored(self) -> int:
        """Group buckets the worker has scored (from its /metrics)."""
        async with httpx.AsyncClient() as client:
            page = (await client.get(f"http://127.0.0.1:{self.metrics_port}/metrics")).text
        total = 0.0
        for line in page.splitlines():
            if line.startswith("peerwatch_worker_buckets_scored_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)


async def alerts_in_alertmanager(url: str, group: str) -> list[dict]:
    """peerwatch's alerts for one peer group (tests share one Alertmanager)."""
    params = {"filter": ['source="peerwatch"', f'group="{group}"']}
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"{url}/api/v2/alerts", params=params)
    reply.raise_for_status()
    return reply.json()


async def read_topic(bootstrap: str, topic: str, idle_s: float = 3.0) -> list[dict]:
    """Every message of ``topic`` from the start, as JSON (stops after ``idle_s`` of quiet)."""
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


async def wait_for(predicate: Callable[[], Awaitable[T]], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.5)


def epoch_ms(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)
