"""An open bucket survives `kill -9` of the worker (issue 9, part 4b).

Frames go straight onto the frames topic. Three buckets of eight nodes close;
a fourth gets seven of its eight frames and stays open (inside its grace
period) while Faust has time to commit. The worker is killed with SIGKILL, a
new one starts, and the eighth frame arrives: the bucket must be scored with
all eight nodes, not with the one frame sent after the crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streams.frames import Frame, encode_frame
from tests.integration.harness import Deployment, at_least, metric, wait_for

BUCKET_MS = 30_000
NODES = [f"node{i:02d}" for i in range(8)]


def frame(group: str, node: str, bucket: int) -> bytes:
    values = {"gpu_util": 90.0 + bucket, "gpu_power_w": 600.0, "procs_running": 12.0}
    return encode_frame(Frame(group, node, bucket * BUCKET_MS, values))


@pytest.mark.long
async def test_a_bucket_open_at_a_worker_crash_is_scored_with_all_its_frames(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    # Long enough that only the missing eighth frame can close the open bucket in time.
    deployment.env["PEERWATCH_GRACE_S"] = "600"
    group, port = deployment.job, deployment.metrics_port

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()

    async def send(node: str, bucket: int) -> None:
        topic = deployment.env["PEERWATCH_TOPIC_FRAMES"]
        await producer.send_and_wait(topic, frame(group, node, bucket), key=group.encode())

    worker = deployment.worker().start()
    try:
        for bucket in range(3):
            for node in NODES:
                await send(node, bucket)
        for node in NODES[:-1]:
            await send(node, 3)

        async def all_consumed() -> bool:
            return await metric(port, "peerwatch_worker_frames_total") >= 3 * 8 + 7

        await wait_for(all_consumed, 60, "the worker to consume the open bucket's frames")
        assert await metric(port, "peerwatch_worker_buckets_scored_total") == 3
        assert await metric(port, "peerwatch_worker_frames_unacked") == 7
        # the closed buckets' frames are acked; the open bucket's seven are held
        committed = await wait_for(
            deployment.frames_committed, 60, "the closed buckets' commits", until=at_least(3 * 8)
        )
        assert committed == 3 * 8
        worker.kill()

        worker = deployment.worker().start()
        await send(NODES[-1], 3)

        async def open_bucket_scored() -> bool:
            return await metric(port, "peerwatch_worker_buckets_scored_total") >= 1

        await wait_for(open_bucket_scored, 90, "the restarted worker to score the open bucket")
        assert await metric(port, "peerwatch_worker_bucket_nodes") == len(NODES)
        assert await metric(port, "peerwatch_worker_buckets_scored_total") == 1
    finally:
        worker.stop()
        await producer.stop()
