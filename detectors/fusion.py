"""Multi-signal fusion: one bucket's z-matrix and raw values → per-node evidence.

No single precursor dominates across failure types, so every node gets one
fused score from all of its scored features, and a few *hard signatures* are
reported apart from it because they fire at once. This module is stateless: it
judges one bucket. Persistence (soft evidence must last), silence over several
buckets and the alert lifecycle live in :mod:`detectors.alerts`.

Per feature and node, the *directional evidence* is how far z points the bad
way: ``max(z, 0)`` for ``direction="up"``, ``max(-z, 0)`` for ``"down"``,
``|z|`` for ``"both"``; unscored features and missing z give none.

Fusion formula (``score``): the sum of the ``top_k`` largest gated, clipped
evidences,

    e_f = min(d_f, z_clip) if d_f >= z_evidence else 0,     score = Σ top_k e_f

* Top-k rather than a root-sum-square over all features: with ~305 features a
  sum over everything grows with the feature count (pure noise would reach
  √305 ≈ 17 sigma), so its threshold would depend on the catalog. The top-k sum
  is bounded by ``top_k · z_clip`` whatever the catalog size.
* A sum (not the max) rewards corroboration: two precursors at 4-5 sigma together
  reach the default threshold of 8 where either alone does not — the report's
  failures each showed a different strongest signal, rarely a lone one.
* The gate drops the many mildly-off features that a healthy node always has
  (peer spread), so they cannot add up to an alert.
* The clip caps one wild ratio (a 1000-sigma NFS latency spike) at ``z_clip``:
  it may reach the threshold on its own (``score_threshold <= z_clip``, a
  sustained single-feature fail-slow is real) but cannot stand in for several.

Hard signature — *collapse*: ``value < collapse_ratio * peer median`` while the
median is at least ``collapse_min_median`` (``procs_running`` → 0; interrupts
falling from ~300 K/s to 70-100 K/s at an NVLink/bus XID). A collapsed feature
is not also counted as soft evidence (one deviation, one alert family).

Cluster-wide guard: when more than ``cluster_fraction`` of the nodes that have
a z for a feature deviate (|z| >= ``z_evidence``) the same bad way in this
bucket, the feature moved as a group (checkpoint save out of phase across
nodes, fabric-wide congestion). It is reported once as a :class:`GroupEvent`
and contributes neither soft evidence nor a collapse for any node. The same
holds for silence: when more than ``cluster_fraction`` of the expected nodes
sent nothing (an ingest or network outage), that is one group event, not a
page per node. A single node is never "cluster-wide" (an event needs >= 2).

Learned scoring (:mod:`detectors.group` passes both): soft evidence may be
fused on each node's *residual* — its change from its own usual z
(:mod:`detectors.baseline`) — instead of the raw z, so a node that is always
different in the same way is no evidence; collapse stays on raw values, and
signals keep the raw z, value and median beside the node's usual. And a
multivariate model's judgement (:class:`ModelJudgement`) can make a node
deviating through an *unusual combination* of features none of which reaches
the gate on its own.

A shift shared by most of the group moves the median itself and so is
invisible to peer z by construction; spotting it needs the group's own history,
which this stateless module does not keep. The caller that does
(:mod:`detectors.group`'s group-shift guard) passes those features as ``held``:
a held feature gives no node evidence at all this bucket — neither present nor
absent — and no cluster-wide event.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from detectors.arrays import FloatArray
from detectors.checks import Checked, integer, real
from detectors.features import FeatureSpec
from detectors.state_codec import NAN_AS_NULL, JsonRecord
from detectors.vocabulary import Signal

__all__ = [
    "SILENCE_FEATURE",
    "FusedBucket",
    "FusionParams",
    "GroupEvent",
    "ModelJudgement",
    "NodeVerdict",
    "Signal",
    "fuse_bucket",
]

EventDirection = Literal["up", "down", "missing"]
VerdictStatus = Literal["silent", "unscored", "collapse", "deviating", "ok"]

SILENCE_FEATURE = "frames"  # the GroupEvent feature name for a group-wide silence
_SIGN = {"up": 1.0, "down": -1.0, "both": 0.0}  # which sign of z is bad; 0 = either


@dataclass(frozen=True)
class FusionParams(Checked):
    """How per-feature z becomes node evidence in one bucket.

    ``z_evidence``: the |z| a feature needs to count as evidence at all (and to
    count as "deviating" for the cluster-wide guard). ``z_clip``: cap on one
    feature's contribution. ``score_threshold``: the fused score at which a node
    is deviating this bucket. ``cluster_fraction``: share of present nodes above
    which a same-direction deviation is a group event. ``max_signals``: how many
    contributing signals a verdict lists.
    """

    z_evidence: float = real(4.0, above=0)
    z_clip: float = real(10.0, above=0)
    top_k: int = integer(3)
    score_threshold: float = real(8.0, above=0)
    cluster_fraction: float = real(0.3, above=0, below=1)
    max_signals: int = integer(5)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.z_clip < self.z_evidence:
            raise ValueError(
                f"z_clip must be finite and >= z_evidence ({self.z_evidence}), got {self.z_clip}"
            )
        if self.score_threshold > self.top_k * self.z_clip:
            raise ValueError(
                f"score_threshold {self.score_threshold} can never be reached: "
                f"the score is at most top_k x z_clip = {self.top_k * self.z_clip}"
            )


@dataclass(frozen=True)
class GroupEvent(JsonRecord):
    """A feature that moved as a group in one bucket (never blames a node).

    For ``direction`` up/down: ``count`` nodes of the ``present`` ones with a z
    deviated that way; ``z`` and ``value`` are the medians over those nodes and
    ``median`` the peer median. For a group-wide silence, ``feature`` is
    :data:`SILENCE_FEATURE`, ``direction`` is ``"missing"``, ``count`` nodes of
    ``present`` expected ones sent no frame, and z/value/median are NaN.
    """

    feature: str
    direction: EventDirection
    count: int
    present: int
    z: float = field(metadata=NAN_AS_NULL)
    value: float = field(metadata=NAN_AS_NULL)
    median: float = field(metadata=NAN_AS_NULL)

    KEY_ORDER = ("feature", "direction", "count", "present", "fraction", "z", "value", "median")

    @property
    def fraction(self) -> float:
        return self.count / self.present if self.present else 0.0

    def describe(self) -> str:
        share = f"{self.count}/{self.present} nodes ({self.fraction:.0%})"
        if self.direction == "missing":
            return f"{share} sent no frame"
        return (
            f"{self.feature} {self.direction} on {share}: "
            f"{self.value:.6g} vs group median {self.median:.6g} (z {self.z:+.1f})"
        )

    def as_signal(self) -> Signal:
        """The event as an alert signal (value = deviating nodes' median; silence: counts)."""
        if self.direction == "missing":
            return Signal(self.feature, math.nan, float(self.count), float(self.present))
        return Signal(self.feature, self.z, self.value, self.median)


@dataclass(frozen=True)
class NodeVerdict:
    """What one bucket says about one expected node.

    ``silent``: no frame this bucket. ``scored``: at least one scored feature
    had a usable peer z (otherwise soft evidence is unknown, not absent).
    ``collapse_checked``: likewise for the features that carry a collapse
    signature. ``score``: fused soft evidence; ``deviating``: score reached the
    threshold. ``collapsed``: features showing the hard collapse signature.
    ``signals``: top contributors (soft evidence or collapse), strongest first.
    ``combination``: the deviation is an unusual combination found by the
    group's multivariate model while no single feature reached the gate
    (:func:`with_combinations`; ``score`` is then the threshold itself).
    ``model_score``: that model's score in [0, 1] (NaN: not scored).
    """

    node: str
    silent: bool
    scored: bool
    collapse_checked: bool
    score: float
    deviating: bool
    collapsed: tuple[str, ...]
    signals: tuple[Signal, ...]
    reason: str
    combination: bool = False
    model_score: float = math.nan

    @property
    def status(self) -> VerdictStatus:
        if self.silent:
            return "silent"
        if self.collapsed:
            return "collapse"
        if self.deviating:
            return "deviating"
        return "ok" if self.scored else "unscored"

    @property
    def collapse_strength(self) -> float:
        """Largest |z| among collapsed features (0 without a collapse)."""
        zs = [abs(s.z) for s in self.signals if s.feature in self.collapsed]
        return max(zs, default=0.0)


@dataclass(frozen=True, eq=False)
class ModelJudgement:
    """What a multivariate model (:class:`detectors.multivariate.GroupModel`) said this bucket.

    Rows are the reporting nodes, as in :func:`fuse_bucket`. ``scores``: each
    node's score in [0, 1] (NaN: not scored). ``flagged``: the model's own
    verdict (score >= 1 - ``alpha``). ``shares``: nodes x features, each
    feature's share of the node's distance (:meth:`GroupModel.explain`); only
    the flagged rows are read. ``alpha``: the model's tail probability, for the
    reason text.
    """

    scores: FloatArray
    flagged: npt.NDArray[np.bool_]
    shares: FloatArray
    alpha: float


@dataclass(frozen=True)
class FusedBucket:
    """Evidence of one bucket: a verdict per expected node plus the group events.

    ``silence_is_group``: the silent nodes were a group event (their silence is
    not node evidence). ``any_reference``: at least one feature had enough
    peers to score anyone.
    """

    verdicts: Mapping[str, NodeVerdict]
    group_events: tuple[GroupEvent, ...]
    silence_is_group: bool
    any_reference: bool


def fuse_bucket(
    *,
    nodes: Sequence[str],
    values: npt.ArrayLike,
    z: npt.ArrayLike,
    median: npt.ArrayLike,
    features: Sequence[FeatureSpec],
    gpus: Mapping[str, Mapping[str, str]],
    silent: Sequence[str],
    params: FusionParams,
    held: npt.ArrayLike | None = None,
    residual: npt.ArrayLike | None = None,
    usual: npt.ArrayLike | None = None,
    model: ModelJudgement | None = None,
) -> FusedBucket:
    """Fuse one bucket.

    ``values`` and ``z`` are ``len(nodes) x len(features)`` (NaN = missing);
    ``z`` is :func:`detectors.peer.peer_zscores`'s (or any per-feature
    standardised deviation). ``median`` is the per-feature peer median (NaN =
    no reference), or one per node and feature where roles split the peers.
    ``silent`` lists expected nodes that sent no frame; they get a verdict
    too. ``gpus[node][feature]`` names the GPU behind a feature's value, if
    any. ``held`` (one bool per feature, default none): features whose node
    evidence is unknown this bucket because the group as a whole moved. They
    give no soft evidence, no collapse and no cluster-wide event; a
    node left with only held features is unscored (unknown, not clear).

    ``residual`` (same shape as ``z``, default: ``z`` itself): each node's
    change from its learned usual z (:func:`detectors.baseline.update_and_residuals`).
    Soft evidence is fused on it, so a node that is always different in the
    same way is not evidence; collapse and the signals' z/value/median stay
    raw (a node that collapses is caught whatever its history). A NaN residual
    where z is finite gives no soft evidence. The cluster-wide guard suppresses
    the cells of a feature on which more than ``cluster_fraction`` of the nodes
    deviate the same bad way by raw z *or* by residual (the second is only
    suppressed, not reported: a sub-population leaving its usual together, a
    changed job layout, is no node's fault and no degradation either).
    ``usual`` (same shape; NaN = unknown): the node's usual z, shown on signals.

    ``model`` (optional): a multivariate model's judgement of the residual
    vectors. A node it flags while none of its residuals reaches the gate
    either way (and nothing collapsed) is *deviating* through an unusual
    combination — soft evidence like any other, so persistence applies —
    provided at least half of its positive share of the distance lies on
    features deviating the bad way (a node unusually *healthy* on several
    features at once is no fault). When more than ``cluster_fraction`` of the
    scored nodes (and at least two) qualify, the combination is the group's and
    nobody is blamed.
    """
    x = np.asarray(values, dtype=np.float64)
    zm = np.asarray(z, dtype=np.float64)
    med = np.asarray(median, dtype=np.float64)
    n_nodes, n_feat = len(nodes), len(features)
    if x.shape != (n_nodes, n_feat) or zm.shape != (n_nodes, n_feat):
        raise ValueError(
            f"values {x.shape} and z {zm.shape} must both be nodes x features "
            f"= ({n_nodes}, {n_feat})"
        )
    rm = zm if residual is None else np.asarray(residual, dtype=np.float64)
    um = None if usual is None else np.asarray(usual, dtype=np.float64)
    for name, arr in (("residual", rm), ("usual", um)):
        if arr is not None and arr.shape != (n_nodes, n_feat):
            raise ValueError(
                f"{name} must be nodes x features = ({n_nodes}, {n_feat}), got {arr.shape}"
            )
    if med.shape not in ((n_feat,), (n_nodes, n_feat)):
        raise ValueError(
            f"median must have one value per feature ({n_feat}), or per node and feature "
            f"({n_nodes}, {n_feat}), got {med.shape}"
        )
    # Per node and feature: each node's peers' median (its role's, where roles split the group).
    # Group events speak of the group: the median of those.
    event_med = med if med.ndim == 1 else _column_medians(med)
    med = np.broadcast_to(med, (n_nodes, n_feat))
    overlap = set(nodes) & set(silent)
    if overlap:
        raise ValueError(f"nodes both reporting and silent: {sorted(overlap)}")
    if held is None:
        held_mask = np.zeros(n_feat, dtype=bool)
    else:
        held_mask = np.asarray(held, dtype=bool)
        if held_mask.shape != (n_feat,):
            raise ValueError(
                f"held must have one flag per feature ({n_feat}), got {held_mask.shape}"
            )

    names = [f.name for f in features]
    sign = np.array([_SIGN[f.direction] for f in features], dtype=np.float64)
    both = sign == 0.0
    scored = np.array([f.scored for f in features], dtype=bool)
    gate, cf = params.z_evidence, params.cluster_fraction

    judged = np.isfinite(zm) & scored[None, :]  # a z the peers could give
    usable = judged & ~held_mask[None, :]
    zf = np.where(usable, zm, 0.0)  # unusable cells read 0; the masks keep them out
    present = usable.sum(axis=0)
    up_dev = usable & (zf >= gate)
    down_dev = usable & (zf <= -gate)
    n_up, n_down = up_dev.sum(axis=0), down_dev.sum(axis=0)
    group_up = (n_up > cf * present) & (n_up >= 2) & (sign >= 0)
    group_down = (n_down > cf * present) & (n_down >= 2) & (sign <= 0)
    if residual is None:
        rf = zf
        suppressed = (up_dev & group_up) | (down_dev & group_down)
    else:
        with np.errstate(invalid="ignore"):
            rf = np.where(usable & np.isfinite(rm), rm, 0.0)
        r_up, r_down = usable & (rf >= gate), usable & (rf <= -gate)
        n_rup, n_rdown = r_up.sum(axis=0), r_down.sum(axis=0)
        any_up = group_up | ((n_rup > cf * present) & (n_rup >= 2) & (sign >= 0))
        any_down = group_down | ((n_rdown > cf * present) & (n_rdown >= 2) & (sign <= 0))
        suppressed = ((up_dev | r_up) & any_up) | ((down_dev | r_down) & any_down)

    collapsed = _collapse_mask(x, med, usable, group_down, features)
    evidence = np.where(both, np.abs(rf), sign * rf)
    keep = usable & ~suppressed & ~collapsed & (evidence >= gate)
    evidence = np.where(keep, np.minimum(evidence, params.z_clip), 0.0)
    # Corroborating features (temperatures) count only beside a primary one:
    # a hot GPU that is not slow is no fault.
    corroborating = np.array([f.corroborating for f in features], dtype=bool)
    if corroborating.any():
        primary_hit = np.asarray((evidence[:, ~corroborating] > 0).any(axis=1), dtype=bool)
        evidence[:, corroborating] *= primary_hit[:, None]
    k = min(params.top_k, n_feat)
    if n_feat and n_nodes:
        score = np.partition(evidence, n_feat - k, axis=1)[:, n_feat - k :].sum(axis=1)
    else:
        score = np.zeros(n_nodes)

    node_scored = usable.any(axis=1)
    node_judged = judged.any(axis=1)
    collapse_cols = np.array([f.collapse_ratio is not None for f in features], dtype=bool)
    node_collapse_checked = (usable & collapse_cols[None, :]).any(axis=1)
    contributing = (evidence > 0) | collapsed
    combo = np.zeros(n_nodes, dtype=bool)
    if model is not None:
        combo, model_scores = _combinations(
            model, rf, usable, collapsed, sign, gate, cf, node_scored, n_feat
        )
    else:
        model_scores = np.full(n_nodes, np.nan)

    events = _group_events(names, zf, x, event_med, up_dev, down_dev, group_up, group_down, present)
    n_expected = n_nodes + len(silent)
    silence_is_group = len(silent) >= 2 and len(silent) > cf * n_expected
    if silence_is_group:
        events.insert(
            0,
            GroupEvent(
                SILENCE_FEATURE, "missing", len(silent), n_expected, math.nan, math.nan, math.nan
            ),
        )

    verdicts: dict[str, NodeVerdict] = {}
    has_contribution = np.asarray(contributing.any(axis=1), dtype=bool)
    shown_residual = None if residual is None else rm
    # Python lists: the loop below runs once per node and bucket, numpy scalars cost more
    rows = zip(
        score.tolist(),
        # math.nan itself where there is no score, so verdicts compare equal run to run
        [m if m == m else math.nan for m in model_scores.tolist()],
        combo.tolist(),
        has_contribution.tolist(),
        node_scored.tolist(),
        node_collapse_checked.tolist(),
        strict=True,
    )
    for i, (node, row) in enumerate(zip(nodes, rows, strict=True)):
        node_score, model_score, is_combo, contributes, is_scored, checked = row
        if model is not None and is_combo:
            verdicts[node] = _combination_verdict(
                node, i, model, model_score, checked,
                names, zm, x, med, shown_residual, um, usable, gpus.get(node), params,
            )  # fmt: skip
            continue
        if not contributes and is_scored:  # the common case: nothing to say
            verdicts[node] = NodeVerdict(
                node=node,
                silent=False,
                scored=True,
                collapse_checked=checked,
                score=0.0,
                deviating=False,
                collapsed=(),
                signals=(),
                reason="",
                model_score=model_score,
            )
            continue
        deviating = node_score >= params.score_threshold
        signals: tuple[Signal, ...] = ()
        collapsed_names: tuple[str, ...] = ()
        if contributes:
            cols = np.flatnonzero(contributing[i])
            # collapses by |z| (their strength), soft evidence by what was fused
            strength = np.where(collapsed[i, cols], np.abs(zm[i, cols]), np.abs(rf[i, cols]))
            order = cols[np.argsort(-strength, kind="stable")][: params.max_signals]
            node_gpus = gpus.get(node)
            signals = tuple(
                _signal(names[c], i, c, zm, x, med, shown_residual, um, node_gpus) for c in order
            )
            collapsed_names = tuple(names[c] for c in np.flatnonzero(collapsed[i]))
        reason = _reason(
            is_scored,
            bool(node_judged[i]),
            node_score,
            deviating,
            collapsed_names,
            signals,
            features,
            params,
        )
        verdicts[node] = NodeVerdict(
            node=node,
            silent=False,
            scored=is_scored,
            collapse_checked=checked,
            score=node_score,
            deviating=deviating,
            collapsed=collapsed_names,
            signals=signals,
            reason=reason,
            model_score=model_score,
        )
    silent_reason = (
        f"no frame in this bucket (group-wide: {len(silent)}/{n_expected} silent)"
        if silence_is_group
        else "no frame in this bucket"
    )
    for node in silent:
        verdicts[node] = NodeVerdict(
            node=node,
            silent=True,
            scored=False,
            collapse_checked=False,
            score=0.0,
            deviating=False,
            collapsed=(),
            signals=(),
            reason=silent_reason,
        )
    return FusedBucket(
        verdicts=verdicts,
        group_events=tuple(events),
        silence_is_group=silence_is_group,
        any_reference=bool((present > 0).any()),
    )


def _gpu_label(gpu: object) -> str | None:
    return None if gpu is None else str(gpu)


def _finite_or_nan(x: float) -> float:
    # math.nan itself (not any NaN) so that signals read back from JSON compare equal
    return x if math.isfinite(x) else math.nan


def _signal(
    name: str,
    i: int,
    j: int,
    z: FloatArray,
    x: FloatArray,
    med: FloatArray,
    residual: FloatArray | None,
    usual: FloatArray | None,
    node_gpus: Mapping[str, str] | None,
    share: float = math.nan,
) -> Signal:
    """The signal of cell (i, j): raw z/value/median, the learned usual where known."""
    u = math.nan if usual is None else _finite_or_nan(float(usual[i, j]))
    r = math.nan if residual is None or math.isnan(u) else _finite_or_nan(float(residual[i, j]))
    return Signal(
        name,
        float(z[i, j]),
        float(x[i, j]),
        float(med[i, j]),
        _gpu_label((node_gpus or {}).get(name)),
        residual=r,
        usual=u,
        share=_finite_or_nan(share),
    )


def _combinations(
    model: ModelJudgement,
    rf: FloatArray,
    usable: npt.NDArray[np.bool_],
    collapsed: npt.NDArray[np.bool_],
    sign: FloatArray,
    gate: float,
    cluster_fraction: float,
    node_scored: npt.NDArray[np.bool_],
    n_feat: int,
) -> tuple[npt.NDArray[np.bool_], FloatArray]:
    """(nodes deviating through an unusual combination, model score per node)."""
    n_nodes = rf.shape[0]
    scores = np.asarray(model.scores, dtype=np.float64)
    flagged = np.asarray(model.flagged, dtype=bool)
    if scores.shape != (n_nodes,) or flagged.shape != (n_nodes,):
        raise ValueError(f"model scores and flags must have one entry per node ({n_nodes})")
    combo = flagged & node_scored & ~collapsed.any(axis=1)
    if combo.any():
        combo &= ~(usable & (np.abs(rf) >= gate)).any(axis=1)  # a gated feature is fusion's
    if combo.any():
        shares = np.asarray(model.shares, dtype=np.float64)
        if shares.shape != (n_nodes, n_feat):
            raise ValueError(f"model shares must be nodes x features = ({n_nodes}, {n_feat})")
        rows = np.flatnonzero(combo)
        sh = np.where(usable[rows] & np.isfinite(shares[rows]), shares[rows], 0.0)
        positive = np.maximum(sh, 0.0)
        bad_way = (sign[None, :] == 0.0) | (sign[None, :] * rf[rows] > 0)
        combo[rows] = (positive * bad_way).sum(axis=1) >= 0.5 * positive.sum(axis=1)
        count = int(combo.sum())
        if count >= 2 and count > cluster_fraction * int(node_scored.sum()):
            combo[:] = False  # the group's combination, not a node's
    return combo, scores


def _combination_verdict(
    node: str,
    i: int,
    model: ModelJudgement,
    model_score: float,
    collapse_checked: bool,
    names: Sequence[str],
    z: FloatArray,
    x: FloatArray,
    med: FloatArray,
    residual: FloatArray | None,
    usual: FloatArray | None,
    usable: npt.NDArray[np.bool_],
    node_gpus: Mapping[str, str] | None,
    params: FusionParams,
) -> NodeVerdict:
    """A node deviating through an unusual combination: the top features by share of d²."""
    shares = np.where(usable[i] & np.isfinite(model.shares[i]), model.shares[i], 0.0)
    total = float(np.maximum(shares, 0.0).sum())
    cols = np.flatnonzero(shares > 0)
    order = cols[np.argsort(-shares[cols], kind="stable")][: params.max_signals]
    signals = tuple(
        _signal(names[c], i, c, z, x, med, residual, usual, node_gpus, float(shares[c]) / total)
        for c in order
    )
    listed = ", ".join(f"{s.describe()} ({s.share:.0%})" for s in signals)
    tail = 1.0 - model_score if math.isfinite(model_score) else math.nan
    reason = (
        f"unusual combination (multivariate p={tail:.1g} <= {model.alpha:g}; "
        f"no single feature at |z| >= {params.z_evidence:g}): {listed}"
    )
    return NodeVerdict(
        node=node,
        silent=False,
        scored=True,
        collapse_checked=collapse_checked,
        score=params.score_threshold,
        deviating=True,
        collapsed=(),
        signals=signals,
        reason=reason,
        combination=True,
        model_score=model_score,
    )


def _column_medians(med: FloatArray) -> FloatArray:
    """Median of each column over its finite cells (NaN where none is)."""
    out = np.full(med.shape[1], np.nan)
    finite = np.isfinite(med)
    for j in np.flatnonzero(finite.any(axis=0)).tolist():
        out[j] = float(np.median(med[finite[:, j], j]))
    return out


def _collapse_mask(
    x: FloatArray,
    med: FloatArray,
    usable: npt.NDArray[np.bool_],
    group_down: npt.NDArray[np.bool_],
    features: Sequence[FeatureSpec],
) -> npt.NDArray[np.bool_]:
    collapsed = np.zeros(x.shape, dtype=bool)
    cols = [
        j
        for j, f in enumerate(features)
        if f.scored and f.collapse_ratio is not None and not group_down[j]
    ]
    if not cols or not x.size:
        return collapsed
    ratio = np.array([features[j].collapse_ratio for j in cols], dtype=np.float64)
    floor = np.array([features[j].collapse_min_median for j in cols], dtype=np.float64)
    m = med[:, cols]
    # usable ⇒ the node's value and the peer median are finite (z is finite).
    with np.errstate(invalid="ignore"):
        hit = usable[:, cols] & (x[:, cols] < ratio * m) & (m >= floor)
    collapsed[:, cols] = hit
    return collapsed


def _group_events(
    names: Sequence[str],
    zf: FloatArray,
    x: FloatArray,
    med: FloatArray,
    up_dev: npt.NDArray[np.bool_],
    down_dev: npt.NDArray[np.bool_],
    group_up: npt.NDArray[np.bool_],
    group_down: npt.NDArray[np.bool_],
    present: npt.NDArray[np.int64],
) -> list[GroupEvent]:
    events: list[GroupEvent] = []
    sides: tuple[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], EventDirection], ...] = (
        (group_down, down_dev, "down"),
        (group_up, up_dev, "up"),
    )
    for j in np.flatnonzero(group_up | group_down).tolist():
        for flag, dev, way in sides:
            if flag[j]:
                rows = dev[:, j]
                events.append(
                    GroupEvent(
                        feature=names[j],
                        direction=way,
                        count=int(rows.sum()),
                        present=int(present[j]),
                        z=float(np.median(zf[rows, j])),
                        value=float(np.median(x[rows, j])),
                        median=float(med[j]),
                    )
                )
    return events


def _reason(
    scored: bool,
    judged: bool,
    score: float,
    deviating: bool,
    collapsed: tuple[str, ...],
    signals: tuple[Signal, ...],
    features: Sequence[FeatureSpec],
    params: FusionParams,
) -> str:
    if not scored:
        if judged:
            return "every comparable feature is held: the group moved as a whole"
        return "no feature has enough peers to compare against"
    parts = []
    if collapsed:
        ratio = {f.name: f.collapse_ratio for f in features}
        by_name = {s.feature: s for s in signals}
        hits = []
        for name in collapsed:
            s = by_name.get(name)
            if s is None:  # more collapses than max_signals; keep the name at least
                hits.append(name)
            else:
                hits.append(f"{name} {s.value:.6g} < {ratio[name]:g} * peer median {s.median:.6g}")
        parts.append("collapse: " + "; ".join(hits))
    soft = [s for s in signals if s.feature not in collapsed]
    if deviating:
        listed = ", ".join(s.describe() for s in soft)
        parts.append(f"score {score:.1f} >= {params.score_threshold:g}: {listed}")
    elif score > 0:
        parts.append(f"score {score:.1f} < {params.score_threshold:g}")
    return "; ".join(parts)
