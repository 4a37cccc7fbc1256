"""The scheduler's job events place nodes in their job's peer group, over real Kafka and HTTP.

Series carry only ``cluster`` (what node_exporter sends); the job comes from a
``running`` event on the jobs topic, or from a JSON-lines file.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.ingest.remote_write import encode_write_request
from tests.integration.test_ingest_http import (
    B,
    IngestFactory,
    node_series,
    post,
    recent_bucket_start,
    settings_for,
    start_ingest,  # noqa: F401  (the fixture)
    unique,
    wait_ready,
)

pytestmark = pytest.mark.integration
DEADLINE_S = 40.0


async def _groups_of_frames(bootstrap: str, topic: str, node: str, want: str) -> set[str]:
    """Groups of ``node``'s frames on ``topic``, read until one is ``want`` or the deadline."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    groups: set[str] = set()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while want not in groups and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                for m in messages:
                    frame = json.loads(m.value)
                    if frame["node"] == node and not frame.get("left"):
                        groups.add(frame["group"])
    finally:
        await consumer.stop()
    return groups


async def _stream_until(client, bootstrap: str, topic: str, node: str, want: str) -> set[str]:  # type: ignore[no-untyped-def]
    """Send a scrape of ``node`` per bucket (the follower may still be reading) until a frame
    of ``want`` shows up."""
    start = recent_bucket_start(buckets_ago=20)
    reader = asyncio.create_task(_groups_of_frames(bootstrap, topic, node, want))
    for i in range(15):
        if reader.done():
            break
        ts = start + i * B + 1_000
        body = encode_write_request(node_series("c1", f"{node}:9100", ts, 1e6 + i * 3e7, 12))
        assert (await post(client, body))[0] == 204
        await asyncio.sleep(0.5)
    return await reader


async def test_a_running_event_on_the_jobs_topic_puts_the_node_in_its_job(
    kafka_bootstrap: str,
    start_ingest: IngestFactory,  # noqa: F811
) -> None:
    jobs = unique("jobs")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        event = {"job": "llm-42", "state": "running", "nodes": ["gpu-07"], "ts": 1}
        await producer.send_and_wait(jobs, json.dumps(event).encode(), key=b"llm-42")
        await producer.send_and_wait(jobs, b"not an event", key=b"junk")  # logged, skipped
    finally:
        await producer.stop()
    client, settings = await start_ingest(settings_for(kafka_bootstrap, topic_jobs=jobs))
    await wait_ready(client)
    groups = await _stream_until(client, kafka_bootstrap, settings.topic_frames, "gpu-07", "llm-42")
    assert "llm-42" in groups


async def test_a_membership_file_puts_the_node_in_its_job(
    kafka_bootstrap: str,
    start_ingest: IngestFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        json.dumps({"job": "llm-43", "state": "running", "nodes": ["gpu-08"], "ts": 1}) + "\n"
    )
    client, settings = await start_ingest(settings_for(kafka_bootstrap, membership_file=path))
    await wait_ready(client)
    groups = await _stream_until(client, kafka_bootstrap, settings.topic_frames, "gpu-08", "llm-43")
    assert "llm-43" in groups
