"""streams.lab.evaluation.plot: the score matrix grid and the heatmap PNG."""

from __future__ import annotations

import math

import numpy as np
import pytest

from detectors.alerts import NODE_COLLAPSE
from detectors.episodes import AlertEvent
from streams.lab.evaluation.plot import _max_pool, plot_score_heatmap, score_matrix
from streams.lab.simulator.faults import CHECKPOINT_SAVE, GroundTruth

B = 30_000
T0 = 1_700_000_010_000 - 1_700_000_010_000 % B


def test_score_matrix_fills_a_regular_grid_with_nan_gaps():
    triples = [(T0, "b", 1.0), (T0 + 3 * B + 5, "a", 2.0), (T0, "a", 0.5), (T0, "zz", 9.0)]
    nodes, ts, m = score_matrix(triples, bucket_ms=B, nodes=["a", "b"])
    assert nodes == ["a", "b"]
    assert ts.tolist() == [T0, T0 + B, T0 + 2 * B, T0 + 3 * B]
    assert m[0, 0] == 0.5 and m[0, 3] == 2.0 and m[1, 0] == 1.0
    assert math.isnan(m[1, 3]) and np.isnan(m[:, 1:3]).all()


def test_max_pool_keeps_a_one_bucket_spike():
    m = np.zeros((2, 10))
    m[1, 7] = 9.0
    m[0, :] = np.nan
    pooled = _max_pool(m, 4)
    assert pooled.shape == (2, 3)
    assert pooled[1].tolist() == [0.0, 9.0, 0.0] and np.isnan(pooled[0]).all()


def test_heatmap_png_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    nodes = [f"n{i:02d}" for i in range(8)]
    rng = np.random.default_rng(3)
    scores = rng.uniform(0, 4, size=(8, 240))
    scores[2, 100:] = np.nan  # the failed node goes silent
    scores[2, 95:100] = 25.0
    truth = [
        GroundTruth("nvlink_bus_fault", "n02", 1, T0 + 95 * B, 145, T0 + 99 * B),
        GroundTruth(CHECKPOINT_SAVE, None, None, T0 + 40 * B, end_ms=T0 + 41 * B),
    ]
    alerts = [AlertEvent(NODE_COLLAPSE, "n02", "firing", T0 + 98 * B)]
    ts = T0 + B * np.arange(240)
    out = plot_score_heatmap(
        tmp_path / "heat.png", nodes, ts, scores, truth, alerts, bucket_ms=B, max_columns=100
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("ts", "scores", "match"),
    [
        ([T0, T0 + B], np.zeros((2, 3)), "scores must be"),
        ([T0, T0 + 2 * B], np.zeros((2, 2)), "evenly"),
    ],
)
def test_heatmap_input_is_validated(tmp_path, ts, scores, match):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match=match):
        plot_score_heatmap(tmp_path / "x.png", ["a", "b"], ts, scores, bucket_ms=B)
