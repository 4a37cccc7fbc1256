"""A poison frame is logged with its offset, counted and skipped; every group keeps scoring.

Frames go straight onto the frames topic of a real worker process: between the
healthy buckets of two groups come a value that is not JSON, a key that is not
UTF-8, and records that decode but cannot be frames. Before, each of these
crashed the worker's agent (Faust restarted it 5 s later; a frame with a text
value crashed it again at every tick of its group).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from aiokafka import AIOKafkaProducer

from tests.integration.harness import Deployment, metric, wait_for
from tests.integration.test_open_buckets import NODES, frame

POISON = [
    (b"group", b"\xff\x00 not json"),
    (b"\xff\xfe", None),  # a key that is not UTF-8 (the value is a healthy frame)
    (b"group", json.dumps({"group": "g", "node": "n", "ts": "soon", "values": {}}).encode()),
    (b"group", json.dumps({"group": "g", "node": "n", "ts": 0, "values": {"x": "hi"}}).encode()),
]


async def test_poison_frames_are_skipped_and_every_group_keeps_scoring(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    topic, port = deployment.env["PEERWATCH_TOPIC_FRAMES"], deployment.metrics_port
    groups = [deployment.job, deployment.job + "-b"]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    worker = deployment.worker().start()
    try:
        for bucket in range(4):
            for group in groups:
                for node in NODES:
                    value = frame(group, node, bucket)
                    await producer.send_and_wait(topic, value, key=group.encode())
            if bucket == 1:
                for key, value in POISON:
                    value = value or frame(groups[0], NODES[0], bucket)
                    await producer.send_and_wait(
                        topic, value, key=key.replace(b"group", groups[0].encode())
                    )

        async def all_scored() -> bool:
            return await metric(port, "peerwatch_worker_buckets_scored_total") >= 2 * 4

        await wait_for(all_scored, 90, "both groups' 4 buckets to be scored")
        assert await metric(port, "peerwatch_worker_frames_failed_total") == len(POISON)
        assert await metric(port, "peerwatch_worker_ready") == 1
    finally:
        worker.stop()
        await producer.stop()
    log = (tmp_path / "worker.log").read_text()
    skipped = re.findall(r"frame_skipped stage=(\w+) topic=(\S+) partition=(\d+) offset=(\d+)", log)
    assert sorted(stage for stage, *_ in skipped) == ["decode"] * len(POISON)
    assert {t for _, t, _, _ in skipped} == {topic}
    assert "Crashed reason" not in log and "agent_died" not in log  # Faust's and ours
