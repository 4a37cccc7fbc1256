"""bench.worker_kafka, tiny: two real workers settle on the partitions, then commit and
count every frame sent, use CPU and write the group-state changelog."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import worker as inproc
from bench import worker_kafka


@pytest.mark.long
@pytest.mark.parametrize("every", [1, 2])  # 2: acks lag a bucket behind the scoring
def test_workers_count_every_frame_sent_once_they_settled(
    kafka_bootstrap: str, tmp_path: Path, every: int
) -> None:
    tmpl, _ = inproc.template("gpu-slow", 2000, 4)
    fleet = inproc.Fleet(tmpl, 90)  # two groups on two partitions
    got = worker_kafka.through_kafka(
        kafka_bootstrap,
        fleet,
        buckets=4,
        workers=2,
        partitions=2,
        workdir=tmp_path,
        timeout_s=120.0,
        snapshot_every=every,
    )
    # through_kafka raises if a frame is never committed or counted
    assert got.spent_s > 0.0 and got.wall_s > 0.0
    # every bucket's snapshot with one (none lost to compaction before it is read back);
    # with two, the first bucket's and the second of each pair (and any alert change's)
    assert fleet.groups * (4 if every == 1 else 3) <= got.changelog_records <= fleet.groups * 4
    assert got.changelog_bytes > 0
