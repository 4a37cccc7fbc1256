"""Cardinality guards: new series / nodes / group members / group features past a limit drop,
counted, and
existing ones keep flowing; an oversized request is refused whole (issue 9 part 3)."""

from __future__ import annotations

import logging

import pytest

from detectors.features import FeatureSpec
from streams.ingest.builder import DROP_REASONS, FrameBuilder, frame_builder_for
from streams.ingest.remote_write import (
    RemoteWriteError,
    WriteRequestDecoder,
    encode_write_request,
)
from streams.ingest.series import Series
from streams.settings import Settings
from streams.telemetry.metrics import IngestMetrics

S = 1_000
T0 = 1_700_000_010_000 // 30_000 * 30_000
TEMP = FeatureSpec("temp", ("gpu_temp",), "gauge", reduce="max")
SM = FeatureSpec("sm", ("sm_active",), "gauge", scored=False, per_gpu=True)  # key sm@<gpu>


def temp(node: str, ts: int, gpu: str = "0", group: str = "c1") -> Series:
    labels = {"__name__": "gpu_temp", "instance": f"{node}:9400", "gpu": gpu, "cluster": group}
    return Series(labels, [(ts, 50.0)])


def sm(node: str, ts: int, gpu: str, group: str = "c1") -> Series:
    labels = {"__name__": "sm_active", "instance": f"{node}:9400", "gpu": gpu, "cluster": group}
    return Series(labels, [(ts, 0.5)])


def builder(**limits: int) -> FrameBuilder:
    return FrameBuilder((TEMP,), **limits)  # type: ignore[arg-type]


def test_limit_reasons_are_drop_reasons() -> None:
    assert {"series_limit", "node_limit", "group_limit", "feature_limit"} <= set(DROP_REASONS)


def test_series_past_the_node_limit_drop_and_existing_ones_keep_flowing() -> None:
    b = builder(max_series_per_node=3)
    stats = b.add([temp("n1", T0, gpu=str(g)) for g in range(5)])
    assert stats.accepted == 3
    assert stats.dropped == {"series_limit": 2}
    assert b.tracked_series == 3
    # the admitted series go on; the refused ones stay refused; another node is unaffected
    stats = b.add([temp("n1", T0 + 30 * S, gpu=str(g)) for g in range(5)] + [temp("n2", T0)])
    assert stats.accepted == 4
    assert stats.dropped == {"series_limit": 2}
    gpus = {f.gpus["temp"] for f in b.flush_all() if f.node == "n1"}
    assert gpus == {"0"}  # max over the admitted GPUs 0..2, all 50: the smallest id wins


def test_a_node_s_series_limit_frees_up_when_its_series_expire() -> None:
    b = builder(max_series_per_node=2, series_ttl_ms=60 * S)
    b.add([temp("n1", T0, gpu="0"), temp("n1", T0, gpu="1")])
    assert b.add([temp("n1", T0, gpu="2")]).dropped == {"series_limit": 1}
    # gpu 0 keeps the node alive, gpu 1 stops: past the TTL its place is free
    for minute in range(1, 6):
        b.add([temp("n1", T0 + minute * 60 * S, gpu="0")])
        b.close_due_by_watermark()
    assert b.tracked_nodes == 1
    assert b.add([temp("n1", T0 + 6 * 60 * S, gpu="2")]).accepted == 1


def test_new_nodes_past_the_limit_drop_and_tracked_nodes_stay_at_it() -> None:
    b = builder(max_nodes=3)
    stats = b.add([temp(f"n{i}", T0) for i in range(5)])
    assert stats.accepted == 3
    assert stats.dropped == {"node_limit": 2}
    stats = b.add([temp(f"n{i}", T0 + 30 * S) for i in range(5)])
    assert stats.accepted == 3
    assert stats.dropped == {"node_limit": 2}
    assert b.tracked_nodes == 3
    assert {f.node for f in b.flush_all()} == {"n0", "n1", "n2"}


@pytest.mark.long
def test_a_million_distinct_nodes_keep_tracked_nodes_at_the_limit() -> None:
    """The issue's probe: 1 M distinct node names in four requests (5 GB RSS before)."""
    limit = 10_000
    b = builder(max_nodes=limit, max_nodes_per_group=limit)
    dropped = 0
    for request in range(4):
        batch = [temp(f"h{request}-{i}", T0 + request * S) for i in range(250_000)]
        dropped += b.add(batch).dropped["node_limit"]
        assert b.tracked_nodes == limit
    assert dropped == 1_000_000 - limit
    assert b.tracked_series == limit
    assert len(b._scrapes) == limit  # no state for a refused node
    assert len(b._label_memo) <= limit


def test_nodes_past_the_group_limit_drop_and_members_keep_flowing() -> None:
    b = builder(max_nodes_per_group=2)
    stats = b.add([temp(f"n{i}", T0) for i in range(4)] + [temp("x", T0, group="c2")])
    assert stats.accepted == 3
    assert stats.dropped == {"group_limit": 2}
    assert b.add([temp(f"n{i}", T0 + 30 * S) for i in range(4)]).accepted == 2
    frames = b.flush_all()
    assert {(f.group, f.node) for f in frames} == {("c1", "n0"), ("c1", "n1"), ("c2", "x")}


def test_a_node_leaving_a_full_group_makes_room() -> None:
    b = builder(max_nodes_per_group=1)
    b.add([temp("n0", T0)])
    assert b.add([temp("n1", T0)]).dropped == {"group_limit": 1}
    b.add([temp("n0", T0 + 30 * S, group="c2")])  # another job: n0 moves out of c1 at once
    assert b.add([temp("n1", T0 + 30 * S)]).accepted == 1


