"""Online multivariate model of a group's residual vectors: unusual combinations.

Fusion (:mod:`detectors.fusion`) judges features one at a time behind a gate
(|z| >= 4); a node whose fault is several moderate deviations at once, or a
pair of features that always move together suddenly moving apart, shows no
single feature past the gate. This model learns what a healthy node's residual
vector (:mod:`detectors.baseline`) looks like — its mean and covariance,
pooled over all nodes of the group — and scores each node by how improbable
its whole vector is: the Mahalanobis distance

    d² = (x - μ)ᵀ Σ⁻¹ (x - μ)

turned into a calibrated score in [0, 1] (one minus a tail probability).

Model, per group (one model learning from all its nodes: 60 x the data of a
per-node model at 1/60 of the state, and a fault on one node barely moves it):

* μ and Σ follow river's ``covariance.EwaCovariance`` recurrence (an
  exponentially weighted mean and second-moment matrix, Σ = E[xxᵀ] - μμᵀ; the
  tests pin it to river's class), batched: one bucket's rows enter as their
  average, with weight ``max(beta, 1/k)`` for the k-th learning bucket (a running
  mean until the exponential memory is the shorter; ``beta`` from
  ``half_life_buckets``). River's own ``update_many`` loops over rows in Python
  (~26 ms per 60 x 305 bucket, and it wants a dataframe); the batched form is
  one matrix product.
* Residuals are clipped at ±``clip`` (one wild feature — fusion's business —
  cannot dominate the model) and missing cells are imputed at μ.
* Σ is shrunk towards its diagonal by ``F / (F + n_eff)`` (it is singular
  while fewer rows than features have been seen) and its diagonal is floored
  at ``var_floor`` (a feature that is always exactly 0 — identical peers —
  must not make a 0.1 blip infinitely unusual).
* Score: under the model d² is a weighted sum of χ²(1) terms, the weights
  being each present feature's variance over its floored variance; it is
  matched to c·χ²(ν) (Satterthwaite) and turned into a standard-normal score
  u by the Wilson-Hilferty transform. Real residuals have heavier tails than
  a Gaussian (with Student-t(5) residuals the textbook χ² threshold flags
  1.5 % of healthy node-buckets instead of 0.01 %), so the threshold is
  calibrated on data: a P² estimator (:mod:`detectors.quantile`, river's
  ``stats.Quantile`` arithmetic as JSON state) tracks the 99.9th
  percentile of u over healthy node-buckets, its ratio to the normal one
  (3.09) gives a tail scale σ >= 1, and the score is Φ(u / σ). In an offline
  check with Gaussian, t(8), t(5) and t(3) residuals at 10 and 305 features
  that kept the healthy flag rate <= ~3e-4; the tests measure ~1e-4 for
  Gaussian and t(5) residuals through the model itself. Two sketches alternate (the older is
  complete, the newer is filling; each covers ``calibration_window``
  node-buckets) so the calibration forgets; the larger estimate wins.
  ``is_anomalous`` flags score >= 1 - ``alpha``. No score (NaN) until the
  model is warm and a sketch holds ``calibration_min`` node-buckets.
* Rows learned: the caller's ``learn_mask`` (e.g. not alerting) and not
  anomalous this bucket, so a fault is not learned as normal; scores are
  computed before the bucket is learned.

Why not ``river.anomaly.HalfSpaceTrees`` (the design's example): on this
module's own test scenario (60 nodes, 10 pairwise-correlated features, 5 of
them at 2.5-3.0 sigma on one node), HST with 25 trees of height 8 and a
1,000-row window, given an oracle threshold at its healthy scores' 99.9th
(99.99th) percentile, catches the node in 71 % (26 %) of buckets; this model,
at its own calibrated threshold with ~1e-4 healthy flags, in 92 %. HST also
costs ~8 ms per 60-node bucket in pure Python (this model ~0.1 ms), has no
calibrated threshold (its score is a mass ratio) and cannot say which
features drove a score, where :meth:`GroupModel.explain` splits d² over
features exactly. Residuals are standardised and roughly Gaussian in their
core, which is what the Mahalanobis distance is the natural test for.

Cost: O(F²) state (F = features fed), learning one F x F matrix product per
learning bucket plus one inverse, scoring one nodes x F x F product.
``learn_every`` amortises the inverse for large F (learn from every k-th
bucket); ``phase`` staggers groups so they do not all invert in the same bucket.

Serialisation: :meth:`GroupModel.to_dict` is JSON-safe, by the state codec
(:class:`ModelState`): μ and the upper triangle of E[xxᵀ] as base64 float64,
the quantile sketches as their numbers. No pickle is written; a state saved
when the sketches were river's pickled objects is read once through an
unpickler that admits only river's two quantile classes (as inert stand-ins:
no river code runs) and continues with the same numbers.
"""

