"""``FrameBuilder.add_batch`` (the compiled decoder's columns) against ``FrameBuilder.add``
(``Series``), its reference: the same stats, frames and state after every call."""

from __future__ import annotations

import numpy as np
import pytest

from bench.frames_equivalence import batch_case, comparable
from bench.ingest_bench import make_builder, simulate
from streams.catalog import DEFAULT_FEATURES
from streams.ingest.builder import FrameBuilder
from streams.ingest.remote_write import WriteRequestDecoder, encode_write_request
from streams.ingest.series import SampleBatch, Series
from streams.lab.evaluation.runner import evaluation_settings
from streams.lab.simulator.run import MAX_SAMPLES_PER_SEND, split_samples

T0 = 1_700_000_010_000 // 30_000 * 30_000


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("chunk", range(4))
def test_random_scrape_streams_give_the_same_frames_either_way(chunk: int, native: bool) -> None:
    """Drops in order, frames, counters and phases: bench.frames_equivalence's batch cases,
    with the compiled loop (native/'s ``AddKernel``) and without it."""
    seeds = range(chunk * 60, chunk * 60 + 60)
    unequal = [seed for seed in seeds if not batch_case(seed, native)]
    assert unequal == []


@pytest.mark.parametrize("native", [False, True])
def test_decoded_bodies_give_the_same_frames_either_way(native: bool) -> None:
    """A simulated cluster's bodies: decode + add against decode_batch + add_batch."""
    settings = evaluation_settings()
    a, b = make_builder(FrameBuilder, settings), make_builder(FrameBuilder, settings)
    da, db = WriteRequestDecoder(native=native), WriteRequestDecoder(native=native)
    frames_a, frames_b = [], []
    for t_ms, series in simulate("gpu-slow", 7, 5):
        now_s = t_ms / 1000
        for body in (encode_write_request(s) for s in split_samples(series, MAX_SAMPLES_PER_SEND)):
            sa, sb = a.add(da.decode(body), now_s), b.add_batch(db.decode_batch(body), now_s)
            assert (sa.accepted, list(sa.dropped.items())) == (
                sb.accepted,
                list(sb.dropped.items()),
            )
        frames_a += a.close_due_by_watermark(now_s=now_s, idle_s=60.0)
        frames_b += b.close_due_by_watermark(now_s=now_s, idle_s=60.0)
    frames_a += a.flush_all()
    frames_b += b.flush_all()
    assert frames_a and comparable(frames_a) == comparable(frames_b)


def test_a_batch_is_its_series() -> None:
    labels = [{"__name__": "up", "instance": "n1:9100"}, {"__name__": "m"}]
    batch = SampleBatch(labels, np.array([T0, T0 + 1]), np.array([1.0, float("nan")]))
    series = batch.series()
    assert len(batch) == 2
    assert [s.labels for s in series] == labels and series[0].labels is labels[0]
    assert series[0].samples == [(T0, 1.0)] and type(series[0].samples[0][0]) is int
    assert np.isnan(series[1].samples[0][1])


def test_a_node_in_no_group_waits_for_it_in_a_batch_too() -> None:
    """A series held for its node's group (``_hold_groupless``) is replayed from a batch
    as from ``Series``: the later series names the group, both samples count."""
    first = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "n1:9400", "gpu": "0"}
    named = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "n1:9400", "gpu": "1", "cluster": "c"}
    batch = SampleBatch([first, named], np.array([T0, T0]), np.array([50.0, 60.0]))
    a, b = FrameBuilder(DEFAULT_FEATURES), FrameBuilder(DEFAULT_FEATURES)
    sa, sb = a.add(batch.series()), b.add_batch(batch)
    assert (sb.accepted, sb.dropped) == (sa.accepted, sa.dropped) == (2, {})
    frames = b.flush_all()
    assert [f.group for f in frames] == ["c"]
    assert comparable(frames) == comparable(a.flush_all())


def test_add_batch_takes_series_too() -> None:
    b = make_builder(FrameBuilder, evaluation_settings())
    stats = b.add_batch([Series({"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "n1"}, [])])
    assert stats.accepted == 0
