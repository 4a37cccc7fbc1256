"""A worker killed between two group snapshots loses nothing (``snapshot_every_buckets``).

Frames of one group of eight nodes go straight onto the frames topic. With a snapshot
every 4 buckets the first worker writes it after buckets 3 and 7, scores buckets 8 to 10
(a node starts to collapse in 10) and is killed with SIGKILL: their frames were never
acked. The restarted worker restores bucket 7's snapshot, gets the frames of 8 to 10
again from Kafka and scores them again, then the buckets sent after the restart.
The alerts on the alerts topic and the buckets the restarted worker scored equal the
in-process Pipeline's uninterrupted run on the same frames.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from streams.frames import Frame, encode_frame
from streams.settings import Settings
from streams.sinks.payloads import AlertLinks, to_record
from streams.worker.pipeline import Pipeline
from tests.integration.harness import Deployment, at_least, read_alert_records, wait_for

BUCKET_MS = 30_000
EVERY = 4
NODES = [f"node{i:02d}" for i in range(8)]
VICTIM, COLLAPSE_AT = "node03", 10  # fires in bucket 12 when no frame is lost
CRASH_AFTER, LAST = 10, 23  # buckets sent to the first worker; to the second
SAVED = (CRASH_AFTER + 1) // EVERY * EVERY - 1  # the last snapshot's bucket at the crash


def frame(group: str, node: str, bucket: int) -> Frame:
    collapsed = node == VICTIM and bucket >= COLLAPSE_AT
    values = {
        "gpu_util": 5.0 if collapsed else 90.0 + bucket % 3 + NODES.index(node) / 10,
        "gpu_power_w": 150.0 if collapsed else 600.0,
        "procs_running": 12.0,
    }
    return Frame(group, node, bucket * BUCKET_MS, values)


def uninterrupted(settings: Settings, group: str) -> tuple[list[int], list[dict[str, Any]]]:
    """The buckets scored and the alert records of the in-process Pipeline on every frame."""
    pipeline, links = Pipeline.from_settings(settings), AlertLinks.from_settings(settings)
    buckets, alerts = [], []
    for bucket in range(LAST + 1):
        for node in NODES:
            f = frame(group, node, bucket)
            pipeline.add(f, 0.0)
            for scored in pipeline.due(group, 0.0):
                buckets.append(scored.bucket.ts)
                alerts += [dict(to_record(c, links).to_representation()) for c in scored.changes]
    return buckets, alerts


def essentials(record: dict[str, Any]) -> tuple[Any, ...]:
    return (
        record["status"],
        tuple(sorted(record["labels"].items())),
        record["bucket_ts"],
        round(record["score"], 6),
    )


def scored_in(log: str, group: str) -> list[int]:
    """The buckets a worker's log says it scored, with all eight nodes, in order."""
    found = re.findall(rf"bucket_scored group={re.escape(group)} bucket=(\d+) nodes=(\d+)", log)
    assert {int(n) for _, n in found} <= {len(NODES)}, found
    return [int(ts) for ts, _ in found]


@pytest.mark.long
async def test_a_worker_killed_between_snapshots_rescores_what_was_not_saved(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    deployment.env["PEERWATCH_SNAPSHOT_EVERY_BUCKETS"] = str(EVERY)
    # buckets close on their frames only, however long a restart under load takes
    deployment.env["PEERWATCH_GRACE_S"] = "600"
    for name, value in deployment.env.items():  # the worker's settings, for the reference
        monkeypatch.setenv(name, value)
    settings = Settings()
    group, log_path = deployment.job, tmp_path / "worker.log"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()

    async def send(buckets: range) -> None:
        for bucket in buckets:
            for node in NODES:
                value = encode_frame(frame(group, node, bucket))
                await producer.send_and_wait(settings.topic_frames, value, key=group.encode())

    async def scored(count: int) -> bool:
        return await deployment.buckets_scored() >= count

    want_buckets, want_alerts = uninterrupted(settings, group)

    worker = deployment.worker().start()
    try:
        await send(range(CRASH_AFTER + 1))
        await wait_for(lambda: scored(CRASH_AFTER + 1), 60, "the first worker's buckets")
        # acked up to the last snapshot's bucket, never past it: frames of 8 to 10 are held
        acked = len(NODES) * (SAVED + 1)
        committed = await wait_for(
            deployment.frames_committed, 60, "the first worker's commits", until=at_least(acked)
        )
        assert committed == acked
        worker.kill()
        first_log = log_path.read_text()

        worker = deployment.worker().start()
        await send(range(CRASH_AFTER + 1, LAST + 1))
        await wait_for(lambda: scored(LAST - SAVED), 90, "the restarted worker's buckets")
        records = await wait_for(
            lambda: read_alert_records(kafka_bootstrap, settings.topic_alerts),
            30,
            "the alert records",
            until=at_least(len(want_alerts)),
        )
    finally:
        worker.stop()
        await producer.stop()
    second_log = log_path.read_text()[len(first_log) :]

    assert want_buckets == [b * BUCKET_MS for b in range(LAST + 1)]
    assert [(r["labels"]["node"], r["bucket_ts"]) for r in want_alerts] == [
        (VICTIM, 12 * BUCKET_MS)
    ]  # what the frames of the buckets not checkpointed at the crash are needed for
    assert scored_in(first_log, group) == want_buckets[: CRASH_AFTER + 1]
    # the restarted worker began after the last snapshot's bucket (7): 8 to 10 again
    assert scored_in(second_log, group) == want_buckets[SAVED + 1 :]
    assert sorted(map(essentials, records)) == sorted(map(essentials, want_alerts))
