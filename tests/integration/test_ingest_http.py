"""`peerwatch ingest` over HTTP: status codes as Prometheus reads them, frames on real Kafka.

The aiohttp app from ``build_ingest`` is served in-process (its cleanup context
creates the topics and starts the frame producer and the flusher) against the
session's Apache Kafka; frames are read back with a plain aiokafka consumer.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import cramjam
import httpx
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.ingest import server
from streams.ingest.remote_write import MetricMetadata, WriteRequest, encode_write_request
from streams.ingest.security import server_ssl_context
from streams.ingest.series import Series
from streams.ingest.server import Ingest, build_ingest
from streams.lab.launchers import free_port
from streams.settings import Settings
from tests.integration.harness import client_context, make_tls_files, wait_for

B = 30_000  # bucket length (ms), the default bucket_s
MAX_BODY = 2048
READY_TIMEOUT_S = 30.0
FRAMES_TIMEOUT_S = 20.0
# Startup against an unreachable broker must not take longer than this to start serving.
DEAD_KAFKA_START_S = 8.0

# What Prometheus 2.42 sends with every remote_write request.
PROMETHEUS_HEADERS = {
    "Content-Type": "application/x-protobuf",
    "Content-Encoding": "snappy",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "Prometheus/2.42.0",
}

IngestFactory = Callable[..., Awaitable[tuple[TestClient, Settings]]]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def settings_for(bootstrap: str, **overrides: object) -> Settings:
    name = unique("ingest-http")
    values: dict[str, object] = {
        "kafka": f"kafka://{bootstrap}",
        "topic_frames": f"{name}.frames",
        "topic_alerts": f"{name}.alerts",
        "topic_xid": f"{name}.xid",
        "topic_partitions": 1,
        "max_body_bytes": MAX_BODY,
        "ingest_idle_flush_s": 0.5,
        **overrides,
    }
    return Settings(**values)  # type: ignore[arg-type]


def node_series(cluster: str, instance: str, ts: int, intr: float, procs: float) -> list[Series]:
    """One scrape of a node, as node_exporter's series reach remote_write."""
    common = {"cluster": cluster, "instance": instance, "job": "node"}
    return [
        Series({"__name__": "node_intr_total", **common}, [(ts, intr)]),
        Series({"__name__": "node_procs_running", **common}, [(ts, procs)]),
        # an exporter series no feature reads: skipped, never an error
        Series({"__name__": "node_load1", **common}, [(ts, 1.5)]),
    ]


def recent_bucket_start(buckets_ago: int = 10) -> int:
    """A bucket start in the recent past (samples there are neither future nor late)."""
    now_ms = int(time.time() * 1000)
    return now_ms - now_ms % B - buckets_ago * B


async def post(client: TestClient, body: bytes, **headers: str) -> tuple[int, str]:
    async with client.post("/api/v1/write", data=body, headers=PROMETHEUS_HEADERS | headers) as r:
        return r.status, await r.text()


async def wait_ready(client: TestClient, timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        async with client.get("/-/ready") as reply:
            if reply.status == 200:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"ingest not ready after {timeout_s:.0f} s (last status {reply.status})")
        await asyncio.sleep(0.1)


@pytest_asyncio.fixture
async def start_ingest() -> AsyncIterator[IngestFactory]:
    """Serve ``build_ingest(settings)`` in-process; closed (flushed, drained) after the test."""
    clients: list[TestClient] = []

    async def start(
        settings: Settings, start_timeout_s: float = 60.0, ingest: Ingest | None = None
    ) -> tuple[TestClient, Settings]:
        client = TestClient(TestServer((ingest or build_ingest(settings)).app()))
        clients.append(client)
        try:
            await asyncio.wait_for(client.start_server(), start_timeout_s)
        except TimeoutError:
            pytest.fail(
                f"ingest did not start serving within {start_timeout_s:.0f} s "
                f"(kafka={settings.kafka})"
            )
        return client, settings

    yield start
    for client in reversed(clients):
        await client.close()


