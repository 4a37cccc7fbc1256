"""FrameBuilder: rates, reductions, node / group identity, bucket closing, merging partials."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.features import FeatureSpec
from streams.catalog import DEFAULT_FEATURES
from streams.frames import Frame, merge_frames
from streams.ingest.builder import FrameBuilder, node_from_instance
from streams.ingest.remote_write import STALE_NAN
from streams.ingest.series import Series

S = 1_000  # one second in ms
T0 = 1_700_000_010_000 // 30_000 * 30_000  # a bucket start

TEMP = FeatureSpec("temp", ("gpu_temp",), "gauge", reduce="max")
UTIL = FeatureSpec("util", ("gpu_util",), "gauge", reduce="min")
PROCS = FeatureSpec("procs", ("procs_running",), "gauge", reduce="sum")
INTR = FeatureSpec("intr", ("intr_total",), "counter", reduce="sum")
FEATURES = (TEMP, UTIL, PROCS, INTR)

NFS_RTT = "node_mountstats_nfs_operations_response_time_seconds_total"
NFS_REQ = "node_mountstats_nfs_operations_requests_total"


def series(name: str, *samples: tuple[int, float], **labels: str) -> Series:
    base = {"__name__": name, "instance": "n1:9100", "cluster": "c1"}
    base.update(labels)
    return Series({k: v for k, v in base.items() if v}, list(samples))


def builder(**kwargs: object) -> FrameBuilder:
    return FrameBuilder(FEATURES, **kwargs)  # type: ignore[arg-type]


def frames_by_ts(frames: list[Frame]) -> dict[int, dict[str, float]]:
    return {f.ts: f.values for f in frames}


# --- counters ------------------------------------------------------------------------------


def test_counter_rate_is_reset_safe() -> None:
    """Hand-computed: +300 in 30 s = 10/s; drop to 50 = restart, 50 in 30 s; then +60 in 30 s."""
    b = builder()
    b.add(
        [series("intr_total", (T0, 100), (T0 + 30 * S, 400), (T0 + 60 * S, 50), (T0 + 90 * S, 110))]
    )
    got = frames_by_ts(b.flush_all())
    assert got.keys() == {T0 + 30 * S, T0 + 60 * S, T0 + 90 * S}
    assert got[T0 + 30 * S]["intr"] == pytest.approx(10.0)
    assert got[T0 + 60 * S]["intr"] == pytest.approx(50 / 30)
    assert got[T0 + 90 * S]["intr"] == pytest.approx(2.0)


def test_first_counter_sample_gives_no_rate() -> None:
    b = builder()
    stats = b.add([series("intr_total", (T0, 100))])
    assert stats.accepted == 1
    assert b.flush_all() == []


def test_counter_rate_uses_the_latest_pair_in_a_bucket() -> None:
    b = builder()
    b.add([series("intr_total", (T0, 0), (T0 + 10 * S, 100), (T0 + 20 * S, 400))])
    assert frames_by_ts(b.flush_all())[T0]["intr"] == pytest.approx(30.0)


def test_stale_marker_ends_a_series() -> None:
    """After a stale marker the next sample is a first sample: no rate across the gap."""
    b = builder()
    stats = b.add(
        [
            series(
                "intr_total",
                (T0, 100),
                (T0 + 30 * S, 400),
                (T0 + 45 * S, STALE_NAN),
                (T0 + 60 * S, 1000),
                (T0 + 90 * S, 1300),
            )
        ]
    )
    assert stats.dropped == {"stale": 1}
    got = frames_by_ts(b.flush_all())
    assert got.keys() == {T0 + 30 * S, T0 + 90 * S}
    assert got[T0 + 90 * S]["intr"] == pytest.approx(10.0)


def test_duplicate_and_out_of_order_samples_are_dropped_and_counted() -> None:
    b = builder()
    b.add([series("intr_total", (T0, 100), (T0 + 30 * S, 400))])
    stats = b.add(
        [series("intr_total", (T0 + 30 * S, 400), (T0 + 15 * S, 200), (T0 + 60 * S, 700))]
    )
    assert stats.accepted == 1
    assert stats.dropped == {"duplicate": 1, "out_of_order": 1}
    got = frames_by_ts(b.flush_all())
    assert got[T0 + 60 * S]["intr"] == pytest.approx(10.0)


def test_non_finite_values_are_dropped_but_stale_markers_are_not_non_finite() -> None:
    b = builder()
    stats = b.add(
        [
            series(
                "gpu_temp",
                (T0, math.nan),
                (T0 + S, math.inf),
                (T0 + 2 * S, -math.inf),
                (T0 + 3 * S, STALE_NAN),
            )
        ]
    )
    assert stats.accepted == 0
    assert stats.dropped == {"non_finite": 3, "stale": 1}
    assert stats.total_dropped == 4


# --- gauges and reductions -----------------------------------------------------------------------


def test_gauge_last_sample_in_a_bucket_wins() -> None:
    b = builder()
    b.add([series("gpu_temp", (T0, 70), (T0 + 20 * S, 50))])
    assert frames_by_ts(b.flush_all())[T0]["temp"] == 50


def test_per_gpu_max_and_min_remember_the_gpu() -> None:
    b = builder()
    temps = [61, 60, 62, 75, 60, 63, 61, 60]
    utils = [99, 100, 99, 98, 100, 12, 99, 100]
    b.add([series("gpu_temp", (T0, t), gpu=str(g)) for g, t in enumerate(temps)])
    b.add([series("gpu_util", (T0, u), gpu=str(g)) for g, u in enumerate(utils)])
    (frame,) = b.flush_all()
    assert frame.values == {"temp": 75, "util": 12}
    assert frame.gpus == {"temp": "3", "util": "5"}


def test_a_sum_past_the_float_range_drops_that_feature_only() -> None:
    """Issue 9: fsum raised on 1e308 + 1e308 and lost the batch; now the feature drops, counted."""
    b = builder()
    b.add(
        [
            series("procs_running", (T0, 1e308), cpu="a"),
            series("procs_running", (T0, 1e308), cpu="b"),
            series("gpu_temp", (T0, 50)),
            series("procs_running", (T0, 3), instance="n2"),
        ]
    )
    frames = {f.node: f.values for f in b.flush_all()}
    assert frames == {"n1": {"temp": 50}, "n2": {"procs": 3}}
    assert b.dropped_results == {"non_finite_result": 1}


def test_plus_and_minus_infinite_rates_in_one_sum_drop_that_feature_only() -> None:
    """Issue 9: a +inf and a -inf counter rate made fsum raise; the next close still works."""
    b = builder()
    b.add(
        [
            series("intr_total", (T0, -1e308), (T0 + S, 1e308), cpu="a"),  # +inf rate
            series("intr_total", (T0, 0.0), (T0 + S, -1e308), cpu="b"),  # a "reset": -inf rate
            series("gpu_temp", (T0, 50)),
        ]
    )
    assert [f.values for f in b.close_due(T0 + 30 * S)] == [{"temp": 50}]
    b.add([series("gpu_temp", (T0 + 30 * S, 51))])
    assert [f.values for f in b.flush_all()] == [{"temp": 51}]
    assert b.dropped_results == {"non_finite_result": 1}


def test_sum_reduces_several_series_without_a_gpu() -> None:
    b = builder()
    b.add([series("procs_running", (T0, 3), cpu="a"), series("procs_running", (T0, 4), cpu="b")])
    (frame,) = b.flush_all()
    assert frame.values == {"procs": 7}
    assert frame.gpus == {}


def test_nfs_seconds_per_request_pairs_series_by_labels() -> None:
    """GETATTR response seconds per request: 3 s / 600 requests over 30 s = 5 ms each."""
    b = FrameBuilder(DEFAULT_FEATURES)
    mount = {"export": "nfs1:/data", "mountpoint": "/data", "operation": "GETATTR"}
    b.add(
        [
            series(NFS_RTT, (T0, 10.0), (T0 + 30 * S, 13.0), **mount),
            series(NFS_REQ, (T0, 1000), (T0 + 30 * S, 1600), **mount),
        ]
    )
    got = frames_by_ts(b.flush_all())
    assert got == {T0 + 30 * S: {"nfs_getattr_rtt_s": pytest.approx(0.005)}}


def test_nfs_ratio_with_zero_requests_is_missing_not_inf() -> None:
    b = FrameBuilder(DEFAULT_FEATURES)
    mount = {"mountpoint": "/data", "operation": "GETATTR"}
    b.add(
        [
            series(NFS_RTT, (T0, 10.0), (T0 + 30 * S, 10.0), **mount),
            series(NFS_REQ, (T0, 1000), (T0 + 30 * S, 1000), **mount),
        ]
    )
    assert b.flush_all() == []


def test_nfs_ratio_takes_the_worst_mount() -> None:
    b = FrameBuilder(DEFAULT_FEATURES)
    got = []
    for mountpoint, rtt in (("/a", 3.0), ("/b", 12.0)):
        labels = {"mountpoint": mountpoint, "operation": "GETATTR"}
        got.append(series(NFS_RTT, (T0, 0.0), (T0 + 30 * S, rtt), **labels))
        got.append(series(NFS_REQ, (T0, 0), (T0 + 30 * S, 600), **labels))
    b.add(got)
    (frame,) = b.flush_all()
    assert frame.values["nfs_getattr_rtt_s"] == pytest.approx(0.02)


def test_series_that_no_feature_uses_are_unknown_metrics() -> None:
    """Unknown names, and known names whose labels fail the feature's match (ACCESS)."""
    b = FrameBuilder(DEFAULT_FEATURES)
    stats = b.add(
        [
            series("node_filefd_allocated", (T0, 1.0), (T0 + S, 2.0)),
            series(NFS_RTT, (T0, 1.0), operation="ACCESS"),
        ]
    )
    assert stats.accepted == 0
    assert stats.dropped == {"unknown_metric": 3}


