"""Scrape rounds: samples land in their scrape's bucket whatever the target's offset and jitter."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

import pytest

from detectors.features import FeatureSpec
from streams.frames import Frame
from streams.ingest.builder import FrameBuilder
from streams.ingest.scrape_phase import ScrapePhases, ScrapeTarget
from streams.ingest.series import Series

B = 30_000
T0 = 1_700_000_010_000 // B * B

# one feature per exporter of a node: node_exporter, dcgm-exporter, the trainer
FEATURES = (
    FeatureSpec("procs", ("node_procs_running",), "gauge", reduce="sum"),
    FeatureSpec("intr", ("node_intr_total",), "counter", reduce="sum"),
    FeatureSpec("temp", ("DCGM_FI_DEV_GPU_TEMP",), "gauge", reduce="max"),
    FeatureSpec("step_s", ("trainer_step_seconds",), "gauge", reduce="max"),
)
TARGETS = (
    (9100, "node", ("node_procs_running", "node_intr_total")),
    (9400, "dcgm", ("DCGM_FI_DEV_GPU_TEMP",)),
    (9500, "trainer", ("trainer_step_seconds",)),
)


def fleet_stream(
    nodes: int, rounds: int, seed: int, jitter_ms: int = 500
) -> list[tuple[int, Series]]:
    """Every target at its own uniform offset in 0-30 s, each scrape jittered uniformly by
    +-``jitter_ms``; one sample per series per scrape, in timestamp order."""
    rng = random.Random(seed)
    out: list[tuple[int, Series]] = []
    for n in range(nodes):
        for port, job, names in TARGETS:
            offset = rng.uniform(0, B)
            labels = [
                {"__name__": name, "instance": f"gpu{n:02d}:{port}", "job": job, "cluster": "c"}
                for name in names
            ]
            for k in range(rounds):
                ts = T0 + k * B + round(offset + rng.uniform(-jitter_ms, jitter_ms))
                out.extend((ts, Series(lbl, [(ts, float(k * 100 + 7))])) for lbl in labels)
    out.sort(key=lambda item: item[0])
    return out


def stream_through(
    b: FrameBuilder, stream: list[tuple[int, Series]], send_every_ms: int = 5_000
) -> list[Frame]:
    """remote_write-like: what was scraped is sent every ``send_every_ms``, event time as wall
    time; the flusher closes after each request with the old 10-s idle flush."""
    frames: list[Frame] = []
    i = 0
    while i < len(stream):
        until = stream[i][0] // send_every_ms * send_every_ms + send_every_ms
        batch = []
        while i < len(stream) and stream[i][0] < until:
            batch.append(stream[i][1])
            i += 1
        b.add(batch, now_s=until / 1000)
        frames += b.close_due_by_watermark(now_s=until / 1000, idle_s=10.0)
    return frames + b.flush_all()


def test_spread_offsets_with_jitter_give_one_complete_frame_per_node_and_bucket() -> None:
    """63 nodes x 3 targets, offsets uniform over the interval, +-500 ms jitter, 200 rounds:
    no node empty in a bucket, none doubled, every frame complete (issue 8 part 3)."""
    nodes, rounds = 63, 200
    frames = stream_through(FrameBuilder(FEATURES), fleet_stream(nodes, rounds, seed=8))
    per_key = Counter((f.node, f.ts) for f in frames)
    assert max(per_key.values()) == 1  # never two frames (partials) of a node in a bucket
    assert all(f.ts % B == 0 for f in frames)
    by_node: dict[str, list[Frame]] = {}
    for f in sorted(frames, key=lambda f: f.ts):
        by_node.setdefault(f.node, []).append(f)
    assert len(by_node) == nodes
    for node_frames in by_node.values():
        # A target whose first scrape jittered to just before T0 has its rounds one bucket
        # early: the first and last bucket may hold part of a node. All in between are
        # consecutive and complete, and each gauge's value is its round's: none skipped
        # (a bucket left empty) and none doubled (the later scrape of two winning).
        inner = node_frames[1:-1]
        assert [f.ts for f in inner] == list(range(inner[0].ts, inner[-1].ts + B, B))
        assert len(inner) >= rounds - 2
        for name in ("procs", "temp", "step_s", "intr"):
            got = [f.values[name] for f in inner]
            if name == "intr":
                assert got == pytest.approx([100 / 30] * len(inner), rel=0.05)
            else:
                assert [b - a for a, b in pairwise(got)] == [100.0] * (len(got) - 1)


def test_a_target_near_the_boundary_keeps_one_sample_per_bucket() -> None:
    """+29.8 s with +-500 ms jitter: cut at multiples of 30 s it would skip and double."""
    b = FrameBuilder(FEATURES, grace_ms=0)
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "n1:9400", "cluster": "c"}
    for k, jitter in enumerate([0, 400, -300, 450, 450, -450, 100, 300]):
        b.add([Series(labels, [(T0 + k * B + 29_800 + jitter, float(k))])])
    frames = b.flush_all()
    assert [(f.ts, f.values["temp"]) for f in frames] == [(T0 + k * B, k) for k in range(8)]


def test_a_moved_phase_is_relearned_after_two_scrapes() -> None:
    """A Prometheus restart moves the target from +2 s to +17 s: still one sample per bucket."""
    b = FrameBuilder(FEATURES, grace_ms=0)
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "n1:9400", "cluster": "c"}
    for k in range(12):
        b.add([Series(labels, [(T0 + k * B + (2_000 if k < 4 else 17_000), float(k))])])
    frames = b.flush_all()
    assert [(f.ts, f.values["temp"]) for f in frames] == [(T0 + k * B, k) for k in range(12)]
    assert b.phases.relearned == 1


def test_targets_scraped_twice_per_bucket_do_not_churn_their_phase() -> None:
    """A 15-s scrape interval: every other sample is off phase, never two in a row."""
    phases = ScrapePhases(B)
    target = ScrapeTarget()
    got = [phases.bucket(target, T0 + 3_000 + i * 15_000) for i in range(20)]
    assert phases.relearned == 0
    assert Counter(got) == {T0 + k * B: 2 for k in range(10)}


def test_a_stopped_stream_is_flushed_after_the_idle_time() -> None:
    """Idle flush is the fallback for a stream that stopped, not for a quiet node."""
    b = FrameBuilder(FEATURES)
    now = T0 / 1000
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "n1:9400", "cluster": "c"}
    b.add([Series(labels, [(T0 + 1_000, 50.0)])], now_s=now + 1)
    b.add([Series({**labels, "instance": "n2:9400"}, [(T0 + 20_000, 50.0)])], now_s=now + 20)
    assert b.close_due_by_watermark(now_s=now + 29.9, idle_s=10.0) == []  # n1 quiet, not all
    closed = b.close_due_by_watermark(now_s=now + 30, idle_s=10.0)
    assert [(f.node, f.ts) for f in closed] == [("n1", T0), ("n2", T0)]
    assert b.open_frames == 0


def test_phases_reject_bad_parameters() -> None:
    with pytest.raises(ValueError, match="bucket_ms"):
        ScrapePhases(0)
    with pytest.raises(ValueError, match="relearn_ms"):
        ScrapePhases(B, relearn_ms=B // 2)
