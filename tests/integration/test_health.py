"""Liveness, readiness and self-metrics of `peerwatch worker` and `peerwatch ingest`, run as
an operator runs them, against the session's Apache Kafka (and one of the test's own)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment as MemberAssignment

from streams.lab.launchers import KafkaKRaft, PeerwatchProcess, free_port
from tests.integration.harness import Deployment, at_least, wait_for
from tests.integration.test_open_buckets import NODES, frame


def get(url: str) -> tuple[int, str]:
    reply = httpx.get(url, timeout=5.0)
    return reply.status_code, reply.text


def poll_until(url: str, status: int, timeout_s: float) -> list[tuple[int, str]]:
    """Every answer of ``url`` (every 0.1 s) until one has ``status``; fails on timeout."""
    seen: list[tuple[int, str]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen.append(get(url))
        if seen[-1][0] == status:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered {status} in {timeout_s:.0f} s; last {seen[-1:]}")


def test_worker_is_live_at_once_and_ready_once_its_partitions_are_assigned(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    base = f"http://127.0.0.1:{deployment.metrics_port}"
    worker = PeerwatchProcess(
        ["worker"], deployment.env, tmp_path / "worker.log", f"{base}/-/healthy"
    )
    with worker:
        answers = poll_until(f"{base}/-/ready", 200, timeout_s=90)
        # live before it is ready: the first answers say what it waits for
        status, reason = answers[0]
        assert status == 503, answers[0]
        assert "partition assignment" in reason or "not restored" in reason, reason
        assert answers[-1] == (200, "ok\n")
        assert get(f"{base}/-/healthy") == (200, "ok\n")
        page = get(f"{base}/metrics")[1]
        assert "peerwatch_worker_ready 1.0" in page
        assert "process_cpu_seconds_total" in page
        assert 'peerwatch_build_info{aiokafka="' in page
        assert get(f"{base}/nothing-here")[0] == 404


def test_ingest_serves_healthy_and_times_requests_by_route_and_code(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    base = f"http://127.0.0.1:{deployment.ingest_port}"
    with deployment.ingest():
        assert get(f"{base}/-/healthy") == (200, "ok\n")
        reply = httpx.post(
            f"{base}/api/v1/write", content=b"x", headers={"Content-Type": "text/plain"}
        )
        assert reply.status_code == 415
        assert get(f"{base}/no-such-path")[0] == 404
        page = get(f"{base}/metrics")[1]
    samples = [ln.rsplit(" ", 1) for ln in page.splitlines() if ln and not ln.startswith("#")]
    lines = {series: float(value) for series, value in samples}
    name = "peerwatch_ingest_request_duration_seconds_count"
    assert lines[f'{name}{{code="415",handler="/api/v1/write"}}'] == 1
    assert lines[f'{name}{{code="200",handler="/-/healthy"}}'] == 1
    assert lines[f'{name}{{code="404",handler="unmatched"}}'] == 1
    assert "process_resident_memory_bytes" in page


def json_log(path: Path) -> list[dict]:
    """Every line of a process's output as JSON (fails on a line that is not)."""
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    assert lines, path
    return [json.loads(ln) for ln in lines]