from __future__ import annotations

import base64
import io
import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.arrays import BoolArray, FloatArray
from detectors.checks import Checked, check_at_least, int_rule, integer, real, real_rule, rule
from detectors.errors import RulesError
from detectors.quantile import P2Quantile, from_river_state
from detectors.state_codec import JsonState, hook, ndarray

__all__ = ["Calibration", "GroupModel", "ModelState", "MultivariateParams"]

STATE_SCHEMA = 1
# The tail quantile the calibration tracks: far enough out to see the tail's shape (the
# 99th percentile under-corrects t(5)-like tails), near enough for P² to pin it with a
# few thousand values.
_TAIL_Q = 0.999
_TAIL_Z = NormalDist().inv_cdf(_TAIL_Q)
_SQRT2 = math.sqrt(2.0)
_MAX_HALF_LIFE = 1e7


@dataclass(frozen=True)
class MultivariateParams(Checked):
    """How the group model learns and judges; validated on construction.

    ``half_life_buckets``: memory of μ and Σ in buckets (2880 = one day).
    ``warmup_buckets``: learning buckets before any score is given (NaN until
    then; 120 x 60 nodes = 7,200 rows, ~24 per feature at F = 305).
    ``clip``: residuals are clipped at ± this before the model sees them.
    ``var_floor``: lower bound of each feature's variance (0.25 = a spread of
    0.5 residual sigma). ``alpha``: tail probability flagged as anomalous
    (1e-4: ~17 node-buckets a day in a 60-node group if the model were exact;
    alerts also need persistence). ``min_present``: share of features a node
    needs for a score. ``learn_every``: learn from every k-th bucket only (cost
    of the F x F inverse at large F). ``calibration_min``: healthy scored
    node-buckets a tail sketch needs before scores are given (5,000: ~80
    buckets of a 60-node group). ``calibration_window``: node-buckets per
    sketch before the next one takes over (172,800: a day of 60 nodes).
    """

    half_life_buckets: float = real(2880.0, above=0, at_most=_MAX_HALF_LIFE)
    warmup_buckets: int = integer(120)
    clip: float = real(8.0, above=0)
    var_floor: float = real(0.25, above=0)
    alpha: float = real(1e-4, above=0, below=0.5)
    min_present: float = real(0.5, above=0, at_most=1)
    learn_every: int = integer(1)
    calibration_min: int = integer(5000)
    calibration_window: int = integer(172_800)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_at_least(self, "calibration_window", "calibration_min")

    @property
    def beta(self) -> float:
        """Weight of one learning bucket (river's ``fading_factor``), from the half-life."""
        return -math.expm1(-math.log(2.0) * self.learn_every / self.half_life_buckets)


class _Inert:
    """Stand-in for river's quantile classes in a legacy pickle: keeps the state, runs nothing."""

    state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _RiverQuantile(_Inert):
    pass


class _RsQuantile(_Inert):
    pass


class _LegacySketchUnpickler(pickle.Unpickler):
    """Admits only river's quantile classes, as stand-ins: legacy state holds no other object."""

    _ALLOWED = {
        ("river.stats.quantile", "Quantile"): _RiverQuantile,
        ("river._river_rust.stats", "RsQuantile"): _RsQuantile,
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in GroupModel state")
        return self._ALLOWED[(module, name)]


# What foreign or truncated pickle bytes raise (UnpicklingError is not a ValueError).
_UNREADABLE = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    EOFError,
    pickle.UnpicklingError,
)


