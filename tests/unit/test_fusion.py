"""detectors.fusion: directional evidence, top-k score, collapse, cluster-wide guard, signals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from detectors.features import FeatureSpec
from detectors.fusion import (
    SILENCE_FEATURE,
    FusionParams,
    GroupEvent,
    Signal,
    fuse_bucket,
)

PARAMS = FusionParams()  # z_evidence 4, z_clip 10, top_k 3, threshold 8, cluster 0.3, 5 signals
N = 60


def spec(name: str, direction: str = "both", **kw) -> FeatureSpec:
    return FeatureSpec(name, (f"m_{name}",), "gauge", direction=direction, **kw)  # type: ignore[arg-type]


def fuse(
    features,
    z,
    values=None,
    median=None,
    *,
    silent=(),
    gpus=None,
    params=PARAMS,
    held=None,
):
    z = np.asarray(z, dtype=float)
    nodes = [f"node-{i:02d}" for i in range(z.shape[0])]
    values = np.zeros_like(z) if values is None else np.asarray(values, dtype=float)
    median = np.zeros(z.shape[1]) if median is None else np.asarray(median, dtype=float)
    return fuse_bucket(
        nodes=nodes,
        values=values,
        z=z,
        median=median,
        features=features,
        gpus=gpus or {},
        silent=list(silent),
        params=params,
        held=held,
    )


def one_node_z(n_features: int, row: dict[int, float], node: int = 0) -> np.ndarray:
    """A 60 x F z-matrix of zeros except the given cells of one node."""
    z = np.zeros((N, n_features))
    for j, value in row.items():
        z[node, j] = value
    return z


@pytest.mark.parametrize(
    ("direction", "z", "score"),
    [
        ("up", 9.0, 9.0),
        ("up", -9.0, 0.0),
        ("down", -9.0, 9.0),
        ("down", 9.0, 0.0),
        ("both", 9.0, 9.0),
        ("both", -9.0, 9.0),
    ],
)
def test_directional_evidence_counts_only_the_bad_way(direction, z, score) -> None:
    """up counts z > 0, down counts z < 0, both counts |z|."""
    v = fuse([spec("f", direction)], one_node_z(1, {0: z})).verdicts["node-00"]
    assert v.score == score


def test_unscored_features_are_ignored() -> None:
    """A feature with scored=False never contributes, however far off it is."""
    features = [spec("xid", scored=False), spec("ok")]
    v = fuse(features, one_node_z(2, {0: 50.0})).verdicts["node-00"]
    assert v.score == 0.0 and v.signals == () and not v.deviating


@pytest.mark.parametrize(
    ("zs", "score"),
    [
        ([3.9], 0.0),  # below the evidence gate
        ([4.0], 4.0),  # at the gate
        ([50.0], 10.0),  # clipped at z_clip
        ([3.0, 3.0, 3.0, 3.0, 3.0], 0.0),  # many mild deviations never add up
        ([5.0, 4.0], 9.0),  # corroboration: two moderate precursors reach the threshold
        ([9.0, 8.0, 7.0, 6.0, 5.0], 24.0),  # only the top 3 count
        ([50.0, 50.0, 50.0, 50.0], 30.0),  # bounded by top_k x z_clip
    ],
)
def test_score_is_sum_of_top_k_gated_clipped_evidence(zs, score) -> None:
    """score = Σ top-3 of min(d, 10) over features with d >= 4."""
    features = [spec(f"f{j}") for j in range(len(zs))]
    v = fuse(features, one_node_z(len(zs), dict(enumerate(zs)))).verdicts["node-00"]
    assert v.score == pytest.approx(score)
    assert v.deviating == (score >= PARAMS.score_threshold)


@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 20), st.integers(1, 8)),
        elements=st.one_of(st.floats(-1e6, 1e6), st.just(np.nan)),
    )
)
def test_score_is_finite_and_bounded_on_any_input(z: np.ndarray) -> None:
    """Any z (NaN included) gives 0 <= score <= top_k x z_clip per node."""
    features = [spec(f"f{j}", ("up", "down", "both")[j % 3]) for j in range(z.shape[1])]
    fused = fuse(features, z)
    for v in fused.verdicts.values():
        assert 0.0 <= v.score <= PARAMS.top_k * PARAMS.z_clip
        assert len(v.signals) <= PARAMS.max_signals


def test_missing_z_gives_no_evidence_and_marks_node_unscored() -> None:
    """A node whose every z is NaN is 'unscored' (unknown), not 'ok' with score 0."""
    z = np.zeros((N, 2))
    z[3, :] = np.nan
    v = fuse([spec("a"), spec("b")], z).verdicts["node-03"]
    assert not v.scored and v.status == "unscored" and v.score == 0.0


INTR = spec(
    "intr_rate",
    "down",
    abs_floor=2_000.0,
    rel_floor=0.02,
    collapse_ratio=0.5,
    collapse_min_median=20_000.0,
)
PROCS = spec(
    "procs_running",
    "down",
    abs_floor=1.0,
    rel_floor=0.05,
    collapse_ratio=0.2,
    collapse_min_median=3.0,
)


@pytest.mark.parametrize(
    ("value", "median", "collapsed"),
    [
        (80_000.0, 300_000.0, True),  # NVLink/bus XID: interrupts fall to ~1/4
        (160_000.0, 300_000.0, False),  # above half of the median
        (5_000.0, 15_000.0, False),  # idle group: median below collapse_min_median
        (np.nan, 300_000.0, False),  # missing is not a collapse (never 0)
    ],
)
def test_collapse_signature(value, median, collapsed) -> None:
    """value < collapse_ratio x median while median >= collapse_min_median is a hard signature."""
    z = np.zeros((N, 1))
    z[0, 0] = -20.0 if not np.isnan(value) else np.nan
    values = np.full((N, 1), median)
    values[0, 0] = value
    v = fuse([INTR], z, values, [median]).verdicts["node-00"]
    assert (v.collapsed == ("intr_rate",)) == collapsed
    assert (v.status == "collapse") == collapsed


def test_collapsed_feature_is_not_also_soft_evidence() -> None:
    """procs_running → 0 is a collapse, and its huge z is not counted again in the soft score."""
    z = np.zeros((N, 2))
    z[0] = [-20.0, -6.0]
    values = np.array([[0.0, 80.0]] + [[40.0, 100.0]] * (N - 1))
    features = [PROCS, spec("gpu_util", "down")]
    v = fuse(features, z, values, [40.0, 100.0]).verdicts["node-00"]
    assert v.collapsed == ("procs_running",)
    assert v.score == 6.0 and not v.deviating
    assert [s.feature for s in v.signals] == ["procs_running", "gpu_util"]
    assert "procs_running 0 < 0.2 * peer median 40" in v.reason
    assert v.collapse_strength == 20.0


def test_collapse_needs_a_peer_reference() -> None:
    """With no usable z (too few peers) nothing collapses, and the node is not collapse-checked."""
    z = np.full((N, 1), np.nan)
    values = np.full((N, 1), 300_000.0)
    values[0, 0] = 0.0
    v = fuse([INTR], z, values, [np.nan]).verdicts["node-00"]
    assert v.collapsed == () and not v.collapse_checked


@pytest.mark.parametrize(
    ("n_deviating", "group_event"),
    [(1, False), (10, False), (18, False), (19, True), (30, True)],
)
def test_cluster_guard_turns_shared_deviation_into_a_group_event(n_deviating, group_event) -> None:
    """Over 30 % of present nodes deviating the same bad way: a group event, not node evidence."""
    z = np.zeros((N, 1))
    z[:n_deviating, 0] = -9.0
    fused = fuse([spec("gpu_util", "down")], z)
    assert bool(fused.group_events) == group_event
    dev = fused.verdicts["node-00"]
    assert dev.score == (0.0 if group_event else 9.0)
    if group_event:
        (event,) = fused.group_events
        assert (event.feature, event.direction, event.count, event.present) == (
            "gpu_util",
            "down",
            n_deviating,
            N,
        )
        assert dev.signals == ()


def test_cluster_guard_ignores_the_harmless_direction() -> None:
    """30 nodes with gpu_util *up* is neither a group event nor node evidence for a down feature."""
    z = np.zeros((N, 1))
    z[:30, 0] = 9.0
    fused = fuse([spec("gpu_util", "down")], z)
    assert fused.group_events == ()
    assert all(v.score == 0.0 for v in fused.verdicts.values())


def test_cluster_guard_is_per_feature_and_per_direction() -> None:
    """A group event on one feature leaves another feature's node evidence intact."""
    z = np.zeros((N, 2))
    z[:25, 0] = -9.0  # shared dip (checkpoint)
    z[0, 1] = 9.0  # node-00's own NFS latency
    fused = fuse([spec("gpu_util", "down"), spec("nfs_rtt", "up")], z)
    assert [(e.feature, e.direction) for e in fused.group_events] == [("gpu_util", "down")]
    v = fused.verdicts["node-00"]
    assert v.score == 9.0 and [s.feature for s in v.signals] == ["nfs_rtt"]


