"""detectors.peer: robust peer z — reference values, finiteness, invariances, NaN handling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from detectors.peer import MAD_TO_SIGMA, peer_zscores

BOUND = 1e6  # metric magnitudes well beyond any real feature, yet safe to scale


def matrices(
    max_nodes: int = 30, max_features: int = 5, bound: float = BOUND, nan: bool = True
) -> st.SearchStrategy[np.ndarray]:
    """Nodes x features float matrices, optionally with NaN (missing) cells."""
    finite = st.floats(-bound, bound, allow_nan=False, allow_subnormal=False)
    elements = st.one_of(finite, st.just(np.nan)) if nan else finite
    shapes = st.tuples(st.integers(1, max_nodes), st.integers(1, max_features))
    return hnp.arrays(np.float64, shapes, elements=elements)


def floors(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(n, 1e-3), np.full(n, 0.01)


def test_hand_computed_example() -> None:
    """Median 12, MAD 1, floor max(1, 0) → scale 2.4826; the outlier gets z ≈ 35."""
    m = np.array([[10.0], [11.0], [12.0], [13.0], [100.0]])
    s = peer_zscores(m, abs_floor=np.array([1.0]), rel_floor=np.array([0.0]), min_peers=3)
    scale = MAD_TO_SIGMA * 1.0 + 1.0
    assert s.median.tolist() == [12.0]
    assert s.scale.tolist() == pytest.approx([scale])
    assert s.present.tolist() == [5]
    assert s.z[:, 0] == pytest.approx([-2 / scale, -1 / scale, 0.0, 1 / scale, 88 / scale])


def test_relative_floor_dominates_on_identical_peers() -> None:
    """Identical peers: MAD 0, scale = rel_floor·|median|, so a 10 % drop is z = -10 at 1 %."""
    m = np.array([[100.0]] * 9 + [[90.0]])
    s = peer_zscores(m, abs_floor=np.array([1e-6]), rel_floor=np.array([0.01]), min_peers=8)
    assert s.scale[0] == pytest.approx(1.0)
    assert s.z[-1, 0] == pytest.approx(-10.0)
    assert (s.z[:-1, 0] == 0.0).all()


def test_even_count_median_is_midpoint_and_nan_rows_are_skipped() -> None:
    """Column [1, 2, NaN, 3, 4]: present 4, median 2.5, MAD 1 (|dev| = 1.5, .5, .5, 1.5)."""
    m = np.array([[1.0], [2.0], [np.nan], [3.0], [4.0]])
    s = peer_zscores(m, abs_floor=1e-3, rel_floor=0.0, min_peers=2)
    assert s.present.tolist() == [4]
    assert s.median.tolist() == [2.5]
    assert s.scale[0] == pytest.approx(MAD_TO_SIGMA * 1.0 + 1e-3)
    assert np.isnan(s.z[2, 0])


@settings(max_examples=200, deadline=None)
@given(matrices(), st.integers(1, 10))
def test_median_and_scale_match_numpy_reference(m: np.ndarray, min_peers: int) -> None:
    """median / scale equal np.nanmedian-based reference wherever enough peers are present."""
    a_floor, r_floor = floors(m.shape[1])
    s = peer_zscores(m, a_floor, r_floor, min_peers)
    present = np.isfinite(m).sum(axis=0)
    assert s.present.tolist() == present.tolist()
    for j in range(m.shape[1]):
        col = m[:, j][np.isfinite(m[:, j])]
        if len(col) < min_peers:
            assert np.isnan(s.median[j]) and np.isnan(s.scale[j])
            assert np.isnan(s.z[:, j]).all()
            continue
        med = np.median(col)
        mad = np.median(np.abs(col - med))
        assert s.median[j] == pytest.approx(med, rel=1e-12, abs=1e-12)
        expected_scale = MAD_TO_SIGMA * mad + max(a_floor[j], r_floor[j] * abs(med))
        assert s.scale[j] == pytest.approx(expected_scale, rel=1e-12, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(matrices(bound=1e100, nan=False), st.integers(1, 30))
def test_z_is_finite_for_any_finite_input(m: np.ndarray, min_peers: int) -> None:
    """Finite input, enough peers → every z is finite (the floor keeps scale > 0)."""
    s = peer_zscores(m, *floors(m.shape[1]), min_peers=min_peers)
    if m.shape[0] >= min_peers:
        assert np.isfinite(s.z).all()
        assert (s.scale > 0).all()
    else:
        assert np.isnan(s.z).all()


@settings(max_examples=100, deadline=None)
@given(st.floats(-BOUND, BOUND, allow_nan=False), st.integers(1, 60), st.integers(1, 5))
def test_identical_peers_give_zero_z(value: float, n_nodes: int, n_features: int) -> None:
    """All peers equal (MAD = 0): z is exactly 0, scale is the floor, nothing divides by 0."""
    m = np.full((n_nodes, n_features), value)
    s = peer_zscores(m, *floors(n_features), min_peers=1)
    assert (s.z == 0.0).all()
    assert np.isfinite(s.scale).all() and (s.scale > 0).all()


@settings(max_examples=150, deadline=None)
@given(matrices(), st.randoms(use_true_random=False), st.integers(1, 8))
def test_permuting_nodes_permutes_z(m: np.ndarray, rnd, min_peers: int) -> None:
    """Peer order does not matter: permuting rows permutes z and leaves the stats alone."""
    perm = np.array(rnd.sample(range(m.shape[0]), m.shape[0]))
    a_floor, r_floor = floors(m.shape[1])
    s = peer_zscores(m, a_floor, r_floor, min_peers)
    p = peer_zscores(m[perm], a_floor, r_floor, min_peers)
    np.testing.assert_array_equal(p.z, s.z[perm])
    np.testing.assert_array_equal(p.median, s.median)
    np.testing.assert_array_equal(p.scale, s.scale)


@settings(max_examples=150, deadline=None)
@given(
    matrices(),
    st.floats(1e-3, 1e3),
    st.floats(1e-3, 1e3),
    st.floats(0.0, 0.5),
)
def test_scaling_values_and_absolute_floor_leaves_z_unchanged(
    m: np.ndarray, factor: float, abs_floor: float, rel_floor: float
) -> None:
    """z is unit-free: x → a·x with abs_floor → a·abs_floor (rel_floor unitless) keeps z."""
    n = m.shape[1]
    s = peer_zscores(m, np.full(n, abs_floor), np.full(n, rel_floor), min_peers=1)
    t = peer_zscores(m * factor, np.full(n, abs_floor * factor), np.full(n, rel_floor), 1)
    np.testing.assert_allclose(t.z, s.z, rtol=1e-9, atol=1e-6)
    # the midpoint of two middles may cancel: compare at the data's magnitude
    magnitude = float(np.nanmax(np.abs(m), initial=0.0)) * factor
    np.testing.assert_allclose(t.median, s.median * factor, rtol=1e-12, atol=1e-12 * magnitude)


@settings(max_examples=150, deadline=None)
@given(matrices(), st.floats(-BOUND, BOUND), st.floats(1e-2, 1e3))
def test_shift_leaves_z_unchanged_without_relative_floor(
    m: np.ndarray, shift: float, abs_floor: float
) -> None:
    """With rel_floor = 0 the floor does not depend on the level, so z is shift-invariant."""
    n = m.shape[1]
    s = peer_zscores(m, np.full(n, abs_floor), np.zeros(n), min_peers=1)
    t = peer_zscores(m + shift, np.full(n, abs_floor), np.zeros(n), min_peers=1)
    np.testing.assert_allclose(t.z, s.z, rtol=1e-9, atol=1e-6)


@settings(max_examples=150, deadline=None)
@given(matrices(nan=False), st.data())
def test_missing_value_is_nan_and_does_not_poison_others(m: np.ndarray, data) -> None:
    """A NaN cell gives NaN z (never 0); the others equal z computed without that node."""
    i = data.draw(st.integers(0, m.shape[0] - 1))
    holed = m.copy()
    holed[i, :] = np.nan
    a_floor, r_floor = floors(m.shape[1])
    s = peer_zscores(holed, a_floor, r_floor, min_peers=1)
    assert np.isnan(s.z[i]).all()
    rest = np.delete(m, i, axis=0)
    if rest.shape[0]:
        ref = peer_zscores(rest, a_floor, r_floor, min_peers=1)
        np.testing.assert_array_equal(np.delete(s.z, i, axis=0), ref.z)


def test_infinite_values_count_as_missing() -> None:
    """±inf is no measurement: NaN z for that cell, excluded from the peer statistics."""
    m = np.array([[1.0], [2.0], [3.0], [np.inf], [-np.inf]])
    s = peer_zscores(m, 1e-3, 0.0, min_peers=3)
    assert s.present.tolist() == [3]
    assert s.median.tolist() == [2.0]
    assert np.isnan(s.z[3:, 0]).all() and np.isfinite(s.z[:3, 0]).all()


def test_fewer_than_min_peers_gives_nan_for_every_node() -> None:
    """A column with 7 present values and min_peers 8 has no reference; a full one does."""
    m = np.ones((10, 2))
    m[:3, 0] = np.nan
    s = peer_zscores(m, 1e-3, 0.01, min_peers=8)
    assert np.isnan(s.z[:, 0]).all() and np.isnan(s.median[0]) and np.isnan(s.scale[0])
    assert s.present.tolist() == [7, 10]
    assert (s.z[:, 1] == 0.0).all()


def test_empty_group_gives_empty_z_and_nan_stats() -> None:
    """Zero reporting nodes: z is 0 x F, stats are NaN, present is 0."""
    s = peer_zscores(np.empty((0, 3)), 1e-3, 0.01, min_peers=1)
    assert s.z.shape == (0, 3)
    assert np.isnan(s.median).all() and s.present.tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("matrix", "abs_floor", "rel_floor", "min_peers"),
    [
        (np.ones(5), 1.0, 0.0, 1),  # 1-D matrix
        (np.ones((5, 2)), np.array([1.0, 0.0]), 0.0, 1),  # zero abs floor
        (np.ones((5, 2)), 1.0, -0.1, 1),  # negative rel floor
        (np.ones((5, 2)), np.array([1.0, 1.0, 1.0]), 0.0, 1),  # wrong floor length
        (np.ones((5, 2)), np.nan, 0.0, 1),  # NaN floor
        (np.ones((5, 2)), 1.0, 0.0, 0),  # min_peers < 1
        (np.ones((5, 2)), 1.0, 0.0, 2.5),  # min_peers not an int
    ],
)
def test_rejects_malformed_input(matrix, abs_floor, rel_floor, min_peers) -> None:
    """Malformed shapes, floors or min_peers raise ValueError, never a silent inf."""
    with pytest.raises(ValueError):
        peer_zscores(matrix, abs_floor, rel_floor, min_peers)


@pytest.mark.parametrize(
    ("abs_floor", "rel_floor", "min_peers", "message"),
    [
        (1.0, 0.0, True, r"^min_peers must be an int >= 1, got True$"),
        (np.array([1.0, 0.0]), 0.0, 1, r"^abs_floor must be finite and > 0 in every entry \(keeps"),
        (
            1.0,
            np.array([0.1, np.inf]),
            1,
            r"^rel_floor must be finite and >= 0 in every entry, got",
        ),
    ],
)
def test_bad_floors_and_min_peers_say_so_in_the_rules_wording(
    abs_floor: object, rel_floor: object, min_peers: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        peer_zscores(np.ones((5, 2)), abs_floor, rel_floor, min_peers)  # type: ignore[arg-type]


def test_sixty_by_305_matches_the_reference() -> None:
    """A real group's shape (60 nodes, ~305 features, 5 % missing) gives the formula's z
    everywhere (``python -m bench.peer_zscores`` times it beside np.nanmedian)."""
    rng = np.random.default_rng(7)
    m = rng.normal(size=(60, 305))
    m[rng.random(m.shape) < 0.05] = np.nan
    a_floor, r_floor = floors(305)
    s = peer_zscores(m, a_floor, r_floor, 8)
    med = np.nanmedian(m, axis=0)
    mad = np.nanmedian(np.abs(m - med), axis=0)
    scale = MAD_TO_SIGMA * mad + np.maximum(a_floor, r_floor * np.abs(med))
    np.testing.assert_allclose(s.z, (m - med) / scale, rtol=1e-12, atol=1e-12)
    assert (np.isnan(s.z) == np.isnan(m)).all()