@pytest_asyncio.fixture
async def ready_ingest(kafka_bootstrap: str, start_ingest: IngestFactory) -> TestClient:
    client, _ = await start_ingest(settings_for(kafka_bootstrap))
    await wait_ready(client)
    return client


# --- status codes -------------------------------------------------------------------------------


async def test_valid_remote_write_body_is_accepted_with_204(ready_ingest: TestClient) -> None:
    ts = recent_bucket_start() + 1_000
    body = encode_write_request(
        node_series("c1", "gpu-01:9100", ts, 1e6, 10) + node_series("c1", "gpu-02:9100", ts, 2e6, 7)
    )
    assert await post(ready_ingest, body) == (204, "")


async def test_receive_path_accepts_remote_write_too(ready_ingest: TestClient) -> None:
    body = encode_write_request(node_series("c1", "gpu-01:9100", recent_bucket_start(), 1e6, 10))
    async with ready_ingest.post("/receive", data=body, headers=PROMETHEUS_HEADERS) as reply:
        assert reply.status == 204


async def test_metadata_only_write_request_is_accepted_with_204(ready_ingest: TestClient) -> None:
    request = WriteRequest(
        metadata=[
            MetricMetadata(type=1, metric_family_name="node_intr_total", help="Interrupts."),
            MetricMetadata(type=2, metric_family_name="node_procs_running", help="Running."),
        ]
    )
    assert len(request.timeseries) == 0
    body = bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
    assert await post(ready_ingest, body) == (204, "")


async def test_garbage_body_is_rejected_with_400_and_a_one_line_reason(
    ready_ingest: TestClient,
) -> None:
    status, text = await post(ready_ingest, b"this is certainly not a snappy protobuf")
    assert status == 400
    reason = text.strip()
    assert reason and "\n" not in reason


async def test_empty_body_is_rejected_with_400(ready_ingest: TestClient) -> None:
    status, text = await post(ready_ingest, b"")
    assert status == 400
    assert "empty" in text


async def test_framed_snappy_body_is_rejected_with_400_naming_the_format(
    ready_ingest: TestClient,
) -> None:
    raw = WriteRequest().SerializeToString() + b"\x0a\x00"  # one empty TimeSeries
    status, text = await post(ready_ingest, bytes(cramjam.snappy.compress(raw)))
    assert status == 400
    assert "framed" in text and "block" in text
    assert "\n" not in text.strip()


async def test_body_above_max_body_bytes_is_rejected_with_413(ready_ingest: TestClient) -> None:
    status, text = await post(ready_ingest, os.urandom(MAX_BODY + 2048))
    assert status == 413
    assert str(MAX_BODY) in text


async def test_chunked_body_above_max_body_bytes_is_rejected_with_413(
    ready_ingest: TestClient,
) -> None:
    """Without a Content-Length the limit is enforced while reading."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield os.urandom(1024)

    status, _ = await post(ready_ingest, chunks())  # type: ignore[arg-type]
    assert status == 413


async def test_body_of_exactly_max_body_bytes_is_not_too_large(ready_ingest: TestClient) -> None:
    status, _ = await post(ready_ingest, b"\x00" * MAX_BODY)
    assert status == 400  # read and decoded (and undecodable), not refused for its size


async def test_remote_write_2_content_type_is_rejected_with_415(ready_ingest: TestClient) -> None:
    body = encode_write_request(node_series("c1", "gpu-01:9100", recent_bucket_start(), 1e6, 10))
    status, text = await post(
        ready_ingest,
        body,
        **{"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"},
    )
    assert status == 415
    assert "1.0" in text


async def test_non_protobuf_content_type_is_rejected_with_415(ready_ingest: TestClient) -> None:
    body = encode_write_request(node_series("c1", "gpu-01:9100", recent_bucket_start(), 1e6, 10))
    status, _ = await post(ready_ingest, body, **{"Content-Type": "application/json"})
    assert status == 415


async def test_metrics_page_counts_requests_by_status(ready_ingest: TestClient) -> None:
    await post(ready_ingest, b"garbage")
    async with ready_ingest.get("/metrics") as reply:
        text = await reply.text()
    assert 'peerwatch_ingest_requests_total{code="400"} 1.0' in text


# --- frames on Kafka ----------------------------------------------------------------------------


async def read_frames(
    bootstrap: str, topic: str, want: int, timeout_s: float = FRAMES_TIMEOUT_S
) -> list[tuple[bytes | None, dict]]:
    """(key, decoded JSON) of the first ``want`` records on ``topic``, from the beginning."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    out: list[tuple[bytes | None, dict]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < want and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            out.extend((r.key, json.loads(r.value)) for rs in batches.values() for r in rs)
    finally:
        await consumer.stop()
    return out


