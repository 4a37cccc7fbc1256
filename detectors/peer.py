"""Peer robust z: how far each node is from its peers, feature by feature.

For every feature (column) of a nodes x features matrix::

    z = (x - median) / (1.4826 * MAD + max(abs_floor, rel_floor * |median|))

The median and the MAD are taken over the nodes that have a value for the
feature (NaN = missing). 1.4826 · MAD estimates the standard deviation of a
normal population, so |z| reads as "sigmas from the peers", yet one or two
broken nodes cannot move the reference. The floor is *added* to the spread so
that z stays finite when every peer reports the same number (``procs_running``
on an idle group, a GPU util pinned at 100 %) and so that rounding noise on a
tight group does not become a large z.

A missing value gives a NaN z, never 0: "we do not know" must not read as
"exactly like the peers". A feature with fewer than ``min_peers`` present
values has no usable reference, so its median, scale and z are all NaN.

The medians come from one sort per pass (NaN sorts last) and a gather at the
middle index of each column's present values, which is what ``np.nanmedian``
computes but without its per-column Python fallback or its all-NaN warnings;
the tests check it against ``np.nanmedian``.

>>> import numpy as np
>>> m = np.array([[10.0], [11.0], [12.0], [13.0], [100.0]])
>>> s = peer_zscores(m, abs_floor=np.array([1.0]), rel_floor=np.array([0.0]), min_peers=3)
>>> s.median.tolist(), s.present.tolist()
([12.0], [5])
>>> [round(float(v), 3) for v in s.z[:, 0]]  # scale = 1.4826 * MAD(=1) + floor(=1)
[-0.806, -0.403, 0.0, 0.403, 35.447]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from detectors.arrays import FloatArray, IntArray
from detectors.checks import int_rule, real_rule

__all__ = ["MAD_TO_SIGMA", "PeerStats", "peer_zscores"]


MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): MAD of a normal population → its sigma


@dataclass(frozen=True, eq=False)
class PeerStats:
    """Peer statistics of one bucket.

    ``z`` is nodes x features; ``median``, ``scale`` (the denominator of z,
    floor included) and ``present`` (how many nodes had a value) are per
    feature. Where ``present < min_peers``, median, scale and the whole z
    column are NaN. Arrays are not copied: treat them as read-only.
    """

    z: FloatArray
    median: FloatArray
    scale: FloatArray
    present: IntArray


_MIN_PEERS = int_rule()
_ABS_FLOOR = real_rule(above=0, why="keeps z finite")  # per feature: each entry
_REL_FLOOR = real_rule(at_least=0)


def peer_zscores(
    matrix: npt.ArrayLike,
    abs_floor: npt.ArrayLike,
    rel_floor: npt.ArrayLike,
    min_peers: int,
) -> PeerStats:
    """Robust z of every node against the peers in ``matrix`` (nodes x features).

    ``abs_floor`` (> 0) and ``rel_floor`` (>= 0) are per feature (a scalar is
    broadcast). Non-finite inputs (NaN, ±inf) count as missing. Raises
    ``ValueError`` on a malformed matrix, floors or ``min_peers``.
    """
    x = np.asarray(matrix, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"matrix must be 2-D (nodes x features), got shape {x.shape}")
    _MIN_PEERS("min_peers", min_peers)
    n_features = x.shape[1]
    a_floor = _per_feature(abs_floor, n_features, "abs_floor")
    r_floor = _per_feature(rel_floor, n_features, "rel_floor")
    _ABS_FLOOR("abs_floor", a_floor)
    _REL_FLOOR("rel_floor", r_floor)

    finite = np.isfinite(x)
    if not finite.all():
        x = np.where(finite, x, np.nan)
    present = finite.sum(axis=0, dtype=np.int64)

    # Overflow only happens for |x| near 1e308, far outside any metric's range;
    # it then yields ±inf, which callers treat as "no usable z".
    with np.errstate(over="ignore", invalid="ignore"):
        median = _column_median(x, present)
        mad = _column_median(np.abs(x - median), present)
        scale = MAD_TO_SIGMA * mad + np.maximum(a_floor, r_floor * np.abs(median))
        enough = present >= min_peers
        median = np.where(enough, median, np.nan)
        scale = np.where(enough, scale, np.nan)
        z = (x - median) / scale
    return PeerStats(z=z, median=median, scale=scale, present=present)


def _per_feature(value: npt.ArrayLike, n_features: int, name: str) -> FloatArray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a scalar or 1-D, got shape {arr.shape}")
    try:
        return np.broadcast_to(arr, (n_features,))
    except ValueError:
        raise ValueError(f"{name} has {arr.size} values for {n_features} features") from None


def _column_median(x: FloatArray, present: IntArray) -> FloatArray:
    """Median of each column over its non-NaN entries (NaN where a column is empty)."""
    n_rows, n_cols = x.shape
    if n_rows == 0:
        return np.full(n_cols, np.nan)
    ordered = np.sort(x, axis=0)  # NaN sorts last, so present values fill rows [0, present)
    lo = np.clip((present - 1) // 2, 0, n_rows - 1)
    hi = np.clip(present // 2, 0, n_rows - 1)
    cols = np.arange(n_cols)
    low, high = ordered[lo, cols], ordered[hi, cols]
    # 0.5·a + 0.5·b equals (a + b) / 2 without overflowing near the float limit; equal
    # halves are taken as they are, so identical peers give their exact value (even subnormal).
    median: FloatArray = np.where(low == high, low, 0.5 * low + 0.5 * high)
    median[present == 0] = np.nan
    return median