# --- node and group identity ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance", "node"),
    [
        ("10.0.0.7:9100", "10.0.0.7"),
        ("gpu-node-07:9400", "gpu-node-07"),
        ("[::1]:9100", "::1"),
        ("[fe80::1]", "fe80::1"),
        ("fe80::1", "fe80::1"),
        ("gpu-node-07", "gpu-node-07"),
    ],
)
def test_instance_port_is_stripped(instance: str, node: str) -> None:
    assert node_from_instance(instance) == node
    b = builder()
    b.add([series("gpu_temp", (T0, 50), instance=instance)])
    assert b.flush_all()[0].node == node


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"instance": "", "hostname": "h1", "Hostname": "H1"}, "h1"),
        ({"instance": "", "Hostname": "H1"}, "H1"),
        ({"instance": "n9:9100", "Hostname": "H1"}, "n9"),
    ],
)
def test_node_comes_from_the_first_present_label(labels: dict[str, str], node: str) -> None:
    b = builder()
    b.add([series("gpu_temp", (T0, 50), **labels)])
    assert b.flush_all()[0].node == node


def test_series_without_node_are_dropped_and_counted() -> None:
    b = builder()
    stats = b.add([series("gpu_temp", (T0, 50), (T0 + S, 51), instance="")])
    assert stats.dropped == {"no_node": 2}
    assert stats.accepted == 0