def test_group_down_event_also_suppresses_collapse() -> None:
    """If 25 of 60 nodes 'collapse' together it is a group event, not 25 hard node alerts."""
    z = np.zeros((N, 1))
    z[:25, 0] = -20.0
    values = np.full((N, 1), 300_000.0)
    values[:25, 0] = 80_000.0
    fused = fuse([INTR], z, values, [300_000.0])
    assert all(v.collapsed == () for v in fused.verdicts.values())
    assert fused.group_events[0].feature == "intr_rate"


def test_held_feature_gives_no_evidence_collapse_or_group_event() -> None:
    """A held feature (the group shifted on it) is judged for nobody; the others still are."""
    z = np.zeros((N, 3))
    z[0, 0] = -20.0  # node-00's interrupts far below the (moved) median
    z[:25, 1] = -9.0  # a shared dip on a held feature: no group event either
    z[1, 2] = 9.0  # node-01's own NFS latency, not held
    values = np.full((N, 3), 300_000.0)
    values[0, 0] = 10_000.0
    features = [INTR, spec("gpu_util", "down"), spec("nfs_rtt", "up")]
    fused = fuse(features, z, values, [300_000.0, 0.0, 0.0], held=[True, True, False])
    v0, v1 = fused.verdicts["node-00"], fused.verdicts["node-01"]
    assert v0.collapsed == () and not v0.collapse_checked and v0.score == 0.0
    assert v0.scored and v0.status == "ok"  # still judged on nfs_rtt
    assert v1.score == 9.0 and [s.feature for s in v1.signals] == ["nfs_rtt"]
    assert fused.group_events == ()


