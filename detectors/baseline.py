"""Learned usual deviation: each node's usual peer z, and how far it is from it today.

Real fleets are not one population. In the source report 48 nodes stage ~48 GB
of checkpoint in /dev/shm and write ~26 GB per save, 12 nodes stage ~9 GB and
write ~2 GB: those 12 are *always* different from their peers in the same way,
and that is normal for them. Peer z (:mod:`detectors.peer`) cannot know it, so
for every node and scored feature this module learns the node's usual z online
and reports the *residual z*::

    residual = (z - usual) / max(spread, spread_floor)

which reads like z ("sigmas"), is ~0 for a node that is different in its usual
way, and is large for a new deviation. It can replace z in
:func:`detectors.fusion.fuse_bucket` (same sign convention, same units).

Estimator, per (regime, node, feature) cell — a robust exponentially weighted
mean and variance:

* The recurrence is river's ``stats.EWMean`` / ``stats.EWVar`` (fading factor
  ``alpha = 1 - 2 ** (-1 / half_life_buckets)``), written as the equivalent
  West/Finch update ``m += a·d; v = (1 - a)·(v + a·d²)`` with ``d = z - m``; the
  tests pin it to river's own classes on every prefix. The weight is
  ``a = max(alpha, 1 / n)`` for the n-th value: a plain running mean until the
  exponential memory is the shorter one. River's EW stats seed with the first
  value and then move at ``alpha`` (1/4155 for a one-day half-life), which would
  leave the first bucket dominating for days.
* Robust to the occasional outlier by bounded influence: the innovation is
  winsorised at ``huber_c`` spreads before it is folded in (a Huber-type
  M-estimator in exponential form), so a one-bucket spike moves the usual by at
  most ``a · huber_c · spread``. At c = 3 a Gaussian loses almost no efficiency.
* A cell whose |residual| exceeds ``freeze_z`` (default: fusion's evidence
  gate) is not learned at all, and the caller's ``learn_mask`` freezes whole
  nodes (e.g. while they alert) or single cells (e.g. features the group-shift
  guard holds): a fault is not learned as normal. So that a genuine, lasting
  change (a re-imaged node, a new job layout) is not an alert forever, a leaky
  counter ``away`` counts buckets beyond ``freeze_z`` (+1 when extreme, -1 when
  not, whether or not learning is allowed) and after ``adopt_after`` of them the
  usual jumps to a fast EWMA of the extreme values (the same "a shift that
  lasts is the new normal" rule as the group-shift guard in
  :mod:`detectors.group`, with a one-day default instead of 20 minutes).
* Until a cell has learned ``warmup_buckets`` values the residual *is* the raw
  z, so a node that is broken on day one is still caught by peer z.
* ``regime`` (optional, an int per bucket) keeps a separate usual per group
  phase. A checkpoint save lasts one or two 30-s buckets every ~1.4-3.3 h
  (< 1 % of buckets), so in a single regime the light-checkpoint nodes' save
  buckets are outliers of their own history, not part of their usual. The
  caller that knows the phase (e.g. regime 1 while the group-shift guard
  reports any shifted feature) can pass it; ``regimes=1`` (default) costs nothing.

Why a robust EW mean/variance rather than a running quantile pair: river's
``stats.Quantile`` (P²) and ``RollingQuantile`` never forget or keep a window
of values per cell (~10 floats or a window per cell instead of 2), and a
quantile has no closed-form vectorised update. Why numpy and not river objects
on the hot path: one river ``EWVar.update`` costs ~0.36 µs from Python, and a
group bucket has 60 x 305 cells x 2 statistics: ~13 ms per group, ~2.8 s per
bucket for 12,500 nodes, against a 1-s budget; the numpy update below does the
same arithmetic for a whole group in well under a millisecond, and 305 pickled
EWMean/EWVar pairs are ~57 KB per node where these arrays are 8.5 KB.

Missing z (NaN, ±inf) gives a NaN residual and leaves the cell untouched.

>>> import numpy as np
>>> params = BaselineParams(half_life_buckets=100, warmup_buckets=3)
>>> state = NodeBaselines()
>>> for _ in range(3):  # node-b is always 2 sigmas below its peers
...     state, r = update_and_residuals(
...         state, ["node-a", "node-b"], np.array([[0.1], [-2.0]]), ["pgpgout_rate"],
...         np.ones(2, dtype=bool), params)
>>> [float(v) for v in r[:, 0]]  # still warming up: the raw z
[0.1, -2.0]
>>> state, r = update_and_residuals(
...     state, ["node-a", "node-b"], np.array([[0.1], [-2.0]]), ["pgpgout_rate"],
...     np.ones(2, dtype=bool), params)
>>> [float(v) for v in r[:, 0]]  # warm: node-b is where it always is
[0.0, 0.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.arrays import BoolArray, FloatArray
from detectors.checks import (
    Checked,
    check_at_least,
    checked,
    int_rule,
    integer,
    is_int,
    real,
    real_rule,
    rule,
)
from detectors.state_codec import JsonState, ndarray

__all__ = ["BaselineParams", "NodeBaselines", "update_and_residuals"]

STATE_SCHEMA = 1
_MAX_COUNT = int(np.iinfo(np.uint16).max)  # counters are stored as uint16
# EWMA weight of the extreme values while a cell is away from its usual: the value adopted
# after ``adopt_after`` buckets reflects the last ~20 buckets (10 min), not one noisy sample.
_CANDIDATE_ALPHA = 0.05
_MAX_HALF_LIFE = 40_000.0  # 1 / alpha must stay below the uint16 count cap (65,535)

CountArray = npt.NDArray[np.uint16]


def _shape(data: Mapping[str, Any], where: str) -> tuple[int, int, int]:
    """regimes x nodes x features of a persisted state."""
    regimes: Any = data.get("regimes")
    nodes, features = data.get("nodes"), data.get("features")
    _REGIMES(f"{where}.regimes", regimes)
    if not (isinstance(nodes, list) and isinstance(features, list)):
        raise ValueError(f"malformed {where}: nodes and features must be lists")
    return (int(regimes), len(nodes), len(features))


_REGIMES = int_rule(maximum=16)
_FLOAT = ndarray("<f8", _shape)
_COUNT = ndarray("<u2", _shape)


@dataclass(frozen=True)
class BaselineParams(Checked):
    """How the usual z of a node is learned; validated on construction.

    ``half_life_buckets``: memory of the usual (2880 = one day of 30-s buckets:
    a fault lasting two hours, were it learned, would move the usual by only
    ~6 % of its size, yet a new job layout is followed within a few days).
    ``warmup_buckets``: values a cell needs before its residual counts (60 =
    30 min; until then the raw z is returned). ``spread_floor``: lower bound of
    the spread, in z units (1.0: a residual is never larger than the change of
    z itself, so a node whose z never moves is not made more suspicious than
    peer z would make it). ``huber_c``: innovations are winsorised at this many
    spreads before they are learned. ``freeze_z``: a cell with |residual| above
    this is not learned (4.0: fusion's evidence gate — what counts as evidence
    is never learned as normal). ``adopt_after``: buckets (net, leaky) beyond
    ``freeze_z`` after which the usual jumps to the new level (<= 65,535).
    ``regimes``: how many separate usuals each cell keeps (see module docstring).
    """

    half_life_buckets: float = real(2880.0, above=0, at_most=_MAX_HALF_LIFE)
    warmup_buckets: int = integer(60, maximum=_MAX_COUNT)
    spread_floor: float = real(1.0, above=0)
    huber_c: float = real(3.0, above=0)
    freeze_z: float = real(4.0, above=0)
    adopt_after: int = integer(2880, maximum=_MAX_COUNT)
    regimes: int = checked(1, _REGIMES)  # the persisted state's regimes obey it too

    def __post_init__(self) -> None:
        super().__post_init__()
        check_at_least(self, "freeze_z", "huber_c")

    @property
    def alpha(self) -> float:
        """Per-bucket fading factor (river's ``fading_factor``) of the half-life."""
        return -math.expm1(-math.log(2.0) / self.half_life_buckets)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _empty_arrays(
    regimes: int, n_nodes: int, n_features: int
) -> tuple[FloatArray, FloatArray, CountArray, CountArray, FloatArray]:
    shape = (regimes, n_nodes, n_features)
    return (
        np.zeros(shape),
        np.zeros(shape),
        np.zeros(shape, dtype=np.uint16),
        np.zeros(shape, dtype=np.uint16),
        np.full(shape, np.nan),
    )


@dataclass(frozen=True, eq=False)
class NodeBaselines(JsonState):
    """Per-node, per-feature learned usual z of one group (treat as immutable).

    Arrays are ``regimes x nodes x features``, nodes sorted (so the state does
    not depend on the order nodes arrive in). ``mean``/``var``: the usual z and
    its variance; ``count``: values learned (capped at 65,535; 0 = never);
    ``away``: leaky count of buckets beyond ``freeze_z``; ``candidate``: EWMA of
    those extreme values (NaN while not away). :func:`update_and_residuals`
    returns a new object and never writes to these arrays.

    ``to_dict`` is JSON-safe: names as lists, each array as base64 of its
    little-endian bytes (no pickle), ~28 bytes per cell and regime before
    base64 (~11 KB of JSON per node and regime for 305 features).
    """

    features: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    mean: FloatArray = field(
        default_factory=lambda: np.zeros((0, 0, 0)), metadata=_FLOAT | rule(real_rule())
    )
    var: FloatArray = field(
        default_factory=lambda: np.zeros((0, 0, 0)),
        metadata=_FLOAT | rule(real_rule(at_least=0)),
    )
    count: CountArray = field(
        default_factory=lambda: np.zeros((0, 0, 0), dtype=np.uint16), metadata=_COUNT
    )
    away: CountArray = field(
        default_factory=lambda: np.zeros((0, 0, 0), dtype=np.uint16), metadata=_COUNT
    )
    candidate: FloatArray = field(
        default_factory=lambda: np.zeros((0, 0, 0)), metadata=_FLOAT | rule(real_rule(nan=True))
    )

    VERSION = ("schema", STATE_SCHEMA)
    KEY_ORDER = (
        "schema",
        "features",
        "nodes",
        "regimes",
        "mean",
        "var",
        "count",
        "away",
        "candidate",
    )

    def __post_init__(self) -> None:
        shape = self.mean.shape
        if len(shape) != 3 or shape[1:] != (len(self.nodes), len(self.features)):
            raise ValueError(
                f"NodeBaselines arrays must be regimes x nodes ({len(self.nodes)}) x "
                f"features ({len(self.features)}), got {shape}"
            )
        for name in ("var", "count", "away", "candidate"):
            if getattr(self, name).shape != shape:
                raise ValueError(f"NodeBaselines.{name} has shape {getattr(self, name).shape}")
        if list(self.nodes) != sorted(set(self.nodes)):
            raise ValueError("NodeBaselines.nodes must be sorted and unique")
        if len(set(self.features)) != len(self.features):
            raise ValueError("NodeBaselines.features must be unique")
        for name in ("mean", "var", "count", "away", "candidate"):
            _frozen(getattr(self, name))

    @property
    def regimes(self) -> int:
        return int(self.mean.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (names excluded)."""
        return sum(
            int(getattr(self, n).nbytes) for n in ("mean", "var", "count", "away", "candidate")
        )

    def warm(self, params: BaselineParams, regime: int = 0) -> BoolArray:
        """Nodes x features: cells whose residual counts (learned >= ``warmup_buckets``)."""
        result: BoolArray = self.count[regime] >= params.warmup_buckets
        return result

    def retain(self, nodes: Sequence[str]) -> NodeBaselines:
        """This state restricted to ``nodes`` (e.g. the group's members after a change).

        Nodes without state are simply absent; they start from nothing when they report.
        """
        keep = set(nodes)
        rows = [i for i, n in enumerate(self.nodes) if n in keep]
        if len(rows) == len(self.nodes):
            return self
        return NodeBaselines(
            features=self.features,
            nodes=tuple(self.nodes[i] for i in rows),
            mean=self.mean[:, rows].copy(),
            var=self.var[:, rows].copy(),
            count=self.count[:, rows].copy(),
            away=self.away[:, rows].copy(),
            candidate=self.candidate[:, rows].copy(),
        )


def _aligned(
    state: NodeBaselines, nodes: Sequence[str], features: tuple[str, ...], regimes: int
) -> NodeBaselines:
    """``state`` with room for ``nodes`` (added, sorted), exactly ``features``, ``regimes``.

    New nodes, features and regimes start empty; features and regimes no longer
    wanted are dropped. The usual case (nothing changes) returns ``state`` itself.
    """
    known = set(state.nodes)
    new_nodes = [n for n in nodes if n not in known]
    if not new_nodes and state.features == features and state.regimes == regimes:
        return state
    all_nodes = tuple(sorted(known.union(new_nodes)))
    arrays = _empty_arrays(regimes, len(all_nodes), len(features))
    old_col = {f: j for j, f in enumerate(state.features)}
    cols = [(j, old_col[f]) for j, f in enumerate(features) if f in old_col]
    if cols and state.nodes and state.regimes:
        row_of = {n: i for i, n in enumerate(all_nodes)}
        rows = np.array([row_of[n] for n in state.nodes])
        r = min(regimes, state.regimes)
        dst = np.array([j for j, _ in cols])
        src = np.array([i for _, i in cols])
        old: tuple[np.ndarray, ...] = (
            state.mean,
            state.var,
            state.count,
            state.away,
            state.candidate,
        )
        new: tuple[np.ndarray, ...] = arrays
        for new_a, old_a in zip(new, old, strict=True):
            new_a[:r, rows[:, None], dst[None, :]] = old_a[:r][:, :, src]
    return NodeBaselines(features, all_nodes, *arrays)


def update_and_residuals(
    baselines: NodeBaselines,
    nodes: Sequence[str],
    z: npt.ArrayLike,
    feature_names: Sequence[str],
    learn_mask: npt.ArrayLike,
    params: BaselineParams,
    regime: int = 0,
) -> tuple[NodeBaselines, FloatArray]:
    """Residual z of one bucket against each node's usual z, then learn the bucket.

    ``z`` is ``len(nodes) x len(feature_names)`` (NaN = missing), usually
    :func:`detectors.peer.peer_zscores`'s ``z``. ``learn_mask`` is one bool per
    node, or one per cell (nodes x features): False freezes learning there
    (e.g. the node is alerting, or the feature is held by the group-shift
    guard). ``regime`` selects which of the ``params.regimes`` usuals this
    bucket is judged and learned in. Returns ``(new_state, residuals)``; the
    residuals are judged against the state *before* this bucket, are the raw z
    where a cell is still warming up, and NaN where z is missing. ``baselines``
    is left untouched; nodes not in ``nodes`` keep their state as it was.
    Raises ``ValueError`` on mismatched shapes, duplicate names or a bad regime.
    """
    names = tuple(feature_names)
    if len(set(names)) != len(names):
        raise ValueError("feature_names must be unique")
    node_list = list(nodes)
    if len(set(node_list)) != len(node_list):
        raise ValueError("nodes must be unique")
    n_nodes, n_feat = len(node_list), len(names)
    zm = np.asarray(z, dtype=np.float64)
    if zm.shape != (n_nodes, n_feat):
        raise ValueError(f"z must be nodes x features = ({n_nodes}, {n_feat}), got {zm.shape}")
    mask = np.asarray(learn_mask, dtype=bool)
    if mask.shape == (n_nodes,):
        mask = mask[:, None]
    elif mask.shape != (n_nodes, n_feat):
        raise ValueError(
            f"learn_mask must have one flag per node ({n_nodes}) or per cell "
            f"({n_nodes}, {n_feat}), got {mask.shape}"
        )
    if not is_int(regime) or not 0 <= regime < params.regimes:
        raise ValueError(f"regime must be an int in [0, {params.regimes}), got {regime!r}")

    state = _aligned(baselines, node_list, names, params.regimes)
    if node_list == list(state.nodes):
        rows: slice | npt.NDArray[np.intp] = slice(None)  # the usual case: every node, in order
    else:
        row_of = {n: i for i, n in enumerate(state.nodes)}
        rows = np.array([row_of[n] for n in node_list], dtype=np.intp)

    m = state.mean[regime, rows]
    v = state.var[regime, rows]
    n = state.count[regime, rows]

    present = np.isfinite(zm)
    all_present = bool(present.all())
    zf = zm if all_present else np.where(present, zm, 0.0)
    spread = np.sqrt(v)
    np.maximum(spread, params.spread_floor, out=spread)
    d = zf - m
    with np.errstate(over="ignore"):  # |z| near 1e308: an inf residual, i.e. "no usable z"
        r_warm = d / spread
    warm = n >= params.warmup_buckets
    residual = np.where(warm, r_warm, zf)
    extreme = np.abs(r_warm) > params.freeze_z
    extreme &= warm
    learn = mask & ~extreme
    if not all_present:
        residual[~present] = np.nan
        extreme &= present
        learn &= present

    # Winsorised innovation; a first value seeds its cell unclipped (a = 1 there).
    limit = params.huber_c * spread
    dc = np.minimum(np.maximum(d, -limit), limit)
    n_min = int(n.min()) if n.size else 0
    if n_min == 0:
        np.copyto(dc, d, where=n == 0)
    # a = max(alpha, 1/n): a scalar once every cell has outlived the running-mean start
    a: float | FloatArray = params.alpha
    if n_min + 1 < 1.0 / params.alpha:
        a = np.maximum(1.0 / (n + 1.0), params.alpha)
    rate = a * learn  # 0 where nothing is learned: the update below is then the identity
    step = rate * dc
    with np.errstate(over="ignore", invalid="ignore"):
        m_new = m + step
        v_new = (1.0 - rate) * (v + step * dc)
    if not np.isfinite(v_new).all():  # overflow from absurd z: such a cell is not learned
        bad = ~(np.isfinite(m_new) & np.isfinite(v_new))
        learn &= ~bad
        m_new[bad], v_new[bad] = m[bad], v[bad]
    inc = learn if n_min < _MAX_COUNT - 1 else learn & (n < _MAX_COUNT)
    n_new = n + inc.astype(np.uint16)

    out_away, out_cand = state.away, state.candidate  # shared (read-only) unless something is away
    away = state.away[regime, rows]
    moving = extreme | (away > 0)
    if moving.any():
        m_new, out_away, out_cand = _step_away(
            state, regime, rows, moving, extreme, present, zf, m_new, params.adopt_after
        )

    out = (
        _with(state.mean, regime, rows, m_new),
        _with(state.var, regime, rows, v_new),
        _with(state.count, regime, rows, n_new),
        out_away,
        out_cand,
    )
    new_state = NodeBaselines(state.features, state.nodes, *out)
    return new_state, residual


def _with(full: Any, regime: int, rows: slice | npt.NDArray[np.intp], part: Any) -> Any:
    """A copy of ``full`` (regimes x nodes x features) with ``part`` written at [regime, rows]."""
    if full.shape[0] == 1 and isinstance(rows, slice):
        return part[None]  # ``part`` is a fresh array: no copy needed
    out = full.copy()
    out[regime, rows] = part
    return out


def _step_away(
    state: NodeBaselines,
    regime: int,
    rows: slice | npt.NDArray[np.intp],
    moving: BoolArray,
    extreme: BoolArray,
    present: BoolArray,
    zf: FloatArray,
    m_new: FloatArray,
    adopt_after: int,
) -> tuple[FloatArray, CountArray, FloatArray]:
    """The leaky ``away`` count, EWMA of extreme values and adoption, on the cells concerned.

    Returns the (possibly adopted) means of this bucket's cells and the new full
    ``away`` and ``candidate`` arrays.
    """
    idx = np.nonzero(moving)
    away = state.away[regime, rows][idx].astype(np.int64)
    cand = state.candidate[regime, rows][idx]
    ext, pres, zv = extreme[idx], present[idx], zf[idx]
    away_new = np.where(ext, away + 1, np.where(pres, np.maximum(away - 1, 0), away))
    away_new = np.minimum(away_new, _MAX_COUNT)
    started = ext & ((away == 0) | np.isnan(cand))
    cand_new = np.where(
        ext,
        np.where(started, zv, cand + _CANDIDATE_ALPHA * (zv - cand)),
        np.where(away_new == 0, np.nan, cand),
    )
    adopt = ext & (away_new >= adopt_after)
    if adopt.any():
        m_new = m_new.copy()
        m_new[idx[0][adopt], idx[1][adopt]] = cand_new[adopt]
        away_new[adopt] = 0
        cand_new[adopt] = np.nan
    away_part = state.away[regime, rows].copy()
    away_part[idx] = away_new
    cand_part = state.candidate[regime, rows].copy()
    cand_part[idx] = cand_new
    return (
        m_new,
        _with(state.away, regime, rows, away_part),
        _with(state.candidate, regime, rows, cand_part),
    )