async def test_json_logs_cover_the_worker_faust_and_aiokafka_lines(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    deployment.env["PEERWATCH_LOG_FORMAT"] = "json"
    group, topic = deployment.job, deployment.env["PEERWATCH_TOPIC_FRAMES"]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    worker = deployment.worker().start()  # startup, assignment, scored buckets, shutdown
    try:
        for bucket in range(2):
            for node in NODES:
                await producer.send_and_wait(topic, frame(group, node, bucket), key=group.encode())
        await wait_for(deployment.buckets_scored, 60, "a scored bucket", until=at_least(1))
    finally:
        worker.stop()
        await producer.stop()
    records = json_log(tmp_path / "worker.log")
    loggers = {r["logger"].split(".")[0] for r in records}
    assert {"peerwatch", "faust", "aiokafka"} <= loggers, loggers
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any(r["message"].startswith("worker_http_listening") for r in records)
    # peerwatch's lines carry their event and fields as keys of their own, typed
    scored = next(r for r in records if r.get("event") == "bucket_scored")
    assert (scored["group"], scored["bucket"], scored["nodes"]) == (group, 0, len(NODES))
    assert scored["message"] == f"bucket_scored group={group} bucket=0 nodes=8 expected=8"


def test_json_logs_cover_the_ingest_and_its_http_lines(kafka_bootstrap: str, tmp_path: Path):
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    deployment.env["PEERWATCH_LOG_FORMAT"] = "json"
    deployment.env["PEERWATCH_INGEST_ACCESS_LOG"] = "true"  # off by default
    with deployment.ingest():
        httpx.post(deployment.write_url, content=b"x", headers={"Content-Type": "text/plain"})
    records = json_log(tmp_path / "ingest.log")
    loggers = {r["logger"] for r in records}
    assert {"peerwatch.ingest", "aiohttp.access"} <= loggers, loggers
    assert any(r["message"].startswith("ingest_listening") for r in records)
    assert any(r["message"].startswith("ingest_decoder decoder=") for r in records)
    listening = next(r for r in records if r.get("event") == "ingest_listening")
    assert listening["port"] == deployment.ingest_port and listening["tls"] is False


@pytest.mark.long
def test_ingest_and_worker_ready_follow_kafka_down_and_up(tmp_path: Path) -> None:
    """A broker of the test's own: absent when the ingest (without its log) starts, then up,
    stopped under both processes and started again; both stay live throughout."""
    kafka = KafkaKRaft(tmp_path / "kafka", port=free_port())
    deployment = Deployment.new(kafka.bootstrap, "", tmp_path)
    # an ingest's readiness follows Kafka without its write-ahead log; with it (the default)
    # it stays ready while the log has room (test_ingest_http, test_ingest_durability)
    deployment.env["PEERWATCH_INGEST_WAL"] = "false"
    ingest = f"http://127.0.0.1:{deployment.ingest_port}"
    worker = f"http://127.0.0.1:{deployment.metrics_port}"
    with PeerwatchProcess(
        ["ingest"], deployment.env, tmp_path / "ingest.log", f"{ingest}/-/healthy"
    ):
        deadline = time.monotonic() + 30
        while "peerwatch_ingest_kafka_errors_total 0.0" in get(f"{ingest}/metrics")[1]:
            assert time.monotonic() < deadline, "the ingest's producer never tried Kafka"
            time.sleep(0.1)
        assert get(f"{ingest}/-/ready") == (503, "kafka unreachable")
        with kafka:
            poll_until(f"{ingest}/-/ready", 200, timeout_s=60)
            with deployment.worker():  # started once ready
                kafka.stop()
                down = poll_until(f"{worker}/-/ready", 503, timeout_s=60)
                assert "kafka unreachable" in down[-1][1], down[-1]
                poll_until(f"{ingest}/-/ready", 503, timeout_s=30)
                for url in (ingest, worker):
                    assert get(f"{url}/-/healthy") == (200, "ok\n")
                kafka.start()
                poll_until(f"{worker}/-/ready", 200, timeout_s=90)
                poll_until(f"{ingest}/-/ready", 200, timeout_s=30)
    log = (tmp_path / "ingest.log").read_text()
    # the idle producer's probe saw the broker go, and logging it did not crash the producer
    assert "kafka_unreachable" in log and "background_task_failed" not in log, log[-3000:]


async def _members_partitions(bootstrap: str, group: str, topic: str) -> list[set[int]]:
    """The partitions of ``topic`` each member of consumer ``group`` holds, as Kafka says."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    (described,) = response.to_object()["groups"]
    members = [MemberAssignment.decode(m["member_assignment"]) for m in described["members"]]
    return [{p for t, ps in m.assignment if t == topic for p in ps} for m in members]


@pytest.mark.long
def test_worker_goes_unready_while_a_joining_worker_rebalances_the_group(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A second worker in the same consumer group takes half the partitions: the first is
    not ready from the revocation until its new assignment's state is restored, then ready
    again, and the two own disjoint halves of the frames topic. On RocksDB, as deployed."""
    first = Deployment.new(kafka_bootstrap, "", tmp_path / "first")
    first.env["PEERWATCH_STORE"] = "rocksdb://"
    port = free_port()  # given as --web-port: the flag wins over the first's environment
    second_env = {**first.env, "PEERWATCH_DATADIR": str(tmp_path / "second" / "worker")}
    ready = f"http://127.0.0.1:{first.metrics_port}/-/ready"
    seen: list[tuple[int, str]] = []
    stop = threading.Event()

    def watch() -> None:  # every answer of the first worker's /-/ready while the second joins
        while not stop.is_set():
            seen.append(get(ready))
            time.sleep(0.05)

    log = tmp_path / "first" / "worker.log"
    with first.worker():
        assert get(ready) == (200, "ok\n")
        before = len(log.read_text().splitlines())
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        second = PeerwatchProcess(
            ["worker", "--web-port", str(port)], second_env, tmp_path / "second.log",
            f"http://127.0.0.1:{port}/-/ready",
        )  # fmt: skip
        try:
            with second:
                back = poll_until(ready, 200, timeout_s=30)  # ready again after the rebalance
                env = first.env
                split = asyncio.run(
                    _members_partitions(
                        kafka_bootstrap, env["PEERWATCH_APP_ID"], env["PEERWATCH_TOPIC_FRAMES"]
                    )
                )
                lines = log.read_text().splitlines()[before:]  # before the stop's own changes
        finally:
            stop.set()
            watcher.join()
    said = [
        ln.split("worker_", 1)[1]
        for ln in lines
        if " worker_ready" in ln or " worker_not_ready" in ln
    ]  # the first worker's readiness changes, as it logged them, from the join on
    assert said and said[0] == "not_ready reason='rebalancing: table state not restored yet'", said
    assert said[-1] == "ready", said
    assert all(s in ("ready", said[0]) for s in said), said
    # the probe's view: a rebalance's sub-second gap is caught only if a poll lands in it
    down = [text for status, text in seen if status == 503]
    assert seen[0] == (200, "ok\n") and back[-1] == (200, "ok\n"), (seen[:1], back[-1:])
    assert all(t.startswith("rebalancing: table state not restored") for t in down), set(down)
    print(f"/-/ready polled {len(seen)} times during the join, {len(down)} answered 503")
    # Kafka's view: two members, each holding two of the frames topic's four partitions
    assert sorted(map(len, split)) == [2, 2], split
    assert set().union(*split) == {0, 1, 2, 3}, split
