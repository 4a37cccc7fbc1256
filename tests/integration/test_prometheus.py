"""Real Prometheus in front: node_exporter → Prometheus → remote_write → `peerwatch ingest` → Kafka.

Debian's ``prometheus`` scrapes Debian's ``prometheus-node-exporter`` every
second and remote-writes through the shipped ``deploy/prometheus/remote_write.yml``
(its keep rule unchanged; only the URL and the send deadline are local) to a
real ``peerwatch ingest`` on the session's Apache Kafka. The node's frames on
the frames topic must carry its node_exporter features.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiokafka import AIOKafkaConsumer

from streams.deploy_config import catalog_metric_names
from streams.services import NodeExporter, Prometheus
from tests.integration.conftest import start_or_fail
from tests.integration.harness import Deployment, wait_for

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "remote_write.yml"
SCRAPE_S = 1
BUCKET_S = 2
# Features every Linux node_exporter provides (stat, cpu, meminfo collectors).
NODE_FEATURES = {"intr_rate", "procs_running", "ctx_switch_rate", "cpu_idle_cores", "slab_bytes"}
FRAMES_TIMEOUT_S = 60.0


def prometheus_yml(target: str, cluster: str, write_url: str) -> dict[str, Any]:
    """A prometheus.yml scraping ``target`` with the shipped remote_write entry, sent to us."""
    (writer,) = yaml.safe_load(SHIPPED.read_text())["remote_write"]
    writer["url"] = write_url
    writer["queue_config"]["batch_send_deadline"] = f"{SCRAPE_S}s"  # the test's patience
    return {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
        "scrape_configs": [
            {
                "job_name": "node",
                "static_configs": [{"targets": [target], "labels": {"cluster": cluster}}],
            }
        ],
        "remote_write": [writer],
    }


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[NodeExporter]:
    exporter = NodeExporter(tmp_path)
    start_or_fail(exporter)
    try:
        yield exporter
    finally:
        exporter.stop()


@pytest.fixture
def deployment(kafka_bootstrap: str, tmp_path: Path) -> Deployment:
    """An ingest with its own topics, grouping by ``cluster`` (the default), short buckets."""
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    deployment.env["PEERWATCH_GROUP_LABELS"] = '["cluster"]'
    deployment.env["PEERWATCH_BUCKET_S"] = str(BUCKET_S)
    return deployment


@pytest.fixture
def prometheus(
    tmp_path: Path, node_exporter: NodeExporter, deployment: Deployment
) -> Iterator[Prometheus]:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(prometheus_yml(node_exporter.target, deployment.job, deployment.write_url))
    )
    server = Prometheus(tmp_path / "prometheus", config)
    start_or_fail(server)
    try:
        yield server
    finally:
        server.stop()


async def test_node_exporter_features_reach_the_frames_topic(
    kafka_bootstrap: str, deployment: Deployment, prometheus: Prometheus
) -> None:
    frames_topic = deployment.env["PEERWATCH_TOPIC_FRAMES"]
    with deployment.ingest():
        consumer = AIOKafkaConsumer(
            frames_topic,
            bootstrap_servers=kafka_bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        seen: set[str] = set()
        frames: list[dict] = []

        async def node_features() -> set[str]:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                for message in messages:
                    frame = json.loads(message.value)
                    frames.append(frame)
                    if frame["group"] == deployment.job and frame["node"] == "127.0.0.1":
                        seen.update(frame["values"])
            return seen if seen >= NODE_FEATURES else set()

        try:
            what = f"frames of node 127.0.0.1 with all of {sorted(NODE_FEATURES)}"
            await wait_for(node_features, FRAMES_TIMEOUT_S, what)
        finally:
            await consumer.stop()
    ours = [f for f in frames if f["group"] == deployment.job]
    assert {f["node"] for f in ours} == {"127.0.0.1"}  # instance 127.0.0.1:<port>, port dropped
    assert all(f["ts"] % (BUCKET_S * 1000) == 0 for f in ours)


async def test_prometheus_loaded_the_shipped_keep_rule(prometheus: Prometheus) -> None:
    """Prometheus' own YAML parser reads the generated regex as the catalog's names, one
    alternation (the escaped line breaks join without spaces)."""
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"{prometheus.url}/api/v1/status/config")
    reply.raise_for_status()
    loaded = yaml.safe_load(reply.json()["data"]["yaml"])
    (rule,) = loaded["remote_write"][0]["write_relabel_configs"]
    assert rule["action"] == "keep"
    # Prometheus shows relabel regexes anchored: ^(?:...)$
    assert rule["regex"] in {
        "|".join(catalog_metric_names()),
        f"^(?:{'|'.join(catalog_metric_names())})$",
    }
