"""Two simulated weeks of saves, loads and fail-stops (the checkpoint-weeks scenario's fast
path): the phase classifier and both checkpoint advisors against the plan's ground truth."""

from __future__ import annotations

import bisect
import statistics

import numpy as np
import pytest

from detectors.advisors.checkpoint_interval import CheckpointIntervalParams, mtbf_s, overhead
from streams.lab.simulator.checkpoint_weeks import (
    Advised,
    Truth,
    advise,
    bucket_frames,
    checkpoint_weeks,
    truth,
)
from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.scenarios import get_scenario

WEEK_MS = 7 * 24 * 3_600_000
BUCKET_MS = 30_000
PARAMS = CheckpointIntervalParams()


@pytest.fixture(scope="module")
def run() -> tuple[Advised, Truth]:
    config = checkpoint_weeks(
        np.random.default_rng(1), ClusterConfig(job_nodes=8, spares=0, seed=1)
    )
    end = config.start_ms + 2 * WEEK_MS
    return advise(config, end), truth(config, end)


def matched(advised: Advised, real: Truth) -> list[tuple[int, float, int]]:
    """(truth save index, its seconds, advised save index) for every save both saw: the
    advised save starts in the bucket the true one starts in, or the next (a save that
    begins in a bucket's last second dips its GPUs too little there to count)."""
    starts = [e.start_ts for e in advised.saves]
    out = []
    for k, (start, seconds) in enumerate(real.saves):
        i = bisect.bisect_left(starts, start - BUCKET_MS + 1)
        if i < len(starts) and starts[i] < start + BUCKET_MS:
            out.append((k, seconds, i))
    return out


def test_the_scenario_is_registered_by_name_only() -> None:
    scenario = get_scenario("checkpoint-weeks")
    assert not scenario.default
    config = scenario.config_for(1)
    assert config.checkpoint_interval_s == pytest.approx(2.23 * 3600)
    assert config.faults and all(f.stops_job_at_ms for f in config.faults)


def test_every_save_is_found_with_its_cost_and_bytes(run: tuple[Advised, Truth]) -> None:
    advised, real = run
    pairs = matched(advised, real)
    assert len(real.saves) > 100
    assert sorted({i for _, _, i in pairs}) == list(range(len(advised.saves)))  # no false save
    assert len(pairs) >= 0.98 * len(real.saves)  # a save split evenly over 2 buckets may hide
    # delta: the compute lost, a few % under the stall (the stalled GPUs still do 0-30 %)
    ratios = [advised.saves[i].lost_s / seconds for _, seconds, i in pairs]
    assert 0.93 < statistics.median(ratios) < 1.0
    assert statistics.median(e.lost_s for e in advised.saves) == pytest.approx(
        real.delta_s, rel=0.05
    )
    for _, _, i in pairs:
        assert advised.saves[i].bytes == pytest.approx(real.save_bytes, rel=0.05)


def test_intervals_are_the_true_ones_to_a_bucket(run: tuple[Advised, Truth]) -> None:
    advised, real = run
    by_start = {i: real.saves[k][0] for k, _, i in matched(advised, real)}
    checked = 0
    for i, event in enumerate(advised.saves):
        if event.interval_s is None or i not in by_start or i - 1 not in by_start:
            continue
        assert event.interval_s * 1000 == pytest.approx(
            by_start[i] - by_start[i - 1], abs=2 * BUCKET_MS
        )
        checked += 1
    assert checked > 100
    assert statistics.median(e.interval_s for e in advised.saves if e.interval_s) == (
        pytest.approx(real.interval_s, abs=30)
    )


def test_loads_failures_and_exposure(run: tuple[Advised, Truth]) -> None:
    advised, real = run
    assert real.failures >= 5
    assert advised.interval.failures == real.failures
    assert [round(e.seconds) for e in advised.loads] == [round(s) for _, s in real.loads]
    assert [e.start_ts // BUCKET_MS for e in advised.loads] == [
        s // BUCKET_MS for s, _ in real.loads
    ]
    assert advised.interval.up_s == pytest.approx(real.up_s, abs=30 * real.failures)


def test_the_interval_advice_matches_the_truth(run: tuple[Advised, Truth]) -> None:
    advised, real = run
    m = mtbf_s(
        advised.interval.up_s, advised.interval.failures, PARAMS.prior_mtbf_s, PARAMS.prior_failures
    )
    real_m = real.mtbf_s(PARAMS.prior_mtbf_s, PARAMS.prior_failures)
    assert m == pytest.approx(real_m, rel=0.01)
    f = advised.figures
    assert f is not None
    assert f.optimal_s == pytest.approx(real.optimal_s(real_m), rel=0.1)
    assert f.actual_overhead == pytest.approx(
        overhead(real.interval_s, real.delta_s, real_m), rel=0.1
    )
    # 2.23 h is ~3x the optimum here, as in the source's 4 K phase: advised shorter
    assert real.interval_s / real.optimal_s(real_m) > PARAMS.off_factor
    kinds = [a.kind for a in advised.advice if a.advisor == "checkpoint_interval"]
    assert kinds and kinds[0] == "shorten_interval" and kinds[-1] == "shorten_interval"
    assert "lengthen_interval" not in kinds


def test_the_io_advice_names_the_queue(run: tuple[Advised, Truth]) -> None:
    advised, real = run
    io = [a for a in advised.advice if a.advisor == "checkpoint_io"]
    write = [dict(a.figures) for a in io if a.kind == "queue_dominated_write"]
    read = [dict(a.figures) for a in io if a.kind == "queue_dominated_read"]
    # the calibration is the source's (WRITE 1.89 s of 2.03 s, READ 57 % queued), times the
    # node latencies; one event's node mean carries ~2 % of per-bucket noise
    assert write and all(f["queue_share"] == pytest.approx(1.89 / 2.03, abs=0.002) for f in write)
    assert all(f["request_s"] == pytest.approx(real.write_request_s, rel=0.06) for f in write)
    assert read and all(f["queue_share"] == pytest.approx(0.57, abs=0.002) for f in read)
    assert all(f["request_s"] == pytest.approx(real.read_request_s, rel=0.06) for f in read)
    assert len(write) <= 15  # once a day (repeat_s), not once a save


def test_the_fast_path_is_deterministic() -> None:
    config = checkpoint_weeks(
        np.random.default_rng(3), ClusterConfig(job_nodes=4, spares=0, seed=3)
    )
    end = config.start_ms + 600 * BUCKET_MS
    first = list(bucket_frames(config, end, chunk=97))
    assert first == list(bucket_frames(config, end))  # whatever the chunking
