"""A checkpoint save in the frames of a real worker process comes back as a checkpoint I/O
advice record on the alerts topic (its WRITEs queue-dominated) and as checkpoint metrics."""

from __future__ import annotations

import json
from pathlib import Path

from aiokafka import AIOKafkaProducer

from streams.frames import Frame, encode_frame
from streams.sinks.advice import decode_advice
from tests.integration.harness import Deployment, metric, read_topic, wait_for

BUCKET_MS = 30_000
NODES = [f"node{i:02d}" for i in range(4)]
SAVE = 6  # the bucket of the save: 25 s of its 30 stalled, WRITE 1.89 s queued + 136 ms


def values(bucket: int) -> dict[str, float]:
    save = bucket == SAVE
    return {
        "gpu_util": 16.5 if save else 99.0,
        "nfs_write_bytes_rate": 5e9 if save else 3e4,
        "nfs_read_bytes_rate": 1e4,
        "nfs_write_queue_s": 1.89 if save else 0.0005,
        "nfs_write_rtt_s": 0.136 if save else 0.003,
    }


async def test_a_queue_dominated_save_gives_advice_and_metrics(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    group, port = deployment.job, deployment.metrics_port
    topic = deployment.env["PEERWATCH_TOPIC_FRAMES"]
    worker = deployment.worker().start()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for bucket in range(SAVE + 3):
            for node in NODES:
                frame = Frame(group, node, bucket * BUCKET_MS, values(bucket))
                await producer.send_and_wait(topic, encode_frame(frame), key=group.encode())

        async def advised() -> bool:
            return await metric(port, "peerwatch_advice_total") >= 1

        await wait_for(advised, 90, "the checkpoint I/O advice")
        cost = await metric(port, "peerwatch_checkpoint_save_cost_seconds")
        queued = await metric(port, "peerwatch_checkpoint_nfs_request_seconds")

        async def advice_on_the_topic() -> list[dict]:  # published after the count
            records = await read_topic(kafka_bootstrap, deployment.alerts_topic)
            return records if any(decode_advice(json.dumps(r).encode()) for r in records) else []

        records = await wait_for(advice_on_the_topic, 30, "the advice record on the topic")
    finally:
        await producer.stop()
        worker.stop()
    assert abs(cost - 25.0) < 1e-6  # the dip: 82.5 of 99 points for 30 s
    assert abs(queued - 2.026) < 1e-6  # queue + response of WRITE (no load yet)
    advice = [a for r in records if (a := decode_advice(json.dumps(r).encode()))]
    assert [(a.advisor, a.kind, a.group) for a in advice] == [
        ("checkpoint_io", "queue_dominated_write", group)
    ]
    figures = dict(advice[0].figures)
    assert abs(figures["queue_share"] - 1.89 / 2.026) < 1e-9
    assert figures["event_start_ts"] == SAVE * BUCKET_MS
    log = (tmp_path / "worker.log").read_text()
    assert "advice_given advisor=checkpoint_io kind=queue_dominated_write" in log
