"""The soak's schedule and figures (bench.soak, bench.procmem): pure parts, synthetic traces."""

from __future__ import annotations

import os

import pytest

from bench.procmem import growth_mib, rss_mib
from bench.soak import Trace, lag_figures, memory, sprinkled_faults, uncommitted


def test_faults_cycle_evenly_over_the_middle_and_leave_the_last_quarter_alone() -> None:
    faults = sprinkled_faults(1000.0, 5)
    assert [f.kind for f in faults] == [
        "kill-worker", "am-stall", "kill-ingest", "restart-broker", "am-outage",
    ]  # fmt: skip
    assert [f.at_s for f in faults] == [100.0, 262.5, 425.0, 587.5, 750.0]
    # a lasting fault ends before the next one starts
    assert [f.duration_s for f in faults] == [0.0, 30.0, 0.0, 0.0, 81.2]


def test_without_the_lab_s_own_broker_no_broker_restart() -> None:
    kinds = [f.kind for f in sprinkled_faults(600.0, 8, broker=False)]
    assert "restart-broker" not in kinds and len(kinds) == 8


def test_growth_compares_the_last_third_with_the_first() -> None:
    assert growth_mib([10, 11, 10, 50, 12, 13, 20, 21, 20]) == pytest.approx(10.0)
    assert growth_mib([5.0, 6.0]) is None


def test_a_restart_counts_as_a_pid_and_growth_is_the_longest_lived_pid_s() -> None:
    trace = Trace(
        rss={
            # pid 1 grows 100 -> 160 over 40 s, is killed; pid 2 lives 20 s, flat at 90
            "w1": [(t, 1, 100.0 + 1.5 * t) for t in range(0, 41, 5)]
            + [(t, 2, 90.0) for t in range(45, 66, 5)],
            "ingest": [(t, 7, 200.0) for t in range(0, 101, 5)],
        }
    )
    figures = {m.name: m for m in memory(trace, until_s=60.0)}
    w1 = figures["w1"]
    assert (w1.pids, w1.start_mib, w1.end_mib, w1.max_mib) == (2, 100.0, 90.0, 160.0)
    assert w1.lived_s == 40.0
    assert w1.growth_mib == pytest.approx(1.5 * 35 - 1.5 * 5)  # medians of t 30..40, 0..10
    ingest = figures["ingest"]
    assert (ingest.growth_mib, ingest.lived_s, ingest.end_mib) == (0.0, 60.0, 200.0)


def test_lag_figures_skip_unanswered_samples_and_stop_at_the_stream_s_end() -> None:
    trace = Trace(lag=[(0.0, None), (5.0, 10), (10.0, None), (15.0, 40), (20.0, 25), (99.0, 0)])
    lag = lag_figures(trace, until_s=20.0)
    assert (lag.start, lag.end, lag.max, lag.median) == (10, 25, 40, 25)
    assert (lag.samples, lag.unanswered) == (5, 2)
    assert lag_figures(Trace(), 10.0).max is None


def test_rss_of_this_process_and_of_none() -> None:
    assert rss_mib(os.getpid()) > 1.0
    with pytest.raises(OSError):
        rss_mib(2**22 + 12345)  # above the kernel's pid_max default


def test_lag_counts_uncommitted_records_and_an_amnesic_coordinator_is_no_answer() -> None:
    """The 30-min soak read the whole topic as lag (40,983 frames) once, right after a
    broker restart: committed offsets answered -1 for partitions committed before."""
    seen: dict[int, int] = {}
    assert uncommitted({0: 10, 1: 5}, {0: 7}, seen) == 3 + 5  # partition 1: never committed
    assert uncommitted({0: 12, 1: 6}, {0: 12, 1: 6}, seen) == 0
    assert uncommitted({0: 20, 1: 9}, {0: -1, 1: 6}, seen) is None
    assert uncommitted({0: 20, 1: 9}, {0: 18, 1: 9}, seen) == 2