def test_node_with_only_held_features_is_unscored_and_says_why() -> None:
    """Every comparable feature held: unscored (unknown, not clear), and the reason says so."""
    fused = fuse([spec("a"), spec("b")], np.zeros((N, 2)), held=[True, True])
    v = fused.verdicts["node-00"]
    assert v.status == "unscored" and not v.scored
    assert v.reason == "every comparable feature is held: the group moved as a whole"
    assert not fused.any_reference


def test_held_needs_one_flag_per_feature() -> None:
    with pytest.raises(ValueError, match="held"):
        fuse([spec("a"), spec("b")], np.zeros((N, 2)), held=[True])


@pytest.mark.parametrize(
    ("n_silent", "n_expected", "group_event"),
    [(1, 60, False), (18, 60, False), (19, 60, True), (1, 2, False), (2, 3, True)],
)
def test_silence_of_many_nodes_is_one_group_event(n_silent, n_expected, group_event) -> None:
    """One silent node is that node's; more than 30 % silent at once (>= 2) is the group's."""
    n_rep = n_expected - n_silent
    z = np.zeros((n_rep, 1))
    silent = [f"gone-{i}" for i in range(n_silent)]
    fused = fuse([spec("a")], z, silent=silent)
    assert fused.silence_is_group == group_event
    assert all(fused.verdicts[s].silent for s in silent)
    if group_event:
        event = fused.group_events[0]
        assert (event.feature, event.direction, event.count, event.present) == (
            SILENCE_FEATURE,
            "missing",
            n_silent,
            n_expected,
        )
    else:
        assert fused.group_events == ()


