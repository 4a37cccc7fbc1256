"""The worker's readiness, as the /-/ready handler and the log see it: a rebalance takes
it down until the new assignment's state is restored, and each change is logged once."""

from __future__ import annotations

import logging

import pytest

from streams.telemetry.metrics import WorkerMetrics
from streams.worker.health import WorkerHealth


def transitions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("worker_")]


def test_a_rebalance_takes_readiness_down_until_restored_and_logs_each_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="peerwatch.worker")
    metrics = WorkerMetrics()
    health = WorkerHealth(metrics)

    def ready() -> float | None:  # what /metrics says
        return metrics.registry.get_sample_value("peerwatch_worker_ready")

    health.agent_running(True)
    health.assigned(4)
    health.rebalance_complete()
    assert health.not_ready() is None and ready() == 1
    health.rebalancing()  # partitions revoked: a worker joined or left
    assert health.not_ready() == "rebalancing: table state not restored yet"
    assert ready() == 0
    health.assigned(2)  # assigned, state not restored yet: still down, nothing new logged
    assert health.not_ready() == "rebalancing: table state not restored yet"
    assert metrics.registry.get_sample_value("peerwatch_worker_partitions") == 2
    health.rebalance_complete()
    assert health.not_ready() is None and ready() == 1
    assert transitions(caplog) == [
        "worker_not_ready reason='no partition assignment yet'",
        "worker_not_ready reason='rebalancing: table state not restored yet'",
        "worker_ready",
        "worker_not_ready reason='rebalancing: table state not restored yet'",
        "worker_ready",
    ]
