"""detectors.quantile.QuantileSketch: the log-binned sketch against numpy on every prefix."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.quantile import QuantileSketch

QS = (0.0, 0.05, 0.5, 0.95, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(1e-3, 1e9, allow_nan=False), min_size=1, max_size=60))
def test_every_prefix_matches_numpy_lower_quantile_within_relative_accuracy(
    values: list[float],
) -> None:
    sketch = QuantileSketch()
    for n, x in enumerate(values, start=1):
        sketch = sketch.add(x)
        for q in QS:
            expected = float(np.quantile(values[:n], q, method="lower"))
            assert sketch.quantile(q) == pytest.approx(expected, rel=sketch.relative_accuracy)


def test_throughput_like_stream_p50_and_p5() -> None:
    """10,000 buckets of ~1,000 tokens/s with 5 % slow: P50 and P5 within 0.5 %, few bins."""
    rng = np.random.default_rng(0)
    x = 1_000.0 * np.exp(0.01 * rng.standard_normal(10_000))
    x[rng.random(10_000) < 0.05] *= 0.6
    sketch = QuantileSketch()
    for value in x:
        sketch = sketch.add(float(value))
    for q in (0.05, 0.5):
        assert sketch.quantile(q) == pytest.approx(np.quantile(x, q, method="lower"), rel=0.005)
    assert len(sketch.bins) < 200


def test_invalid_values_are_ignored_and_empty_is_nan() -> None:
    sketch = QuantileSketch()
    for bad in (math.nan, math.inf, 0.0, -5.0):
        sketch = sketch.add(bad)
    assert sketch.count == 0 and math.isnan(sketch.quantile(0.5))


def test_lowest_bins_merge_beyond_max_bins() -> None:
    sketch = QuantileSketch(max_bins=4)
    for x in (1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0):
        sketch = sketch.add(x)
    assert len(sketch.bins) == 4 and sketch.count == 6
    assert sketch.quantile(1.0) == 100_000.0 and sketch.quantile(0.0) == 1.0
    assert sketch.quantile(0.8) == pytest.approx(10_000.0, rel=0.005)


def test_round_trips_through_json() -> None:
    sketch = QuantileSketch()
    for x in (3.0, 1.0, 2.0):
        sketch = sketch.add(x)
    again = QuantileSketch.from_dict(json.loads(json.dumps(sketch.to_dict(), allow_nan=False)))
    assert again == sketch


def test_validation() -> None:
    with pytest.raises(ValueError):
        QuantileSketch(relative_accuracy=0.0)
    with pytest.raises(ValueError):
        QuantileSketch(bins=((1, 2),), count=1)
    with pytest.raises(ValueError):
        QuantileSketch.from_dict({"bins": [[2, 1], [1, 1]], "count": 2})
    with pytest.raises(ValueError):
        QuantileSketch().quantile(1.5)
