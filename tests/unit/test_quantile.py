"""detectors.quantile: the P² estimator as JSON state, bit for bit river's stats.Quantile."""

from __future__ import annotations

import base64
import json
import math
import pickle
import struct
from typing import Any

import numpy as np
import pytest
from river import stats

from detectors.multivariate import GroupModel, MultivariateParams
from detectors.quantile import P2Quantile, from_river_state


def _streams() -> list[tuple[float, list[float]]]:
    rng = np.random.default_rng(5)
    cases = []
    for i, q in enumerate((0.999, 0.5, 0.05, 0.01, 0.99, 0.3) * 4):
        n = int(rng.integers(0, 600))
        kind = i % 4
        if kind == 0:
            xs = rng.standard_normal(n)
        elif kind == 1:
            xs = rng.standard_t(3, n)
        elif kind == 2:
            xs = np.round(rng.standard_normal(n), 1)  # ties
        else:
            xs = rng.choice([-0.0, 0.0, 1.0, -1.0], n)  # ties and signed zeros
        cases.append((q, xs.tolist()))
    return cases


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@pytest.mark.parametrize(("q", "xs"), _streams())
def test_every_estimate_is_rivers_bit_for_bit(q: float, xs: list[float]) -> None:
    river, ours = stats.Quantile(q), P2Quantile(q)
    for x in xs:
        river.update(x)
        ours = ours.add(x)
        assert _same(river.get(), ours.get())
    assert ours.count == len(xs)
    if xs:
        assert from_river_state(river._quantile.__getstate__()) == ours


def test_a_batch_is_the_values_one_by_one() -> None:
    xs = np.random.default_rng(1).standard_t(5, 5_000).tolist()
    one_by_one = P2Quantile(0.999)
    for x in xs:
        one_by_one = one_by_one.add(x)
    batched = P2Quantile(0.999)
    for i in range(0, len(xs), 60):
        batched = batched.add_all(xs[i : i + 60])
    assert batched == one_by_one


def test_round_trips_through_json_and_continues_identically() -> None:
    rng = np.random.default_rng(2)
    sketch = P2Quantile(0.999).add_all(rng.standard_normal(3).tolist())  # fewer than five
    for _ in range(2):
        again = P2Quantile.from_dict(json.loads(json.dumps(sketch.to_dict(), allow_nan=False)))
        assert again == sketch
        more = rng.standard_normal(500).tolist()
        sketch, again = sketch.add_all(more), again.add_all(more)
        assert again == sketch


@pytest.mark.parametrize(
    "data",
    [
        {"q": 1.0},
        {"q": 0.5, "positions": [1.0, 2.0]},
        {"q": 0.5, "heights": [1.0] * 6},
        {"q": 0.5, "heights": [1.0, 2.0], "ordered": True},
        {"q": 0.5, "desired": [1.0, 2.0, math.inf, 4.0, 5.0]},
    ],
)
def test_malformed_state_is_a_value_error(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        P2Quantile.from_dict(data)


def test_a_legacy_river_pickle_in_group_model_state_continues_bit_for_bit() -> None:
    """A GroupModel saved when its sketches were pickled river objects restores to the same
    numbers, is written back as JSON, and goes on scoring as river would have."""
    params = MultivariateParams(warmup_buckets=5, calibration_min=100, calibration_window=100_000)
    rng = np.random.default_rng(3)
    model = GroupModel(["a", "b", "c"], params)
    for _ in range(12):
        model.score_and_learn(rng.normal(size=(30, 3)), np.ones(30, dtype=bool))
    state = model.to_dict()
    sketch = P2Quantile.from_dict(state["calibration"][0]["sketch"])
    assert sketch.count > 100
    river = _river_with(sketch)
    legacy = json.loads(json.dumps(state))
    legacy["calibration"][0]["sketch"] = base64.b64encode(pickle.dumps(river, 4)).decode()
    restored = GroupModel.from_dict(legacy, params)
    assert restored.to_dict() == state
    for _ in range(5):
        x = rng.normal(size=(30, 3))
        np.testing.assert_array_equal(
            restored.score_and_learn(x, np.ones(30, dtype=bool)),
            model.score_and_learn(x, np.ones(30, dtype=bool)),
        )


def _river_with(sketch: P2Quantile) -> stats.Quantile:
    """River's Quantile holding ``sketch``'s numbers (written into river's own state bytes)."""
    river = stats.Quantile(sketch.q)
    if not sketch.heights:
        return river
    river.update(0.0)  # marks it updated; the state below replaces the value
    q = sketch.q
    heights = [*sketch.heights, *[0.0] * (5 - len(sketch.heights))]
    numbers = [q, 0.0, q / 2.0, q, (1.0 + q) / 2.0, 1.0, *sketch.desired, *sketch.positions]
    raw = struct.pack("<21dB?", *numbers, *heights, len(sketch.heights), sketch.ordered)
    river._quantile.__setstate__(raw)
    assert river.get() == sketch.get()
    return river


def json_sketches(data: Any) -> Any:
    """``data`` with every legacy pickled river sketch (``"sketch": "<base64>"``) as the
    JSON it is written back as: state saved before the sketch was JSON compares equal."""
    if isinstance(data, dict):
        out = {k: json_sketches(v) for k, v in data.items()}
        if isinstance(out.get("sketch"), str) and "count" in out:
            river = pickle.loads(base64.b64decode(out["sketch"]))  # trusted test data
            out["sketch"] = from_river_state(river._quantile.__getstate__()).to_dict()
        return out
    if isinstance(data, list):
        return [json_sketches(v) for v in data]
    return data


def test_legacy_and_json_sketch_sizes() -> None:
    """The JSON sketch is no larger than the base64 pickle it replaces (empty and full)."""
    full = P2Quantile(0.999).add_all(np.random.default_rng(4).standard_normal(10_000).tolist())
    for sketch in (P2Quantile(0.999), full):
        legacy = base64.b64encode(pickle.dumps(_river_with(sketch), 4)).decode()
        assert len(json.dumps(sketch.to_dict())) <= len(json.dumps(legacy))


def test_a_nan_marker_is_strict_json_and_reads_back_as_nan() -> None:
    """A degenerate bucket feeds the tail sketch a NaN score; the state stays strict JSON."""
    sketch = P2Quantile(0.999).add_all([1.0, math.nan, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert any(math.isnan(h) for h in sketch.heights)
    blob = json.dumps(sketch.to_dict(), allow_nan=False)
    back = P2Quantile.from_dict(json.loads(blob))
    assert [math.isnan(h) for h in back.heights] == [math.isnan(h) for h in sketch.heights]
    assert [h for h in back.heights if not math.isnan(h)] == [
        h for h in sketch.heights if not math.isnan(h)
    ]
