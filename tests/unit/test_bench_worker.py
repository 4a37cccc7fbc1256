"""bench.worker, small: every group closes every timed bucket, the stage timers come off."""

from __future__ import annotations

from bench import worker
from streams.node_health import NodeHealth
from streams.windows import GroupWindow


def test_every_group_closes_each_timed_bucket_and_groups_are_apart() -> None:
    tmpl, settings = worker.template("gpu-slow", 2000, 4)
    fleet = worker.Fleet(tmpl, 90)  # a full group of 60 and one of 30
    out = worker.run(fleet, settings, buckets=2, warmup=2)
    assert fleet.groups == 2
    assert len(out.bucket_s) == 2 and len(out.close_s) == 2 * 2
    assert sorted(out.pipeline.windows) == ["job-0", "job-1"]
    assert len(out.pipeline.node_health) == 90  # renamed nodes: none shared across groups
    assert all(size > 0 for size in out.snapshot_bytes)
    assert worker.state_bytes(out.pipeline) > 0


def test_stage_timers_count_time_and_come_off() -> None:
    originals = (GroupWindow.add, NodeHealth.step)
    tmpl, settings = worker.template("gpu-slow", 2000, 3)
    with worker.Stages() as stages:
        worker.run(worker.Fleet(tmpl, 60), settings, buckets=1, warmup=2)
        assert GroupWindow.add is not originals[0]
    assert (GroupWindow.add, NodeHealth.step) == originals
    assert {"window/merge", "node/GPU health", "peer scoring (score_bucket)"} <= stages.spent.keys()
