"""bench.worker_kafka, tiny: two real workers settle on the partitions, then commit and
count every frame sent, use CPU and write the group-state changelog."""

from __future__ import annotations

from pathlib import Path

from bench import worker as inproc
from bench import worker_kafka


def test_workers_count_every_frame_sent_once_they_settled(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tmpl, _ = inproc.template("gpu-slow", 2000, 2)
    fleet = inproc.Fleet(tmpl, 90)  # two groups on two partitions
    got = worker_kafka.through_kafka(
        kafka_bootstrap,
        fleet,
        buckets=2,
        workers=2,
        partitions=2,
        workdir=tmp_path,
        timeout_s=120.0,
    )
    # through_kafka raises if a frame is never committed or counted
    assert got.spent_s > 0.0 and got.wall_s > 0.0
    assert got.changelog_bytes > 0  # every scored bucket wrote its group's snapshot
