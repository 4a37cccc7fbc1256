"""The real services the other integration tests stand on actually work.

Kafka (KRaft) carries records for aiokafka and for a Faust agent with a
table; Alertmanager keeps an alert posted to its API; the embedded Tansu
broker that ``peerwatch demo`` uses carries records too.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import faust
import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

# Generous: the suite shares a 2-core machine with a JVM broker.
RECEIVE_TIMEOUT_S = 45.0


def unique(prefix: str) -> str:
    """A topic / group / app name no other test (or earlier run) has used."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create_topics(bootstrap: str, *names: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]
        )
    finally:
        await admin.close()


async def produce_and_consume(bootstrap: str, **consumer_options: int) -> None:
    """Send one keyed record to a fresh topic and read it back through a consumer group."""
    topic = unique("services-roundtrip")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        sent = await producer.send_and_wait(topic, b"frame-1", key=b"group-a")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=unique("services-group"),
        auto_offset_reset="earliest",
        **consumer_options,
    )
    await consumer.start()
    try:
        received = await asyncio.wait_for(consumer.getone(), RECEIVE_TIMEOUT_S)
    finally:
        await consumer.stop()

    assert (received.topic, received.partition, received.offset) == (
        sent.topic,
        sent.partition,
        sent.offset,
    )
    assert (received.key, received.value) == (b"group-a", b"frame-1")


async def test_kafka_kraft_round_trip(kafka_bootstrap: str) -> None:
    """A record produced with aiokafka to an auto-created topic is consumed back."""
    await produce_and_consume(kafka_bootstrap)


async def test_faust_agent_updates_table_on_kafka_kraft(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A Faust agent consumes a record, counts it in a changelogged table and reports the count."""
    name = unique("services-faust")
    source_name, report_name = f"{name}-in", f"{name}-out"
    # Faust does not create the source topics of agents (only its internal
    # ones), and a consumer that subscribed to a missing topic notices it only
    # at the next metadata refresh (5 min): create them before the app starts.
    await create_topics(kafka_bootstrap, source_name, report_name)

    app = faust.App(
        name,
        broker=f"kafka://{kafka_bootstrap}",
        store="memory://",
        datadir=str(tmp_path / "faust"),
        web_enabled=False,
        topic_partitions=1,
        topic_replication_factor=1,
    )
    source = app.topic(source_name, key_type=str, value_type=str)
    report = app.topic(report_name, key_type=str, value_type=str)
    counts = app.Table("counts", default=int, partitions=1)

    @app.agent(source)
    async def count_nodes(stream: faust.StreamT[str]) -> None:
        async for event in stream.events():
            counts[event.key] += 1
            await report.send(key=event.key, value=f"{event.key}={counts[event.key]}")

    await app.start()
    try:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            # Faust's default codecs: keys raw, values JSON.
            await producer.send_and_wait(source_name, b'"frame"', key=b"node-7")
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            report_name, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            reported = await asyncio.wait_for(consumer.getone(), RECEIVE_TIMEOUT_S)
            changelog = TopicPartition(f"{name}-counts-changelog", 0)
            changelog_end = (await consumer.end_offsets([changelog]))[changelog]
        finally:
            await consumer.stop()
    finally:
        await app.stop()

    assert reported.value == b'"node-7=1"'
    assert changelog_end == 1, "the table write must reach its changelog topic"


def test_alertmanager_keeps_posted_alert(alertmanager_url: str) -> None:
    """An alert POSTed to /api/v2/alerts is listed, active, by GET /api/v2/alerts."""
    node = unique("node")
    now = datetime.now(UTC)
    alert = {
        "labels": {"alertname": "PeerwatchServicesTest", "node": node, "severity": "warning"},
        "annotations": {"summary": "posted by test_services"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=5)).isoformat(),
        "generatorURL": "http://127.0.0.1/peerwatch",
    }
    with httpx.Client(base_url=alertmanager_url, timeout=5) as client:
        posted = client.post("/api/v2/alerts", json=[alert])
        assert posted.status_code == 200, posted.text
        listed = client.get("/api/v2/alerts", params={"filter": f'node="{node}"'})
        listed.raise_for_status()

    [kept] = listed.json()
    assert kept["labels"] == alert["labels"]
    assert kept["annotations"] == alert["annotations"]
    assert kept["status"]["state"] == "active"


async def test_embedded_broker_round_trip(embedded_bootstrap: str) -> None:
    """A record produced with aiokafka to the Tansu broker is consumed back."""
    # Tansu completes a group join only after about half the session timeout
    # (aiokafka's default 10 s); the broker-side minimum of Kafka is 6 s.
    await produce_and_consume(
        embedded_bootstrap, session_timeout_ms=6000, heartbeat_interval_ms=2000
    )
