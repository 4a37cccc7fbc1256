"""bench.worker_kafka, tiny: a real worker counts every pre-loaded frame and uses CPU."""

from __future__ import annotations

from pathlib import Path

from bench import worker as inproc
from bench import worker_kafka


def test_worker_counts_every_preloaded_frame(kafka_bootstrap: str, tmp_path: Path) -> None:
    tmpl, _ = inproc.template("gpu-slow", 2000, 2)
    fleet = inproc.Fleet(tmpl, 90)  # two groups on two partitions
    # one worker: with two, the first drains the pre-loaded topic while the second joins
    # and the rebalance re-delivers (the bench's multi-worker mode is not right yet)
    spent, wall = worker_kafka.through_kafka(
        kafka_bootstrap,
        fleet,
        buckets=2,
        workers=1,
        partitions=2,
        workdir=tmp_path,
        timeout_s=120.0,
    )
    assert spent > 0.0 and wall > 0.0  # through_kafka raises if a frame is never counted