def test_a_scheduler_assignment_into_a_full_group_drops_too() -> None:
    b = builder(max_nodes_per_group=1)
    b.add([temp("n0", T0, group="job")])
    b.assign("n1", "job")
    assert b.add([temp("n1", T0, group="")]).dropped == {"group_limit": 1}


def test_per_gpu_keys_past_the_group_s_feature_limit_drop_and_known_keys_keep_flowing() -> None:
    """A gpu label of unbounded values must not widen a group's frames without bound."""
    b = FrameBuilder((TEMP, SM), max_features_per_group=5)
    stats = b.add([temp("n1", T0)] + [sm("n1", T0, str(g)) for g in range(6)])
    assert stats.accepted == 5  # temp, sm@0 .. sm@3
    assert stats.dropped == {"feature_limit": 2}
    # another node of the group: its series of known keys are admitted, a new key is not;
    # another group has room of its own
    stats = b.add(
        [sm("n2", T0, str(g)) for g in range(4)] + [sm("n2", T0, "7"), sm("x", T0, "7", "c2")]
    )
    assert stats.accepted == 5
    assert stats.dropped == {"feature_limit": 1}
    keys = {(f.node, k) for f in b.flush_all() for k in f.values}
    assert keys == {("n1", "temp"), ("x", "sm@7")} | {
        (n, f"sm@{g}") for n in ("n1", "n2") for g in range(4)
    }


def test_a_group_s_feature_key_frees_when_its_last_series_expires() -> None:
    b = FrameBuilder((TEMP, SM), max_features_per_group=2, series_ttl_ms=60 * S)
    b.add([sm("n1", T0, "0"), sm("n1", T0, "1")])
    assert b.add([sm("n1", T0, "2")]).dropped == {"feature_limit": 1}
    # gpu 0 goes on, gpu 1 stops: past the TTL its key is free for gpu 2
    for minute in range(1, 6):
        b.add([sm("n1", T0 + minute * 60 * S, "0")])
        b.close_due_by_watermark()
    assert b.add([sm("n1", T0 + 6 * 60 * S, "2")]).accepted == 1


def test_feature_limit_drops_are_counted_and_logged_like_the_other_guards(
    caplog: pytest.LogCaptureFixture,
) -> None:
    b = FrameBuilder((TEMP, SM), max_features_per_group=1)
    stats = b.add([sm("n1", T0, str(g)) for g in range(3)])
    metrics = IngestMetrics()
    with caplog.at_level(logging.WARNING, logger="peerwatch.ingest"):
        metrics.count_samples(stats.accepted, stats.dropped, now_s=1000.0)
    assert [r.getMessage() for r in caplog.records] == [
        "ingest_cardinality_limit reason=feature_limit dropped_samples=2 since_s=0"
    ]
    value = metrics.registry.get_sample_value
    assert value("peerwatch_ingest_samples_total", {"outcome": "feature_limit"}) == 2


def test_limits_come_from_settings() -> None:
    settings = Settings(
        ingest_max_series_per_node=7,
        ingest_max_nodes=8,
        ingest_max_nodes_per_group=9,
        ingest_max_features_per_group=10,
    )
    b = frame_builder_for(settings)
    limits = (b.max_series_per_node, b.max_nodes, b.max_nodes_per_group, b.max_features_per_group)
    assert limits == (7, 8, 9, 10)
    defaults = Settings()
    assert defaults.ingest_max_series_per_request == 500_000
    assert defaults.ingest_max_series_per_node == 20_000


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_nodes"):
        builder(max_nodes=0)


def test_a_request_above_the_series_limit_is_refused_whole() -> None:
    body = encode_write_request(
        [Series({"__name__": "gpu_temp", "instance": f"n{i}"}, [(T0, 1.0)]) for i in range(11)]
    )
    assert len(WriteRequestDecoder(max_series_per_request=11).decode(body)) == 11
    with pytest.raises(RemoteWriteError, match="11 series, above the limit of 10"):
        WriteRequestDecoder(max_series_per_request=10).decode(body)
    # series the decoder would skip count too: the limit bounds the work, not the output
    with pytest.raises(RemoteWriteError, match="above the limit"):
        WriteRequestDecoder(metric_names={"other"}, max_series_per_request=10).decode(body)


def test_limit_drops_are_counted_and_logged_once_per_reason_per_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = IngestMetrics()
    with caplog.at_level(logging.WARNING, logger="peerwatch.ingest"):
        metrics.count_samples(5, {"series_limit": 2, "late": 1}, now_s=1000.0)
        metrics.count_samples(5, {"series_limit": 3, "node_limit": 1}, now_s=1030.0)
        metrics.count_samples(0, {"series_limit": 4}, now_s=1061.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "ingest_cardinality_limit reason=series_limit dropped_samples=2 since_s=0",
        "ingest_cardinality_limit reason=node_limit dropped_samples=1 since_s=0",
        "ingest_cardinality_limit reason=series_limit dropped_samples=7 since_s=61",
    ]
    value = metrics.registry.get_sample_value
    assert value("peerwatch_ingest_samples_total", {"outcome": "series_limit"}) == 9
    assert value("peerwatch_ingest_samples_total", {"outcome": "accepted"}) == 10
    assert value("peerwatch_ingest_samples_total", {"outcome": "late"}) == 1
