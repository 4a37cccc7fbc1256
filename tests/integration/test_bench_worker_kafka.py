"""bench.worker_kafka, tiny: two real workers settle on the partitions, then count every
frame sent and use CPU."""

from __future__ import annotations

from pathlib import Path

from bench import worker as inproc
from bench import worker_kafka


def test_workers_count_every_frame_sent_once_they_settled(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tmpl, _ = inproc.template("gpu-slow", 2000, 2)
    fleet = inproc.Fleet(tmpl, 90)  # two groups on two partitions
    spent, wall = worker_kafka.through_kafka(
        kafka_bootstrap,
        fleet,
        buckets=2,
        workers=2,
        partitions=2,
        workdir=tmp_path,
        timeout_s=120.0,
    )
    assert spent > 0.0 and wall > 0.0  # through_kafka raises if a frame is never counted
