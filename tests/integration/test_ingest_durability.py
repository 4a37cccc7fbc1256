"""A sample answered 204 survives `kill -9` of the ingest during a Kafka outage (issue 9, 4a).

The ingest runs as its own process with a write-ahead log, against an Apache
Kafka of this test's own (so it can be frozen). Scrapes are answered 204 while
Kafka is up; Kafka freezes (SIGSTOP: its sockets stay open and nothing answers,
as with a hung broker or a partition, so the ingest cannot notice before its
timeouts); more scrapes come (204: the log keeps them; 503 only once it is full); the
ingest is killed with SIGKILL, Kafka comes back, the ingest restarts:
every scrape answered 204 must be in a frame on the frames topic. Without the
log the open buckets (and the frames queued during the outage) died with the process.
``test_ingest_wal_default.py`` does the same with the log where the defaults put it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest

from streams.ingest.remote_write import encode_write_request
from streams.lab.launchers import KafkaKRaft, PeerwatchProcess, free_port, peerwatch_env
from tests.integration.conftest import start_or_fail
from tests.integration.harness import read_topic, wait_for
from tests.integration.test_ingest_http import PROMETHEUS_HEADERS, B, node_series

NODES = [f"gpu-{i:02d}" for i in range(6)]


def freeze(kafka: KafkaKRaft, sig: signal.Signals) -> None:
    """Stop or continue the broker's whole process group."""
    assert kafka.pid is not None
    os.killpg(kafka.pid, sig)


@pytest.mark.long
async def test_every_sample_answered_204_survives_a_kill_during_a_kafka_outage(
    tmp_path: Path,
) -> None:
    kafka = KafkaKRaft(tmp_path / "kafka")
    start_or_fail(kafka)
    run, port = uuid.uuid4().hex[:8], free_port()
    env = peerwatch_env(
        kafka.bootstrap,
        topics=f"test-{run}",
        ingest_port=port,
        ingest_idle_flush_s=4,
        ingest_wal_dir=tmp_path / "wal",
    )

    def ingest() -> PeerwatchProcess:
        ready = f"http://127.0.0.1:{port}/-/ready"
        return PeerwatchProcess(["ingest"], env, tmp_path / "ingest.log", ready)

    now_ms = int(time.time() * 1000)
    b0 = now_ms - now_ms % B - 10 * B
    accepted: set[tuple[str, int]] = set()  # (node, bucket) of every scrape answered 204

    async def scrape(client: httpx.AsyncClient, node: str, bucket: int) -> int:
        body = encode_write_request(node_series("dur", f"{node}:9100", bucket + 5_000, 1e6, 7))
        url = f"http://127.0.0.1:{port}/api/v1/write"
        status = (await client.post(url, content=body, headers=PROMETHEUS_HEADERS)).status_code
        if status == 204:
            accepted.add((node, bucket))
        return status

    process = ingest().start()
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            assert {await scrape(client, n, b0) for n in NODES} == {204}
            freeze(kafka, signal.SIGSTOP)  # the outage
            for bucket in range(b0 + B, b0 + 6 * B, B):
                for node in NODES:
                    assert await scrape(client, node, bucket) in (204, 503)
                await asyncio.sleep(0.3)
        process.kill()  # SIGKILL: no flush, no drain
        freeze(kafka, signal.SIGCONT)
        process = ingest().start()

        async def delivered() -> set[tuple[str, int]]:
            records = await read_topic(kafka.bootstrap, env["PEERWATCH_TOPIC_FRAMES"])
            framed = {(r["node"], r["ts"]) for r in records if "procs_running" in r["values"]}
            return framed if accepted <= framed else set()

        framed = await wait_for(delivered, 60, "every accepted scrape to be in a frame")

        async def log_emptied() -> bool:
            return not list((tmp_path / "wal").glob("*.wal"))

        await wait_for(log_emptied, 30, "the write-ahead log to drop what Kafka has")
    finally:
        process.stop()
        freeze(kafka, signal.SIGCONT)
        kafka.stop()
    assert accepted <= framed
    assert len(accepted) > len(NODES)  # some scrapes during the outage were taken too