async def test_samples_become_frames_on_the_frames_topic(
    kafka_bootstrap: str, start_ingest: IngestFactory
) -> None:
    """Two scrapes 30 s apart: gauges as sent, the counter as a per-second rate, per node."""
    client, settings = await start_ingest(settings_for(kafka_bootstrap))
    await wait_ready(client)
    b0 = recent_bucket_start()
    t1, t2 = b0 + 5_000, b0 + 5_000 + 30_000
    first = node_series("train-a", "gpu-01:9100", t1, 1_000_000, 10) + node_series(
        "train-a", "gpu-02:9100", t1, 2_000_000, 7
    )
    second = node_series("train-a", "gpu-01:9100", t2, 1_600_000, 12) + node_series(
        "train-a", "gpu-02:9100", t2, 2_300_000, 9
    )
    assert (await post(client, encode_write_request(first)))[0] == 204
    assert (await post(client, encode_write_request(second)))[0] == 204

    records = await read_frames(kafka_bootstrap, settings.topic_frames, want=4)

    frames = {(f["node"], f["ts"]): f for _, f in records}
    assert {key for key, _ in records} == {b"train-a"}
    assert {f["group"] for f in frames.values()} == {"train-a"}
    assert {node: frames[(node, b0)]["values"] for node in ("gpu-01", "gpu-02")} == {
        "gpu-01": {"procs_running": 10.0},  # a counter's first sample gives no rate yet
        "gpu-02": {"procs_running": 7.0},
    }
    assert {node: frames[(node, b0 + B)]["values"] for node in ("gpu-01", "gpu-02")} == {
        "gpu-01": {"procs_running": 12.0, "intr_rate": 600_000 / 30},  # 20 000 /s
        "gpu-02": {"procs_running": 9.0, "intr_rate": 300_000 / 30},  # 10 000 /s
    }
    assert len(records) == 4
    assert not any(f["left"] for f in frames.values())