def _legacy_sketch(text: str, where: str) -> P2Quantile:
    """A river ``Quantile`` pickled to base64 (the format before this codec) as its numbers."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
        outer = _LegacySketchUnpickler(io.BytesIO(raw)).load()
        inner = outer.state["_quantile"] if isinstance(outer, _RiverQuantile) else None
        if not isinstance(inner, _RsQuantile) or not isinstance(inner.state, bytes):
            raise ValueError("not a river Quantile")
        sketch = from_river_state(inner.state)
    except _UNREADABLE as exc:
        raise ValueError(f"{where} is unreadable: {exc!r}") from None
    return sketch


def _sketch_of(data: Any, where: str) -> P2Quantile:
    if isinstance(data, str):
        sketch = _legacy_sketch(data, where)
    elif isinstance(data, Mapping):
        sketch = P2Quantile.from_dict(data)
    else:
        raise ValueError(f"{where} must be a JSON object, got {type(data).__name__}")
    if sketch.q != _TAIL_Q:
        raise ValueError(f"{where} is not a quantile sketch of {_TAIL_Q}")
    return sketch


_COUNT = rule(int_rule(minimum=0))
_FINITE = rule(real_rule())
_PHASE = int_rule(minimum=0)


@dataclass(frozen=True)
class Calibration(JsonState):
    """One tail sketch and the values it has been fed."""

    count: int = field(metadata=_COUNT)
    sketch: P2Quantile = field(metadata=hook(P2Quantile.to_dict, _sketch_of))


def _vector(data: Mapping[str, Any], where: str) -> tuple[int, ...]:
    return (_n_features(data, where),)


def _triangle(data: Mapping[str, Any], where: str) -> tuple[int, ...]:
    n = _n_features(data, where)
    return (n * (n + 1) // 2,)


def _n_features(data: Mapping[str, Any], where: str) -> int:
    features = data.get("features")
    if not isinstance(features, list):
        raise ValueError(f"{where}.features must be a list")
    return len(features)


def _one_or_two(name: str, value: tuple[Calibration, ...]) -> None:
    if not 1 <= len(value) <= 2:
        raise RulesError(f"{name} must hold one or two sketches, got {len(value)}")


@dataclass(frozen=True)
class ModelState(JsonState):
    """A :class:`GroupModel`'s persisted state (its parameters come from the caller)."""

    features: tuple[str, ...]
    bucket: int = field(metadata=_COUNT)
    learned: int = field(metadata=_COUNT)
    rows: int = field(metadata=_COUNT)
    mean: FloatArray = field(metadata=ndarray("<f8", _vector) | _FINITE)
    m2_upper: FloatArray = field(metadata=ndarray("<f8", _triangle) | _FINITE)
    calibration: tuple[Calibration, ...] = field(metadata=rule(_one_or_two))

    VERSION = ("schema", STATE_SCHEMA)
    LABEL = "GroupModel"