def test_a_series_without_group_joins_the_group_its_nodes_other_series_name() -> None:
    """Even when it comes first: the node's group is decided per bucket."""
    b = builder()
    stats = b.add(
        [
            series("gpu_temp", (T0, 50), cluster=""),
            series("gpu_temp", (T0, 60), gpu="1"),
        ]
    )
    assert (stats.accepted, stats.dropped) == (2, {})
    assert [(f.group, f.values) for f in b.flush_all()] == [("c1", {"temp": 60})]


def test_series_of_a_node_in_no_group_are_dropped_when_its_bucket_passes() -> None:
    """Held for the bucket (a labelled series may still come), then counted as no_group."""
    b = builder()
    first = b.add([series("gpu_temp", (T0, 50), cluster="")])
    second = b.add([series("gpu_temp", (T0 + 30 * S, 50), cluster="")])
    assert (first.accepted, first.dropped) == (0, {})
    assert (second.accepted, second.dropped) == (0, {"no_group": 1})
    assert b.flush_all() == []


def test_group_label_fallback_order() -> None:
    b = FrameBuilder(FEATURES, group_labels=("job_id", "cluster"))
    b.add(
        [series("gpu_temp", (T0, 50), job_id="job-42"), series("gpu_temp", (T0, 50), instance="n2")]
    )
    assert sorted((f.group, f.node) for f in b.flush_all()) == [("c1", "n2"), ("job-42", "n1")]


