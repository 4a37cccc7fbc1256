"""bench.worker, small: every group closes every timed bucket, the stage timers come off."""

from __future__ import annotations

import pytest

from bench import worker
from streams.worker.node_health import NodeHealth
from streams.worker.windows import GroupWindow


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


def test_wider_frames_are_scored_features_that_vary_by_node_and_bucket(tmp_path) -> None:
    tmpl, settings = worker.template("gpu-slow", 2000, 4)
    wide, wide_settings = worker.widen(tmpl, settings, 300, tmp_path, seed=1)
    assert all(len(f.values) == 300 for f in wide[-1])  # per-GPU keys counted
    extras = sorted(k for k in wide[0][0].values if k.startswith(worker.EXTRA_PREFIX))
    assert len(extras) == 300 - len(tmpl[-1][0].values)  # the first bucket has no rates yet
    assert all(set(extras) <= f.values.keys() for frames in wide for f in frames)
    assert set(extras) <= worker.scored_features(wide_settings)  # read from the feature file
    assert not set(extras) & worker.scored_features(settings)
    name = extras[0]
    by_node = {f.values[name] for f in wide[0]}
    by_bucket = {frames[0].values[name] for frames in wide}
    assert len(by_node) == len(wide[0]) and len(by_bucket) == len(wide)  # no constants
    # the template's own values are kept as they were
    assert all(
        {k: v for k, v in w.values.items() if k not in extras} == f.values
        for frames_w, frames in zip(wide, tmpl, strict=True)
        for w, f in zip(frames_w, frames, strict=True)
    )


def test_wider_frames_reach_the_detectors_state() -> None:
    import tempfile

    tmpl, settings = worker.template("gpu-slow", 2000, 4)
    with tempfile.TemporaryDirectory() as directory:
        wide, wide_settings = worker.widen(tmpl, settings, 150, directory, seed=1)
        fleet = worker.Fleet(wide, 60, worker.scored_features(wide_settings))
        out = worker.run(fleet, wide_settings, buckets=2, warmup=2)
    narrow = worker.run(worker.Fleet(tmpl, 60), settings, buckets=2, warmup=2)
    snapshot = worker.TABLE_CODEC.dumps(out.pipeline.snapshot("job-0"))
    assert worker.EXTRA_PREFIX.encode() in snapshot  # the scoring state holds them
    assert worker.state_bytes(out.pipeline) > worker.state_bytes(narrow.pipeline)
    assert min(out.snapshot_bytes) > max(narrow.snapshot_bytes)
    assert out.rss_growth_mib == out.rss_growth_mib  # measured (a number, not NaN)


def test_widen_refuses_fewer_values_than_the_template_holds(tmp_path) -> None:
    tmpl, settings = worker.template("gpu-slow", 2000, 3)
    same = worker.widen(tmpl, settings, len(tmpl[-1][0].values), tmp_path, seed=1)
    assert same == (tmpl, settings)
    with pytest.raises(ValueError, match="already hold"):
        worker.widen(tmpl, settings, 10, tmp_path, seed=1)