class GroupModel:
    """One group's online Gaussian model of node residual vectors (see module docstring).

    Mutable, like a river estimator: :meth:`score_and_learn` scores a bucket
    and then learns from it. Use :meth:`copy` where a caller must not see its
    model change (e.g. a function returning a new group state).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> params = MultivariateParams(warmup_buckets=20, calibration_min=600)
    >>> model = GroupModel(["a", "b", "c"], params)
    >>> for _ in range(30):  # 20 buckets to learn, 10 more (600 node-buckets) to calibrate
    ...     _ = model.score_and_learn(rng.normal(size=(60, 3)), np.ones(60, dtype=bool))
    >>> model.ready
    True
    >>> x = rng.normal(size=(60, 3))
    >>> x[7] = [3.5, -3.5, 3.5]  # no feature past 4 sigma, but the three together
    >>> scores = model.score_and_learn(x, np.ones(60, dtype=bool))
    >>> [int(i) for i in np.flatnonzero(model.is_anomalous(scores))]
    [7]
    """

    def __init__(
        self, features: Sequence[str], params: MultivariateParams, *, phase: int = 0
    ) -> None:
        names = tuple(str(f) for f in features)
        if not names:
            raise ValueError("a GroupModel needs at least one feature")
        if len(set(names)) != len(names):
            raise ValueError("features must be unique")
        _PHASE("phase", phase)
        self.features = names
        self.params = params
        n = len(names)
        self._bucket = int(phase)  # buckets seen (offset by phase); learn when % learn_every == 0
        self._learned = 0  # learning buckets folded into μ and E[xxᵀ]
        self._rows = 0  # rows folded in
        self._mean = np.zeros(n)
        self._m2 = np.zeros((n, n))
        # Tail sketches, oldest first: [(P² sketch of u's 99.9th percentile, values fed)].
        self._sketches: list[tuple[P2Quantile, int]] = [(P2Quantile(_TAIL_Q), 0)]
        self._refresh()

    # ------------------------------------------------------------------ state

    @property
    def warm(self) -> bool:
        """True once ``warmup_buckets`` learning buckets have been folded in."""
        return self._learned >= self.params.warmup_buckets

    @property
    def tail_scale(self) -> float | None:
        """σ: how much wider healthy u runs in its tail than N(0, 1) (None: not calibrated)."""
        estimates = [q.get() for q, count in self._sketches if count >= self.params.calibration_min]
        usable = [e for e in estimates if e is not None and math.isfinite(e)]
        return max(1.0, max(usable) / _TAIL_Z) if usable else None

    @property
    def ready(self) -> bool:
        """True when scores are given: warm and calibrated."""
        return self.warm and self.tail_scale is not None

    @property
    def mean(self) -> FloatArray:
        """μ: the learned mean residual vector (a copy)."""
        return self._mean.copy()

    @property
    def covariance(self) -> FloatArray:
        """Σ = E[xxᵀ] - μμᵀ as learned, before shrinkage and flooring (a copy)."""
        cov: FloatArray = self._m2 - np.outer(self._mean, self._mean)
        return cov

    def copy(self) -> GroupModel:
        """An independent model in the same state."""
        other = GroupModel.__new__(GroupModel)
        other.__dict__.update(self.__dict__)
        other._mean = self._mean.copy()
        other._m2 = self._m2.copy()
        other._sketches = list(self._sketches)  # frozen sketches may be shared
        # the derived arrays are never written in place, so they may be shared
        return other

    def _refresh(self) -> None:
        """Recompute the derived precision from μ and E[xxᵀ] (after each learning bucket)."""
        n = len(self.features)
        self._ratio = np.ones(n)
        if self._learned == 0:
            self._precision = np.diag(np.full(n, 1.0 / self.params.var_floor))
            return
        cov = self._m2 - np.outer(self._mean, self._mean)
        diag = np.maximum(np.diag(cov), 0.0)
        rows_per_bucket = self._rows / self._learned
        n_eff = min(float(self._rows), rows_per_bucket / self.params.beta)
        rho = n / (n + n_eff)
        shrunk = (1.0 - rho) * cov
        floored = np.maximum(diag, self.params.var_floor)
        shrunk[np.diag_indices(n)] = floored
        self._ratio = diag / floored
        try:
            precision = np.linalg.inv(shrunk)
        except np.linalg.LinAlgError:  # numerically singular: fall back to the diagonal
            precision = np.diag(1.0 / floored)
        self._precision = 0.5 * (precision + precision.T)

    # ---------------------------------------------------------------- scoring

    def _prepared(self, residuals: npt.ArrayLike) -> tuple[FloatArray, FloatArray, BoolArray]:
        """(clipped rows with missing cells at μ, the same minus μ, present mask)."""
        x = np.asarray(residuals, dtype=np.float64)
        n_feat = len(self.features)
        if x.ndim != 2 or x.shape[1] != n_feat:
            raise ValueError(f"residuals must be nodes x {n_feat} features, got shape {x.shape}")
        present = np.isfinite(x)
        limit = self.params.clip
        clipped = np.where(present, np.clip(np.where(present, x, 0.0), -limit, limit), self._mean)
        centred = np.where(present, clipped - self._mean, 0.0)
        return clipped, centred, present

    def score_and_learn(self, residuals: npt.ArrayLike, learn_mask: npt.ArrayLike) -> FloatArray:
        """Score every node's residual vector, then learn from the healthy ones.

        ``residuals`` is nodes x features (NaN = missing), in this model's
        feature order; ``learn_mask`` one bool per node (False: do not learn
        from it, e.g. it is alerting). Returns one score per node in [0, 1];
        NaN until the model is :attr:`ready` and where a node has fewer than
        ``min_present`` of its features. Rows learned: ``learn_mask``, enough
        features present, and not anomalous this bucket.
        """
        clipped, centred, present = self._prepared(residuals)
        n_nodes, n_feat = centred.shape
        mask = np.asarray(learn_mask, dtype=bool)
        if mask.shape != (n_nodes,):
            raise ValueError(
                f"learn_mask must have one flag per node ({n_nodes}), got {mask.shape}"
            )
        enough = present.sum(axis=1) >= self.params.min_present * n_feat

        scores = np.full(n_nodes, np.nan)
        healthy_u: FloatArray = np.zeros(0)
        if self.warm and n_nodes:
            u, ok = self._normal_scores(centred, present, enough)
            sigma = self.tail_scale
            if sigma is not None:
                scores[ok] = _phi(u[ok] / sigma)
            healthy_u = u[ok & mask & ~self.is_anomalous(scores)]

        learn_now = self._bucket % self.params.learn_every == 0
        self._bucket += 1
        if healthy_u.size:
            self._calibrate(healthy_u)
        if learn_now:
            rows = mask & enough & ~self.is_anomalous(scores)
            if rows.any():
                self._learn(clipped[rows])
        return scores

    def _normal_scores(
        self, centred: FloatArray, present: BoolArray, enough: BoolArray
    ) -> tuple[FloatArray, BoolArray]:
        """u per node (≈ N(0, 1) for a healthy node under the model) and where it is defined."""
        d2 = np.einsum("ij,ij->i", centred, centred @ self._precision)
        presentf = present.astype(np.float64)
        a1 = presentf @ self._ratio
        a2 = presentf @ (self._ratio * self._ratio)
        ok = enough & (a1 > 0) & np.isfinite(d2)
        # cells outside ``ok`` (or with extreme ratios) may be inf/NaN: masked out below
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            c = a2 / np.where(ok, a1, 1.0)  # d² ≈ c·χ²(ν)
            nu = np.where(ok, a1 * a1 / np.where(ok, a2, 1.0), 1.0)
            k = 2.0 / (9.0 * nu)
            u = (np.cbrt(np.maximum(d2 / np.where(ok, c, 1.0), 0.0) / nu) - (1.0 - k)) / np.sqrt(k)
        return np.where(ok, u, np.nan), ok

    def _calibrate(self, u: FloatArray) -> None:
        """Feed healthy u to the newest sketch; start a new one when it is full."""
        sketch, count = self._sketches[-1]
        self._sketches[-1] = (sketch.add_all(u.tolist()), count + len(u))
        if count + len(u) >= self.params.calibration_window:
            self._sketches = [self._sketches[-1], (P2Quantile(_TAIL_Q), 0)]

    def is_anomalous(self, scores: npt.ArrayLike) -> BoolArray:
        """Scores at or beyond the 1 - ``alpha`` quantile (NaN, i.e. no score: False)."""
        s = np.asarray(scores, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            flagged: BoolArray = s >= 1.0 - self.params.alpha
        return flagged

    def explain(self, residuals: npt.ArrayLike) -> FloatArray:
        """Each feature's share of d², nodes x features; a row sums to the node's d².

        Share of feature j: (x - μ)_j · (Σ⁻¹ (x - μ))_j with the same clipping and
        imputation as scoring (a missing feature gets NaN). Negative shares exist
        (a feature that lowers d² given the others). All NaN before warm-up.
        Does not learn.
        """
        _, centred, present = self._prepared(residuals)
        if not self.warm:
            return np.full(centred.shape, np.nan)
        shares: FloatArray = centred * (centred @ self._precision)
        shares[~present] = np.nan
        return shares

    def _learn(self, x: FloatArray) -> None:
        """Fold one bucket's rows in (river EwaCovariance's recurrence, one batch)."""
        self._learned += 1
        self._rows += x.shape[0]
        w = max(self.params.beta, 1.0 / self._learned)
        batch_mean = x.mean(axis=0)
        batch_m2 = (x.T @ x) / x.shape[0]
        batch_m2 = 0.5 * (batch_m2 + batch_m2.T)  # exactly symmetric: stored as a triangle
        self._mean = (1.0 - w) * self._mean + w * batch_mean
        self._m2 = (1.0 - w) * self._m2 + w * batch_m2
        self._refresh()

    # ---------------------------------------------------------- serialisation

    @property
    def nbytes(self) -> int:
        """Bytes of the learned state (μ, E[xxᵀ]) plus the derived precision."""
        return int(self._mean.nbytes + self._m2.nbytes + self._precision.nbytes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; :meth:`from_dict` rebuilds a model that scores identically."""
        return ModelState(
            features=self.features,
            bucket=self._bucket,
            learned=self._learned,
            rows=self._rows,
            mean=self._mean,
            m2_upper=self._m2[np.triu_indices(len(self.features))],
            calibration=tuple(Calibration(count, q) for q, count in self._sketches),
        ).to_dict()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], params: MultivariateParams) -> GroupModel:
        """Rebuild from :meth:`to_dict` with ``params``; ``ValueError`` if malformed."""
        state = ModelState.from_dict(data)
        model = cls(state.features, params)
        n = len(model.features)
        m2 = np.zeros((n, n))
        iu = np.triu_indices(n)
        m2[iu] = state.m2_upper
        m2.T[iu] = state.m2_upper
        model._bucket = state.bucket
        model._learned = state.learned
        model._rows = state.rows
        model._mean = state.mean
        model._m2 = m2
        model._sketches = [(c.sketch, c.count) for c in state.calibration]
        model._refresh()
        return model


def _phi(z: FloatArray) -> FloatArray:
    """Standard normal CDF, Φ(z) = erfc(-z/√2)/2: accurate in both tails (one value per node)."""
    return np.array([0.5 * math.erfc(-v / _SQRT2) for v in z.tolist()], dtype=np.float64)