# --- series identity across label dicts ---------------------------------------------------------


def test_equal_labels_in_a_new_dict_are_the_same_series() -> None:
    """A decoder whose label cache turned over hands out a new dict: the rate carries on."""
    b = builder()
    labels = {"__name__": "intr_total", "instance": "n1:9100", "cluster": "c1"}
    b.add([Series(labels, [(T0, 100)])])
    b.add([Series(dict(reversed(labels.items())), [(T0 + 30 * S, 400)])])
    assert frames_by_ts(b.flush_all()) == {T0 + 30 * S: {"intr": pytest.approx(10.0)}}


def test_a_series_sent_through_two_dicts_in_one_bucket_counts_once_in_a_sum() -> None:
    b = builder()
    labels = {"__name__": "procs_running", "instance": "n1:9100", "cluster": "c1"}
    b.add([Series(labels, [(T0, 3)]), Series(dict(labels), [(T0 + S, 5)])])
    assert frames_by_ts(b.flush_all()) == {T0: {"procs": 5}}


def test_a_nul_inside_a_label_keeps_two_lookalike_series_apart() -> None:
    """Joined with NULs, {x: "1<NUL>y<NUL>2"} and {x: "1", y: "2"} read alike: two series."""
    b = builder()
    b.add(
        [
            series("procs_running", (T0, 3), x="1\x00y\x002"),
            series("procs_running", (T0, 4), x="1", y="2"),
        ]
    )
    (frame,) = b.flush_all()
    assert frame.values == {"procs": 7}


def test_samples_of_one_node_in_two_buckets_in_one_request_reach_their_frames() -> None:
    """One ``add`` going back and forth between a node's buckets (a late scrape riding along)."""
    b = builder(grace_ms=60_000)
    b.add(
        [
            series("gpu_temp", (T0, 1), gpu="0"),
            series("gpu_temp", (T0 + 30 * S, 2), gpu="1"),
            series("gpu_temp", (T0 + 5 * S, 3), gpu="2"),
        ]
    )
    assert frames_by_ts(b.flush_all()) == {T0: {"temp": 3}, T0 + 30 * S: {"temp": 2}}


def test_a_label_memo_cleared_every_few_series_changes_no_frame() -> None:
    """The per-dict memo is a cache: the frames do not depend on its size."""
    nodes = [f"n{i}:9100" for i in range(3)]
    labels = [
        {"__name__": name, "instance": node, "cluster": "c1", **extra}
        for node in nodes
        for name, extra in (
            ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0"}),
            ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "1"}),
            ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "1"}),
            ("node_intr_total", {}),
            ("node_procs_running", {}),
            (NFS_RTT, {"mountpoint": "/d", "operation": "GETATTR"}),
            (NFS_REQ, {"mountpoint": "/d", "operation": "GETATTR"}),
        )
    ]
    rounds = [
        [Series(lbl, [(T0 + k * 30 * S + i, float(10 * k + i))]) for i, lbl in enumerate(labels)]
        for k in range(4)
    ]

    def frames(memo_size: int) -> list[Frame]:
        b = FrameBuilder(DEFAULT_FEATURES)
        b.label_memo_size = memo_size
        out: list[Frame] = []
        for batch in rounds:
            b.add(batch)
            out += b.close_due_by_watermark()
        return out + b.flush_all()

    reference = frames(1_000_000)
    assert len(reference) == 12  # 3 nodes x 4 buckets
    assert frames(2) == reference


