"""The worker's consumer lag: per assigned frames partition, from end and read offsets."""

from __future__ import annotations

from faust.types import TP
from prometheus_client import generate_latest

from streams.telemetry.metrics import WorkerMetrics
from streams.worker.app import frames_lag


def test_lag_is_the_end_offset_past_the_last_read_one() -> None:
    ends = {TP("peerwatch.frames", 0): 100, TP("peerwatch.frames", 1): 7}
    read = {TP("peerwatch.frames", 0): 89, TP("peerwatch.frames", 1): 6}
    assert frames_lag(ends, read) == {0: 10, 1: 0}


def test_a_partition_not_read_yet_has_no_figure() -> None:
    assert frames_lag({TP("peerwatch.frames", 3): 50}, {}) == {}


def test_a_partition_that_moved_away_loses_its_series() -> None:
    metrics = WorkerMetrics()
    metrics.observe_lag({0: 5, 1: 2})
    metrics.observe_lag({1: 3})
    page = generate_latest(metrics.registry).decode()
    assert 'peerwatch_worker_consumer_lag{partition="1"} 3.0' in page
    assert 'partition="0"' not in page
