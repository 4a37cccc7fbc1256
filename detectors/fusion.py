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
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from detectors.features import FeatureSpec

__all__ = [
    "SILENCE_FEATURE",
    "FusedBucket",
    "FusionParams",
    "GroupEvent",
    "NodeVerdict",
    "Signal",
    "fuse_bucket",
]

FloatArray = npt.NDArray[np.float64]
EventDirection = Literal["up", "down", "missing"]
VerdictStatus = Literal["silent", "unscored", "collapse", "deviating", "ok"]

SILENCE_FEATURE = "frames"  # the GroupEvent feature name for a group-wide silence
_SIGN = {"up": 1.0, "down": -1.0, "both": 0.0}  # which sign of z is bad; 0 = either


@dataclass(frozen=True)
class FusionParams:
    """How per-feature z becomes node evidence in one bucket.

    ``z_evidence``: the |z| a feature needs to count as evidence at all (and to
    count as "deviating" for the cluster-wide guard). ``z_clip``: cap on one
    feature's contribution. ``score_threshold``: the fused score at which a node
    is deviating this bucket. ``cluster_fraction``: share of present nodes above
    which a same-direction deviation is a group event. ``max_signals``: how many
    contributing signals a verdict lists.
    """

    z_evidence: float = 4.0
    z_clip: float = 10.0
    top_k: int = 3
    score_threshold: float = 8.0
    cluster_fraction: float = 0.3
    max_signals: int = 5

    def __post_init__(self) -> None:
        if not (math.isfinite(self.z_evidence) and self.z_evidence > 0):
            raise ValueError(f"z_evidence must be finite and > 0, got {self.z_evidence}")
        if not (math.isfinite(self.z_clip) and self.z_clip >= self.z_evidence):
            raise ValueError(
                f"z_clip must be finite and >= z_evidence ({self.z_evidence}), got {self.z_clip}"
            )
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if not (math.isfinite(self.score_threshold) and self.score_threshold > 0):
            raise ValueError(f"score_threshold must be finite and > 0, got {self.score_threshold}")
        if self.score_threshold > self.top_k * self.z_clip:
            raise ValueError(
                f"score_threshold {self.score_threshold} can never be reached: "
                f"the score is at most top_k x z_clip = {self.top_k * self.z_clip}"
            )
        if not 0 < self.cluster_fraction < 1:
            raise ValueError(f"cluster_fraction must be in (0, 1), got {self.cluster_fraction}")
        if self.max_signals < 1:
            raise ValueError(f"max_signals must be >= 1, got {self.max_signals}")


def _json_float(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _from_json_float(x: Any) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True)
class Signal:
    """One contributing feature of a verdict: its z, the node's value, the peer median, the GPU."""

    feature: str
    z: float
    value: float
    median: float
    gpu: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite floats become None)."""
        return {
            "feature": self.feature,
            "z": _json_float(self.z),
            "value": _json_float(self.value),
            "median": _json_float(self.median),
            "gpu": self.gpu,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signal:
        gpu = data.get("gpu")
        return cls(
            feature=str(data["feature"]),
            z=_from_json_float(data["z"]),
            value=_from_json_float(data["value"]),
            median=_from_json_float(data["median"]),
            gpu=None if gpu is None else str(gpu),
        )


@dataclass(frozen=True)
class GroupEvent:
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
    z: float
    value: float
    median: float

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "direction": self.direction,
            "count": self.count,
            "present": self.present,
            "fraction": self.fraction,
            "z": _json_float(self.z),
            "value": _json_float(self.value),
            "median": _json_float(self.median),
        }


@dataclass(frozen=True)
class NodeVerdict:
    """What one bucket says about one expected node.

    ``silent``: no frame this bucket. ``scored``: at least one scored feature
    had a usable peer z (otherwise soft evidence is unknown, not absent).
    ``collapse_checked``: likewise for the features that carry a collapse
    signature. ``score``: fused soft evidence; ``deviating``: score reached the
    threshold. ``collapsed``: features showing the hard collapse signature.
    ``signals``: top contributors (soft evidence or collapse) by |z|, descending.
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
) -> FusedBucket:
    """Fuse one bucket.

    ``values`` and ``z`` are ``len(nodes) x len(features)`` (NaN = missing);
    ``z`` is usually :func:`detectors.peer.peer_zscores`'s, but any per-feature
    standardised deviation (e.g. a residual against a node's learned normal)
    fits. ``median`` is the per-feature peer median (NaN = no reference).
    ``silent`` lists expected nodes that sent no frame; they get a verdict too.
    ``gpus[node][feature]`` names the GPU behind a feature's value, if any.
    ``held`` (one bool per feature, default none): features whose node evidence
    is unknown this bucket because the group as a whole moved. They give no
    soft evidence, no collapse and no cluster-wide event; a node left with only
    held features is unscored (unknown, not clear).
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
    if med.shape != (n_feat,):
        raise ValueError(f"median must have one value per feature ({n_feat}), got {med.shape}")
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
    suppressed = (up_dev & group_up) | (down_dev & group_down)

    collapsed = _collapse_mask(x, med, usable, group_down, features)
    evidence = np.where(both, np.abs(zf), sign * zf)
    keep = usable & ~suppressed & ~collapsed & (evidence >= gate)
    evidence = np.where(keep, np.minimum(evidence, params.z_clip), 0.0)
    # Corroborating features (temperatures) count only beside a primary one:
    # a hot GPU that is not slow is no fault.
    corroborating = np.array([f.corroborating for f in features], dtype=bool)
    if corroborating.any():
        primary_hit = (evidence[:, ~corroborating] > 0).any(axis=1)
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

    events = _group_events(names, zf, x, med, up_dev, down_dev, group_up, group_down, present)
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
    for i, node in enumerate(nodes):
        node_score = float(score[i])
        if not has_contribution[i] and node_scored[i]:  # the common case: nothing to say
            verdicts[node] = NodeVerdict(
                node=node,
                silent=False,
                scored=True,
                collapse_checked=bool(node_collapse_checked[i]),
                score=0.0,
                deviating=False,
                collapsed=(),
                signals=(),
                reason="",
            )
            continue
        deviating = node_score >= params.score_threshold
        signals: tuple[Signal, ...] = ()
        collapsed_names: tuple[str, ...] = ()
        if has_contribution[i]:
            cols = np.flatnonzero(contributing[i])
            order = cols[np.argsort(-np.abs(zm[i, cols]), kind="stable")][: params.max_signals]
            node_gpus = gpus.get(node) or {}
            signals = tuple(
                Signal(
                    names[c],
                    float(zm[i, c]),
                    float(x[i, c]),
                    float(med[c]),
                    _gpu_label(node_gpus.get(names[c])),
                )
                for c in order
            )
            collapsed_names = tuple(names[c] for c in np.flatnonzero(collapsed[i]))
        reason = _reason(
            bool(node_scored[i]),
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
            scored=bool(node_scored[i]),
            collapse_checked=bool(node_collapse_checked[i]),
            score=node_score,
            deviating=deviating,
            collapsed=collapsed_names,
            signals=signals,
            reason=reason,
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
    m = med[cols]
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
        listed = ", ".join(f"{s.feature} z={s.z:+.1f}" for s in soft)
        parts.append(f"score {score:.1f} >= {params.score_threshold:g}: {listed}")
    elif score > 0:
        parts.append(f"score {score:.1f} < {params.score_threshold:g}")
    return "; ".join(parts)