# --- closing buckets -----------------------------------------------------------------------------


def test_bucket_closes_when_the_watermark_passes_its_end() -> None:
    b = builder(grace_ms=15_000)
    b.add([series("gpu_temp", (T0, 50)), series("gpu_temp", (T0 + 44_999, 51), instance="n2")])
    assert b.watermark_ms == T0 + 29_999
    assert not b.bucket_due  # what wakes the ingest's flusher early
    assert b.close_due_by_watermark() == []
    b.add([series("gpu_temp", (T0 + 45_000, 52), instance="n3")])
    assert b.bucket_due
    closed = b.close_due_by_watermark()
    assert [(f.node, f.ts, f.values) for f in closed] == [("n1", T0, {"temp": 50})]
    assert not b.bucket_due
    assert b.close_due_by_watermark() == []


def test_quiet_ingest_closes_buckets_after_idle_time() -> None:
    b = builder()
    now_s = T0 / 1000 + 5
    b.add([series("gpu_temp", (T0, 50))], now_s=now_s)
    assert b.close_due(b.watermark_ms, now_s=now_s + 9.9, idle_s=10.0) == []
    (frame,) = b.close_due(b.watermark_ms, now_s=now_s + 10.0, idle_s=10.0)
    assert frame.values == {"temp": 50}
    assert b.open_frames == 0


def test_late_sample_reopens_a_partial_frame() -> None:
    b = builder()
    b.add(
        [series("gpu_temp", (T0, 50), gpu="0"), series("gpu_temp", (T0 + 60 * S, 1), instance="n2")]
    )
    assert [f.ts for f in b.close_due_by_watermark()] == [T0]
    stats = b.add([series("gpu_temp", (T0 + 10 * S, 90), gpu="1")])
    assert stats.accepted == 1
    (partial,) = b.close_due_by_watermark()
    assert (partial.node, partial.ts, partial.values, partial.gpus) == (
        "n1",
        T0,
        {"temp": 90},
        {"temp": "1"},
    )


def test_sample_beyond_the_late_horizon_is_dropped() -> None:
    """Watermark T0+120 s, horizon 60 s: buckets ending at or before T0+60 s are late."""
    b = builder(grace_ms=0, late_horizon_ms=60_000)
    b.add([series("gpu_temp", (T0 + 120 * S, 1), instance="n2")])
    stats = b.add(
        [
            series("gpu_temp", (T0 + 59 * S, 50)),
            series("gpu_temp", (T0 + 60 * S, 50), instance="n3"),
        ]
    )
    assert stats.dropped == {"late": 1}
    assert stats.accepted == 1


def test_reopened_frame_re_emits_the_complete_sum() -> None:
    """Sum features: the partial emitted after a late series carries every series seen."""
    b = builder()
    b.add(
        [
            series("procs_running", (T0, 3), cpu="a"),
            series("gpu_temp", (T0 + 60 * S, 1), instance="n2"),
        ]
    )
    (first,) = [f for f in b.close_due_by_watermark() if f.node == "n1"]
    b.add([series("procs_running", (T0 + 5 * S, 4), cpu="b")])
    (second,) = b.close_due_by_watermark()
    assert first.values == {"procs": 3}
    assert second.values == {"procs": 7}
    merged, _ = merge_frames(first.values, first.gpus, second.values, second.gpus, FEATURES)
    assert merged == {"procs": 7}
    assert merge_frames(second.values, second.gpus, first.values, first.gpus, FEATURES)[0] == merged