async def test_a_write_that_closes_a_bucket_sends_its_frames_without_the_flusher_tick(
    kafka_bootstrap: str, start_ingest: IngestFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flusher's tick set to an hour: only the write whose sample moves the watermark
    past the bucket's end (+ ``ingest_grace_s``) can have sent the bucket's frames."""
    monkeypatch.setattr(server, "FLUSH_EVERY_S", 3600.0)
    client, settings = await start_ingest(settings_for(kafka_bootstrap, ingest_grace_s=15.0))
    await wait_ready(client)
    b0 = recent_bucket_start()
    opening = node_series("train-a", "gpu-01:9100", b0 + 5_000, 1_000_000, 10)
    closing = node_series("train-a", "gpu-02:9100", b0 + B + 15_000, 2_000_000, 7)
    assert (await post(client, encode_write_request(opening)))[0] == 204
    assert (await post(client, encode_write_request(closing)))[0] == 204

    records = await read_frames(kafka_bootstrap, settings.topic_frames, want=1)

    assert [(f["node"], f["ts"], f["values"]) for _, f in records] == [
        ("gpu-01", b0, {"procs_running": 10.0})
    ]


async def test_a_counter_reset_counts_from_zero(
    kafka_bootstrap: str, start_ingest: IngestFactory
) -> None:
    client, settings = await start_ingest(settings_for(kafka_bootstrap))
    await wait_ready(client)
    b0 = recent_bucket_start()
    t1, t2 = b0 + 5_000, b0 + 35_000
    for ts, intr in ((t1, 5_000_000), (t2, 150_000)):  # the node rebooted in between
        series = node_series("train-b", "gpu-07:9100", ts, intr, 4)
        assert (await post(client, encode_write_request(series)))[0] == 204

    records = await read_frames(kafka_bootstrap, settings.topic_frames, want=2)

    rates = {f["ts"]: f["values"].get("intr_rate") for _, f in records}
    assert rates == {b0: None, b0 + B: 150_000 / 30}


# --- Kafka unreachable --------------------------------------------------------------------------


async def start_without_kafka(start_ingest: IngestFactory, **overrides: object) -> TestClient:
    """An ingest whose broker address has nothing listening; it must serve all the same."""
    dead = f"127.0.0.1:{free_port()}"
    settings = settings_for(dead, **overrides)
    client, _ = await start_ingest(settings, start_timeout_s=DEAD_KAFKA_START_S)

    async def replayed() -> bool:  # its write-ahead log (empty here) read, if it has one
        async with client.get("/-/ready") as reply:
            return await reply.text() != "replaying the write-ahead log"

    await wait_for(replayed, READY_TIMEOUT_S, "the write-ahead log replayed", every_s=0.05)
    return client


async def test_without_kafka_and_without_the_log_ready_is_503(
    start_ingest: IngestFactory,
) -> None:
    client = await start_without_kafka(start_ingest, ingest_wal=False)

    async def tried() -> float:  # the producer tried to connect, failed, and goes on trying
        return await metric_value(client, "peerwatch_ingest_kafka_errors_total")

    await wait_for(tried, 30, "a failed connect")
    async with client.get("/-/ready") as reply:
        assert reply.status == 503


async def test_without_kafka_and_without_the_log_a_valid_body_gets_503_so_prometheus_retries(
    start_ingest: IngestFactory,
) -> None:
    client = await start_without_kafka(start_ingest, ingest_wal=False)
    body = encode_write_request(node_series("c1", "gpu-01:9100", recent_bucket_start(), 1e6, 10))
    status, text = await post(client, body)
    assert status == 503
    assert "kafka unreachable" in text


async def test_without_kafka_the_log_takes_writes_until_it_is_full_then_503(
    start_ingest: IngestFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The default: the write-ahead log keeps what Kafka cannot take yet, so the ingest is
    ready and answers 204 (on disk) until the log cannot hold one more body of
    max_body_bytes; then 503 with the reason, counted, logged once, and readiness down."""
    client = await start_without_kafka(start_ingest, ingest_wal_max_bytes=2 * MAX_BODY)
    async with client.get("/-/ready") as reply:
        said = (reply.status, await reply.text())
    assert said == (200, "kafka unreachable; writes are kept in the write-ahead log")
    b0 = recent_bucket_start()
    answers = []
    for k in range(100):
        body = encode_write_request(node_series("c1", f"gpu-{k:02d}:9100", b0, 1e6, 10))
        answers.append(await post(client, body))
        if answers[-1][0] != 204:
            break
    taken = len(answers) - 1
    assert taken >= 2 and {a for a in answers[:-1]} == {(204, "")}
    status, text = answers[-1]
    assert status == 503 and text.startswith("write-ahead log full (") and "retry later" in text
    assert await post(client, body) == answers[-1]
    assert await ready_status(client) == 503
    refused = 'peerwatch_ingest_wal_refused_total{reason="full"}'
    assert await metric_value(client, refused) == 2
    assert await metric_value(client, "peerwatch_ingest_wal_bytes") > MAX_BODY // 2
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wal_refused")]
    assert len(lines) == 1 and "reason=full" in lines[0], lines  # the second one waits


async def test_a_disk_that_fails_a_write_gets_that_write_a_503_and_the_next_is_taken(
    start_ingest: IngestFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's next segment is /dev/full (writes fail with ENOSPC, as on a full disk):
    that write gets 503 naming the error, counted; the next goes to a new segment: 204."""
    monkeypatch.setenv("PEERWATCH_DATADIR", str(tmp_path))
    client = await start_without_kafka(start_ingest)
    (tmp_path / "ingest-wal" / "000000000001.wal").symlink_to("/dev/full")
    body = encode_write_request(node_series("c1", "gpu-01:9100", recent_bucket_start(), 1e6, 10))
    status, text = await post(client, body)
    assert status == 503
    assert text.startswith("write-ahead log cannot be written (") and "No space left" in text
    refused = 'peerwatch_ingest_wal_refused_total{reason="write_error"}'
    assert await metric_value(client, refused) == 1
    assert await post(client, body) == (204, "")


async def test_a_write_without_the_right_credentials_gets_401_and_probes_stay_open(
    start_ingest: IngestFactory,
) -> None:
    """Auth comes before everything (a refused client learns nothing of Kafka's state); the
    right token gets past it (to the 503 of a dead Kafka); probes and /metrics ask for none."""
    dead = f"127.0.0.1:{free_port()}"
    settings = settings_for(
        dead,
        ingest_wal=False,  # Kafka's 503 says the write got past the auth
        ingest_bearer_token="t0ken",
        ingest_basic_auth_username="prom",
        ingest_basic_auth_password="pw",
    )
    client, _ = await start_ingest(settings, start_timeout_s=DEAD_KAFKA_START_S)
    body = encode_write_request(node_series("c1", "gpu-01:9100", recent_bucket_start(), 1e6, 10))
    for presented in ({}, {"Authorization": "Bearer t0kem"}, {"Authorization": "Basic cHJvbTpwdw"}):
        async with client.post(
            "/api/v1/write", data=body, headers=PROMETHEUS_HEADERS | presented
        ) as r:
            assert r.status == 401
            assert r.headers.getall("WWW-Authenticate") == [
                'Bearer realm="peerwatch"',
                'Basic realm="peerwatch"',
            ]
    status, text = await post(client, body, Authorization="Bearer t0ken")
    assert (status, text.strip()) == (503, "kafka unreachable; retry later")
    assert await ready_status(client) == 503
    assert await metric_value(client, 'peerwatch_ingest_auth_failures_total{reason="missing"}') == 1
    assert await metric_value(client, 'peerwatch_ingest_auth_failures_total{reason="wrong"}') == 1
    assert (
        await metric_value(client, 'peerwatch_ingest_auth_failures_total{reason="malformed"}') == 1
    )
    assert await metric_value(client, 'peerwatch_ingest_requests_total{code="401"}') == 3


async def test_with_a_client_ca_only_clients_with_its_certificate_get_through(
    tmp_path: Path,
) -> None:
    """Mutual TLS: a client without a certificate fails the handshake; with one the CA
    signed it reaches the handler (here the 503 of a dead Kafka)."""
    tls = make_tls_files(tmp_path, client="prometheus")
    settings = settings_for(
        f"127.0.0.1:{free_port()}",
        ingest_wal=False,  # ready is 503 while Kafka is away
        ingest_tls_cert_file=tls.cert,
        ingest_tls_key_file=tls.key,
        ingest_tls_client_ca_file=tls.ca,
    )
    server = TestServer(build_ingest(settings).app())
    await server.start_server(ssl=server_ssl_context(settings))
    url = str(server.make_url("/-/ready"))
    try:
        anonymous = client_context(tls.ca)
        async with httpx.AsyncClient(verify=anonymous) as client:
            with pytest.raises(httpx.TransportError):
                await client.get(url)
        async with httpx.AsyncClient(verify=client_context(tls.ca, tls)) as client:
            assert (await client.get(url)).status_code == 503
    finally:
        await server.close()


# --- frames Kafka can never take ----------------------------------------------------------------


async def metric_value(client: TestClient, line_prefix: str) -> float:
    async with client.get("/metrics") as reply:
        text = await reply.text()
    values = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_prefix)
    ]
    return sum(values)


async def ready_status(client: TestClient) -> int:
    async with client.get("/-/ready") as reply:
        return reply.status


def fleet_series(
    cluster: str, nodes: int, ts: int, big_instance: str | None = None
) -> list[Series]:
    series = [
        s for i in range(nodes) for s in node_series(cluster, f"gpu-{i:03d}:9100", ts, 1e6, 5)
    ]
    if big_instance is not None:
        series += node_series(cluster, big_instance, ts, 1e6, 5)
    return series


@pytest.mark.long
async def test_a_frame_over_the_client_size_limit_is_dropped_and_the_rest_flow(
    kafka_bootstrap: str, start_ingest: IngestFactory
) -> None:
    """A 1.1 MB instance label makes a frame over Kafka's 1 MB request limit: that frame is
    dropped and counted once; the other frames arrive exactly once; the ingest stays ready."""
    client, settings = await start_ingest(settings_for(kafka_bootstrap, max_body_bytes=4 << 20))
    await wait_ready(client)
    b0 = recent_bucket_start()
    big = "gpu-huge-" + "x" * 1_100_000 + ":9100"
    body = encode_write_request(fleet_series("big-a", 5, b0 + 5_000, big_instance=big))
    assert (await post(client, body))[0] == 204
    later = encode_write_request(fleet_series("big-a", 5, b0 + B + 5_000))
    assert (await post(client, later))[0] == 204

    records = await read_frames(kafka_bootstrap, settings.topic_frames, want=11, timeout_s=15.0)

    assert sorted((f["node"], f["ts"]) for _, f in records) == sorted(
        (f"gpu-{i:03d}", ts) for i in range(5) for ts in (b0, b0 + B)
    )
    assert await metric_value(client, "peerwatch_ingest_frames_dropped_total") == 1.0
    assert await ready_status(client) == 200
    assert (await post(client, later))[0] == 204  # not "503 kafka unreachable"


@pytest.mark.long
async def test_a_batch_the_broker_refuses_as_too_large_loses_none_of_its_small_frames(
    kafka_bootstrap: str, start_ingest: IngestFactory
) -> None:
    """The topic takes 4 KiB messages: batches of small frames are refused by the broker and
    sent again one by one; only the one 6 KiB frame is dropped."""
    settings = settings_for(kafka_bootstrap, max_body_bytes=1 << 20)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        topic = NewTopic(settings.topic_frames, 1, 1, topic_configs={"max.message.bytes": "4096"})
        await admin.create_topics([topic])
    finally:
        await admin.close()
    client, _ = await start_ingest(settings)
    await wait_ready(client)
    b0 = recent_bucket_start()
    big = "gpu-wide-" + "y" * 6_000 + ":9100"
    body = encode_write_request(fleet_series("small-topic", 60, b0 + 5_000, big_instance=big))
    assert (await post(client, body))[0] == 204

    records = await read_frames(kafka_bootstrap, settings.topic_frames, want=61, timeout_s=15.0)

    assert sorted(f["node"] for _, f in records) == [f"gpu-{i:03d}" for i in range(60)]
    assert await metric_value(client, "peerwatch_ingest_frames_dropped_total") == 1.0
    assert await ready_status(client) == 200


# --- the event loop stays free; limits; supervised background tasks -----------------------------


def distinct_nodes_body(n: int, ts: int) -> bytes:
    """``n`` nodes' ``node_procs_running``, one series each, costly to decode (every series
    is new) but without a group, so no frames follow (digits patched into one encoded series:
    building them as protobuf objects would take longer than the test)."""
    template = WriteRequest()
    series = template.timeseries.add()
    labels = {"__name__": "node_procs_running", "instance": "h-@@@@@@@@:9100"}
    for name, value in sorted(labels.items()):
        series.labels.add(name=name, value=value)
    series.samples.add(value=3.0, timestamp=ts)
    one = template.SerializeToString()
    raw = b"".join(one.replace(b"@@@@@@@@", b"%08d" % i) for i in range(n))
    return bytes(cramjam.snappy.compress_raw(raw))


async def in_flight(client: TestClient) -> float:
    return await metric_value(client, "peerwatch_ingest_requests_in_flight")


async def test_ready_is_answered_while_a_large_body_decodes(
    kafka_bootstrap: str, start_ingest: IngestFactory
) -> None:
    """100,000 new series in one body take seconds of CPU to decode; /-/ready keeps
    answering meanwhile (decoding on the event loop answered nothing until it was done)."""
    client, _ = await start_ingest(settings_for(kafka_bootstrap, max_body_bytes=16 << 20))
    await wait_ready(client)
    body = distinct_nodes_body(100_000, recent_bucket_start(0))
    write = asyncio.create_task(post(client, body))
    answered_during_write = 0
    while not write.done():
        status = await ready_status(client)
        answered_during_write += not write.done()
        assert status == 200
        await asyncio.sleep(0.02)
    assert (await write)[0] == 204
    assert answered_during_write >= 5


async def test_writes_beyond_the_concurrency_limit_get_503(
    kafka_bootstrap: str, start_ingest: IngestFactory
) -> None:
    """With one write allowed at a time, a second one during a long decode gets 503."""
    settings = settings_for(
        kafka_bootstrap, max_body_bytes=16 << 20, ingest_max_concurrent_requests=1
    )
    client, _ = await start_ingest(settings)
    await wait_ready(client)
    write = asyncio.create_task(post(client, distinct_nodes_body(100_000, recent_bucket_start(0))))
    while await in_flight(client) < 1:
        assert not write.done(), "the long write ended before it was seen in flight"
        await asyncio.sleep(0.01)
    small = encode_write_request(node_series("c1", "gpu-01:9100", recent_bucket_start(), 1e6, 3))
    status, text = await post(client, small)
    assert (status, text) == (503, "1 writes in progress; retry later\n")
    assert (await write)[0] == 204
    assert (await post(client, small))[0] == 204


async def test_a_body_that_does_not_arrive_in_time_gets_503(
    kafka_bootstrap: str, start_ingest: IngestFactory
) -> None:
    """A client that announces 1,000 bytes and sends 10 is answered 503 and disconnected."""
    client, _ = await start_ingest(settings_for(kafka_bootstrap, ingest_body_timeout_s=0.5))
    await wait_ready(client)
    reader, writer = await asyncio.open_connection(client.host, client.port)
    head = (
        "POST /api/v1/write HTTP/1.1\r\nHost: ingest\r\nContent-Type: application/x-protobuf\r\n"
        "Content-Encoding: snappy\r\nContent-Length: 1000\r\n\r\n"
    )
    writer.write(head.encode() + b"x" * 10)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), timeout=20.0)  # read() to EOF: closed
    writer.close()
    assert reply.startswith(b"HTTP/1.1 503 ")
    assert b"body not received within 0.5 s" in reply


async def test_a_background_task_that_dies_takes_readiness_down_and_is_restarted(
    kafka_bootstrap: str, start_ingest: IngestFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The flusher raises once: the failure is logged and counted, /-/ready and writes get
    503 until it is restarted, then samples become frames on Kafka again."""
    settings = settings_for(kafka_bootstrap)
    ingest = build_ingest(settings)
    ingest.restart_min_s = 2.0  # long enough to see the 503s
    real_close_due = ingest._close_due
    bug = threading.Event()  # the flusher's work runs on the ingest's work thread

    def close_due_with_a_bug() -> list:
        if bug.is_set():
            bug.clear()
            raise RuntimeError("flusher bug")
        return real_close_due()

    ingest._close_due = close_due_with_a_bug  # type: ignore[method-assign]
    client, _ = await start_ingest(settings, ingest=ingest)
    await wait_ready(client)
    bug.set()
    while await ready_status(client) == 200:
        await asyncio.sleep(0.01)
    b0 = recent_bucket_start()
    scrape = encode_write_request(node_series("c9", "gpu-09:9100", b0 + 5_000, 1e6, 3))
    status, text = await post(client, scrape)
    assert status == 503 and text.startswith("flusher failed (RuntimeError('flusher bug'))")
    failed = [r for r in caplog.records if r.getMessage().startswith("background_task_failed")]
    assert [r.getMessage() for r in failed] == [
        "background_task_failed task=flusher restart_in_s=2.0"
    ]
    assert failed[0].exc_info is not None  # with its traceback
    assert await metric_value(client, 'peerwatch_ingest_task_failures_total{task="flusher"}') == 1

    await wait_ready(client)
    assert (await post(client, scrape))[0] == 204
    records = await read_frames(kafka_bootstrap, settings.topic_frames, want=1)
    assert [(f["node"], f["ts"]) for _, f in records] == [("gpu-09", b0)]
