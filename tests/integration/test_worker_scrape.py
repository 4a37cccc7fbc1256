"""Debian's ``prometheus`` scrapes the worker's ``/metrics`` (``serve_worker_http``) as it
does in production (OpenMetrics, gzip) and takes every sample of the page, the per-group
ones from kept text included: the target is up and the samples it stored are the page's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from detectors.fusion import NodeVerdict
from streams.lab.launchers import Prometheus, free_port
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.health import WorkerHealth, serve_worker_http
from tests.integration.harness import prometheus_running, wait_for

GROUPS, NODES = 3, 40


def observe_bucket(m: WorkerMetrics, bucket: int) -> None:
    for g in range(GROUPS):
        group = f"job-{g}"
        verdicts = {
            f"{group}-n{i}": NodeVerdict(f"{group}-n{i}", False, True, True, i / 8 + bucket,
                                         False, (), (), "")
            for i in range(NODES)
        }  # fmt: skip
        frames = {node: {"remap_correctable@0": float(bucket)} for node in verdicts}
        m.nodes.observe(group, verdicts, frames, [])
        m.observe_phase(group, "training")
        m.buckets.labels(group=group).inc()


@pytest.fixture
def worker_port() -> Iterator[tuple[int, WorkerMetrics]]:
    metrics = WorkerMetrics()
    observe_bucket(metrics, 1)
    port = free_port()
    server = serve_worker_http("127.0.0.1", port, WorkerHealth(metrics))
    try:
        yield port, metrics
    finally:
        server.shutdown()


@pytest.fixture
def prometheus(tmp_path: Path, worker_port: tuple[int, WorkerMetrics]) -> Iterator[Prometheus]:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": "worker", "static_configs": [{"targets": [f"127.0.0.1:{worker_port[0]}"]}]}
        ],
    }
    with prometheus_running(tmp_path, config) as server:
        yield server


async def test_prometheus_stores_every_sample_of_the_page_after_each_bucket(
    prometheus: Prometheus, worker_port: tuple[int, WorkerMetrics]
) -> None:
    _, metrics = worker_port
    page = generate_latest(metrics.registry).decode()
    samples = sum(len(f.samples) for f in text_string_to_metric_families(page))
    async with httpx.AsyncClient() as client:

        async def value(query: str) -> float | None:
            reply = await client.get(f"{prometheus.url}/api/v1/query", params={"query": query})
            result = reply.json()["data"]["result"]
            return float(result[0]["value"][1]) if result else None

        async def scraped() -> bool:
            return await value('up{job="worker"}') == 1 and (
                await value('scrape_samples_scraped{job="worker"}') == samples
            )

        await wait_for(scraped, 30, f"a scrape of the worker's {samples} samples")
        assert await value("count(peerwatch_node_score)") == GROUPS * NODES
        observe_bucket(metrics, 2)  # the kept text is renewed: the new values are stored

        async def renewed() -> bool:
            return await value('min(peerwatch_node_remapped_rows{kind="correctable"})') == 2.0

        await wait_for(renewed, 30, "the second bucket's values in Prometheus")
        assert await value('up{job="worker"}') == 1
        assert await value('max(peerwatch_node_score{group="job-2"})') == (NODES - 1) / 8 + 2
