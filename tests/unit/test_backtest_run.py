"""The backtest runner: history chunks through the live frame builder and pipeline give the
alerts the in-process path (``streams.worker.offline``) gives on the same samples."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from streams.backtest.history import NoSeries, ParsedSeries, Part, TimeRange
from streams.backtest.run import run_backtest
from streams.lab.simulator import ClusterConfig, NvlinkBusFault, generate
from streams.settings import Settings
from streams.worker.offline import run_offline
from streams.worker.pipeline import Scored

MINUTE = 60_000
T0 = 1_759_276_800_000


class MemorySource:
    """A history server's answers from memory: the whole series, cut to each chunk."""

    what = "memory"

    def __init__(self, series: list[ParsedSeries], step_ms: int, chunk_ms: int) -> None:
        self.series = series
        self.step_ms = step_ms
        self.chunk_ms = chunk_ms
        self.asked: list[tuple[int, int]] = []

    def split(self, time_range: TimeRange) -> list[Part]:
        return [Part()] if self.series else []

    def chunk(self, lo_ms: int, hi_ms: int) -> Iterator[ParsedSeries]:
        self.asked.append((lo_ms, hi_ms))
        for labels, stamps, values in self.series:
            keep = [i for i, t in enumerate(stamps) if lo_ms <= t < hi_ms]
            yield dict(labels), [stamps[i] for i in keep], [values[i] for i in keep]


def _simulated(minutes: int) -> tuple[ClusterConfig, list[ParsedSeries]]:
    config = ClusterConfig(
        seed=5, job_nodes=6, spares=0, start_ms=T0,
        faults=(NvlinkBusFault("gpu066", gpu=1, onset_ms=T0 + 12 * MINUTE),),
    )  # fmt: skip
    whole: dict[tuple[tuple[str, str], ...], ParsedSeries] = {}
    for _, series in generate(config, T0, T0 + minutes * MINUTE):
        for s in series:
            entry = whole.setdefault(tuple(sorted(s.labels.items())), (dict(s.labels), [], []))
            for ts, value in s.samples:
                if math.isfinite(value):
                    entry[1].append(ts)
                    entry[2].append(value)
    return config, list(whole.values())


def _firings(changes) -> list[tuple[str, str | None, int]]:
    return sorted((c.alertname, c.node, c.bucket_ts) for c in changes if c.status == "firing")


def test_backtest_alerts_equal_the_in_process_path_on_the_same_samples() -> None:
    config, series = _simulated(20)
    settings = Settings(group_labels=["train_job"])
    source = MemorySource(series, settings.bucket_ms, 7 * MINUTE)
    scored: list[Scored] = []
    chunks: list[int] = []
    stats = run_backtest(
        source, TimeRange(T0, T0 + 20 * MINUTE), settings, scored.append, chunks.append
    )
    expected = run_offline(generate(config, T0, T0 + 20 * MINUTE), settings)
    got = [c for item in scored for c in item.changes]
    assert _firings(got) == _firings(expected.changes)
    assert any(name == "PeerwatchXid" and node == "gpu066" for name, node, _ in _firings(got))
    assert stats.buckets == expected.buckets and stats.frames == expected.frames
    assert stats.series == len(series) and stats.rounds == 40
    assert source.asked == [(T0, T0 + 7 * MINUTE), (T0 + 7 * MINUTE, T0 + 14 * MINUTE),
                            (T0 + 14 * MINUTE, T0 + 20 * MINUTE)]  # fmt: skip
    assert chunks == [T0 + 7 * MINUTE, T0 + 14 * MINUTE, T0 + 20 * MINUTE]


def test_series_without_samples_in_the_range_say_so() -> None:
    _, series = _simulated(2)
    source = MemorySource(series, 30_000, 3_600_000)
    later = TimeRange(T0 + 60 * MINUTE, T0 + 70 * MINUTE)
    with pytest.raises(NoSeries, match="have no samples in 2025-10-01T01:00:00Z"):
        run_backtest(source, later, Settings(group_labels=["train_job"]), lambda _: None)


def test_a_selector_matching_nothing_stops_before_reading() -> None:
    source = MemorySource([], 30_000, 3_600_000)
    with pytest.raises(NoSeries, match="no series matches the selector"):
        run_backtest(source, TimeRange(T0, T0 + MINUTE), Settings(), lambda _: None)
    assert source.asked == []
