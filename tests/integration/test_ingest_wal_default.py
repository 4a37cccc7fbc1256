"""With default settings a 204 survives `kill -9`: the write-ahead log is on, under the datadir.

`peerwatch ingest` runs as an operator would start it, with nothing about the log set
(only the datadir, the port and the topics of this test), against a broker address
nothing listens on: it is ready and answers 204, the log keeping what Kafka cannot take.
It is killed with SIGKILL; a new ingest on the same datadir, with the session's Kafka,
replays the log: every node-bucket answered 204 is a frame on the frames topic, and the
log empties once Kafka has them.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest

from streams.ingest.remote_write import encode_write_request
from streams.lab.launchers import PeerwatchProcess, free_port, peerwatch_env
from tests.integration.harness import read_topic, wait_for
from tests.integration.test_ingest_http import PROMETHEUS_HEADERS, B, node_series

NODES = [f"gpu-{i:02d}" for i in range(6)]
BUCKETS = 5


@pytest.mark.long
async def test_every_node_bucket_answered_204_without_kafka_is_on_kafka_after_a_kill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    port, topics = free_port(), f"test-{uuid.uuid4().hex[:8]}"
    datadir = tmp_path / "data"

    def ingest(kafka: str) -> PeerwatchProcess:
        env = peerwatch_env(kafka, topics=topics, ingest_port=port, datadir=datadir)
        ready = f"http://127.0.0.1:{port}/-/ready"
        return PeerwatchProcess(["ingest"], env, tmp_path / "ingest.log", ready)

    now_ms = int(time.time() * 1000)
    b0 = now_ms - now_ms % B - 10 * B
    accepted: set[tuple[str, int]] = set()
    first = ingest(f"127.0.0.1:{free_port()}").start()  # nothing listens there
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            for bucket in range(b0, b0 + BUCKETS * B, B):
                for node in NODES:
                    series = node_series("wal", f"{node}:9100", bucket + 5_000, 1e6, 7)
                    reply = await client.post(
                        f"http://127.0.0.1:{port}/api/v1/write",
                        content=encode_write_request(series),
                        headers=PROMETHEUS_HEADERS,
                    )
                    assert reply.status_code == 204, reply.text
                    accepted.add((node, bucket))
            page = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        first.kill()  # SIGKILL: no flush, no drain
    assert "peerwatch_ingest_frames_sent_total 0.0" in page  # none reached Kafka
    wal = datadir / "ingest-wal"
    assert list(wal.glob("*.wal")), "nothing in the log where the defaults put it"

    second = ingest(kafka_bootstrap).start()
    try:

        async def delivered() -> set[tuple[str, int]]:
            records = await read_topic(kafka_bootstrap, f"{topics}-frames")
            return {(r["node"], r["ts"]) for r in records if "procs_running" in r["values"]}

        # the last buckets close on the idle flush (ingest_idle_flush_s, 45 s by default)
        framed = await wait_for(
            delivered, 120, "every accepted node-bucket in a frame", until=accepted.issubset
        )

        async def log_emptied() -> bool:
            return not list(wal.glob("*.wal"))

        await wait_for(log_emptied, 30, "the write-ahead log to drop what Kafka has")
    finally:
        second.stop()
    assert accepted <= framed and len(accepted) == len(NODES) * BUCKETS