def test_signals_are_top_five_by_abs_z_with_value_median_and_gpu() -> None:
    """Signals list contributors sorted by |z| desc, at most 5, each naming its GPU."""
    zs = {0: 5.0, 1: -12.0, 2: 7.0, 3: 4.5, 4: 30.0, 5: 6.0, 6: 2.0}
    features = [spec(f"f{j}") for j in range(7)]
    values = np.arange(7, dtype=float)[None, :].repeat(N, axis=0)
    gpus = {"node-00": {"f4": "6", "f1": "2"}}
    v = fuse(features, one_node_z(7, zs), values, np.full(7, 100.0), gpus=gpus).verdicts["node-00"]
    assert [s.feature for s in v.signals] == ["f4", "f1", "f2", "f5", "f0"]
    top = v.signals[0]
    assert (top.z, top.value, top.median, top.gpu) == (30.0, 4.0, 100.0, "6")
    assert v.signals[1].gpu == "2" and v.signals[2].gpu is None
    assert v.score == pytest.approx(10.0 + 10.0 + 7.0)
    assert v.reason.startswith("score 27.0 >= 8: f4 z=+30.0, f1 z=-12.0")


def test_silent_node_verdict() -> None:
    """A silent node gets a verdict: silent, unscored, no signals."""
    v = fuse([spec("a")], np.zeros((N - 1, 1)), silent=["node-x"]).verdicts["node-x"]
    assert v.status == "silent" and not v.scored and v.signals == ()


def test_node_both_reporting_and_silent_is_rejected() -> None:
    with pytest.raises(ValueError, match="both reporting and silent"):
        fuse([spec("a")], np.zeros((3, 1)), silent=["node-01"])


@pytest.mark.parametrize(
    ("z_shape", "median_shape"), [((N, 2), (1,)), ((N, 1), (1,)), ((N, 3), (3,))]
)
def test_shape_mismatch_is_rejected(z_shape, median_shape) -> None:
    """values/z must be nodes x features and median one per feature."""
    features = [spec("a"), spec("b")]
    with pytest.raises(ValueError):
        fuse_bucket(
            nodes=[f"n{i}" for i in range(N)],
            values=np.zeros(z_shape),
            z=np.zeros(z_shape),
            median=np.zeros(median_shape),
            features=features,
            gpus={},
            silent=[],
            params=PARAMS,
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"z_evidence": 0.0},
        {"z_evidence": math.inf},
        {"z_clip": 3.0},  # below z_evidence
        {"top_k": 0},
        {"score_threshold": 0.0},
        {"score_threshold": 31.0},  # unreachable: > top_k x z_clip
        {"cluster_fraction": 0.0},
        {"cluster_fraction": 1.0},
        {"max_signals": 0},
    ],
)
def test_fusion_params_are_validated(kwargs) -> None:
    with pytest.raises(ValueError):
        FusionParams(**kwargs)


def test_signal_round_trips_through_json_with_nan_as_null() -> None:
    """Signal.to_dict is strict-JSON safe (NaN → null) and from_dict restores it."""
    s = Signal("frames", math.nan, 3.0, 60.0, None)
    text = json.dumps(s.to_dict(), allow_nan=False)
    back = Signal.from_dict(json.loads(text))
    assert math.isnan(back.z) and (back.feature, back.value, back.median, back.gpu) == (
        "frames",
        3.0,
        60.0,
        None,
    )
    s2 = Signal("gpu_util", -9.5, 40.0, 99.0, "3")
    assert Signal.from_dict(json.loads(json.dumps(s2.to_dict()))) == s2


def test_group_event_describes_itself_and_is_json_safe() -> None:
    e = GroupEvent("gpu_util", "down", 25, 60, -9.0, 50.0, 99.0)
    assert e.fraction == pytest.approx(25 / 60)
    assert e.describe() == "gpu_util down on 25/60 nodes (42%): 50 vs group median 99 (z -9.0)"
    json.dumps(e.to_dict(), allow_nan=False)
    silence = GroupEvent(SILENCE_FEATURE, "missing", 60, 60, math.nan, math.nan, math.nan)
    assert silence.describe() == "60/60 nodes (100%) sent no frame"
    json.dumps(silence.to_dict(), allow_nan=False)