def test_reopened_frame_completes_a_ratio_whose_halves_arrived_apart() -> None:
    b = FrameBuilder(DEFAULT_FEATURES)
    labels = {"mountpoint": "/data", "operation": "GETATTR"}
    b.add(
        [
            series(NFS_RTT, (T0 - 30 * S, 0.0), (T0, 3.0), **labels),
            series(NFS_REQ, (T0 - 30 * S, 0), **labels),
            series("DCGM_FI_DEV_GPU_TEMP", (T0 + 60 * S, 1), instance="n2"),
        ]
    )
    assert b.close_due_by_watermark() == []  # bucket T0 of n1 closed holding only the numerator
    b.add([series(NFS_REQ, (T0 + 1, 600), **labels)])
    (frame,) = [f for f in b.close_due_by_watermark() if f.node == "n1"]
    assert frame.values["nfs_getattr_rtt_s"] == pytest.approx(3.0 / 600, rel=1e-3)


def test_future_samples_do_not_move_the_watermark() -> None:
    b = builder(max_future_ms=60_000)
    now_s = T0 / 1000
    stats = b.add([series("gpu_temp", (T0, 50), (T0 + 3_600 * S, 51))], now_s=now_s)
    assert stats.dropped == {"future": 1}
    assert b.watermark_ms == T0 - 15_000


def test_flush_all_returns_every_open_frame_in_order() -> None:
    b = builder()
    b.add([series("gpu_temp", (T0 + 30 * S, 2), instance="n2"), series("gpu_temp", (T0, 1))])
    b.add([series("gpu_temp", (T0, 3), instance="n0")])
    assert [(f.ts, f.node) for f in b.flush_all()] == [(T0, "n0"), (T0, "n1"), (T0 + 30 * S, "n2")]
    assert b.flush_all() == []


def test_series_state_is_forgotten_after_the_ttl() -> None:
    b = builder(series_ttl_ms=120_000)
    b.add([series("intr_total", (T0, 1), instance=f"old{i}") for i in range(10)])
    for minute in range(10):
        b.add([series("intr_total", (T0 + minute * 60 * S, minute))])
        b.close_due_by_watermark()
    assert b.tracked_series == 1


def test_contributions_kept_for_reopening_expire_at_the_late_horizon() -> None:
    b = builder(grace_ms=0, late_horizon_ms=60_000)
    b.add([series("procs_running", (T0, 3)), series("gpu_temp", (T0 + 30 * S, 1), instance="n2")])
    b.close_due_by_watermark()
    assert b.kept_frames == 1
    b.add([series("gpu_temp", (T0 + 90 * S, 1), instance="n2")])
    b.close_due_by_watermark()
    assert b.kept_frames == 0


def test_constructor_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="bucket_ms"):
        FrameBuilder(FEATURES, bucket_ms=0)
    with pytest.raises(ValueError, match="duplicate"):
        FrameBuilder((TEMP, TEMP))
    with pytest.raises(ValueError, match="node_labels"):
        FrameBuilder(FEATURES, node_labels=())


# --- properties ----------------------------------------------------------------------------------

sample_stream = st.lists(
    st.tuples(
        st.integers(0, 20 * 60 * S),
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(STALE_NAN)),
        st.sampled_from(["gpu_temp", "gpu_util", "intr_total", "procs_running", NFS_RTT, NFS_REQ]),
        st.sampled_from(["0", "1"]),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(sample_stream)
def test_any_sample_stream_gives_only_finite_values_and_accounts_every_sample(
    stream: list[tuple[int, float, str, str]],
) -> None:
    b = FrameBuilder((*FEATURES, *DEFAULT_FEATURES[6:8]), grace_ms=0, late_horizon_ms=120_000)
    frames: list[Frame] = []
    for ts, value, name, gpu in stream:
        s = series(name, (T0 + ts, value), gpu=gpu, operation="GETATTR")
        stats = b.add([s])
        assert stats.accepted + stats.total_dropped == 1
        frames += b.close_due_by_watermark()
    frames += b.flush_all()
    for f in frames:
        assert f.values and all(math.isfinite(v) for v in f.values.values())
        assert set(f.gpus) <= set(f.values)
