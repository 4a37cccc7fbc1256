"""Learned scoring: residuals against each node's usual z, then the group's model on them.

Real fleets are not one population (the report's 12 light
checkpoint writers among 60), so soft evidence is fused on each node's
*residual*, its change from its own usual peer z, not on the raw z; hard
collapse signatures stay on raw values against the peer median, so a node
that collapses is caught whatever its history. Alert signals keep the raw
peer z, value and median and add the node's usual where it matters
("pgpgout_rate z=+31.2 vs its usual -1.7"). The baselines keep two usuals per
cell: regime 0 for calm buckets, regime 1 for buckets with any group shift
(saves, job deaths, restart loads). They learn from nodes without an open
node alert and not on held features; the baseline's own freeze gate keeps
extreme cells out. The multivariate model scores the residual vectors in calm
buckets; a node it flags while none of its residuals reaches the evidence
gate is soft Deviation evidence ("unusual combination", the top features by
share of the distance as signals). It is folded into
``PeerwatchNodeDeviation`` rather than being a family of its own: it is the
same kind of finding (a node drifting from its usual), with the same severity
and action, and a fault that grows from several moderate deviations into one
past the gate then stays one alert instead of one resolving as another fires.
``ScoringParams(learned_baselines=False, multivariate=False)`` scores on peer
z alone.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from detectors.alerts import AlertKey, AlertState
from detectors.arrays import BoolArray, FloatArray
from detectors.baseline import BaselineParams, NodeBaselines, update_and_residuals
from detectors.fusion import ModelJudgement
from detectors.multivariate import GroupModel, MultivariateParams

__all__ = ["Learned", "learned_scoring"]


@dataclass(frozen=True, eq=False)
class Learned:
    """One bucket of learned scoring: the new baselines and model, and what fusion needs."""

    baselines: NodeBaselines
    model: GroupModel | None
    residual: FloatArray | None  # reporting nodes x features; None: fuse on raw z
    usual: FloatArray | None
    judgement: ModelJudgement | None  # None: the model did not score this bucket


def learned_scoring(
    baselines: NodeBaselines,
    model: GroupModel | None,
    alerts: Mapping[AlertKey, AlertState],
    group: str,
    members: Sequence[str],
    reporting: Sequence[str],
    names: Sequence[str],
    z: FloatArray,
    held: BoolArray,
    baseline: BaselineParams | None,
    multivariate: MultivariateParams | None,
) -> Learned:
    """Residuals against each node's usual z, then the group model on them; learn both.

    ``baseline`` / ``multivariate``: the parameters of each part, None when it is off.

    Learning skips nodes with an open (pending or firing) node alert and the
    features the group-shift guard holds; the baseline's own freeze gate skips
    extreme cells and the model its own anomalous rows. One exception keeps a
    node that is different from its first bucket from alerting forever: its
    cells that have never warmed up (so its residual is still the raw z) are
    learned once every open alert of the node has had evidence for the
    baseline's ``adopt_after`` buckets — the same "a deviation that lasts is
    the new normal" rule the baseline applies to warm cells. The baselines use
    regime 1 in any bucket with a group shift (saves, job deaths, restart
    loads), regime 0 otherwise. The model scores and learns only in calm
    buckets (no shift): it is a model of a steady group, and a shifted bucket's
    residual vectors describe the group's transition, which the guard reports.
    """
    residual: FloatArray | None = None
    usual: FloatArray | None = None
    judgement: ModelJudgement | None = None
    if (baseline is None and multivariate is None) or not reporting:
        return Learned(baselines, model, residual, usual, judgement)
    streaks: dict[str, int] = {}  # node → the shortest evidence streak of its open alerts
    for (_, node), alert in alerts.items():
        if node is not None:
            streaks[node] = min(alert.streak, streaks.get(node, alert.streak))
    calm = np.array([node not in streaks for node in reporting], dtype=bool)
    if baseline is not None:
        shifted = bool(held.any())
        regime = min(1, baseline.regimes - 1) if shifted else 0
        prior = baselines.retain(members)
        usual = _usual(prior, reporting, names, regime, baseline.warmup_buckets)
        learn: BoolArray = (  # one flag per node, or per cell where cells differ
            calm
            if calm.all()
            else _learn_mask(calm, streaks, reporting, usual, baseline.adopt_after)
        )
        if shifted:
            learn = (learn[:, None] if learn.ndim == 1 else learn) & ~held[None, :]
        baselines, residual = update_and_residuals(
            prior, reporting, z, names, learn, baseline, regime
        )
    if multivariate is not None and not held.any():
        model = _model_for(model, names, group, multivariate).copy()
        x = z if residual is None else residual
        scores = model.score_and_learn(x, calm)
        flagged = model.is_anomalous(scores)
        shares = np.full(x.shape, np.nan)
        if flagged.any():  # rare; explained by the model as this bucket left it (display only)
            shares[flagged] = model.explain(x[flagged])
        judgement = ModelJudgement(scores, flagged, shares, multivariate.alpha)
    return Learned(baselines, model, residual, usual, judgement)


def _learn_mask(
    calm: BoolArray,
    streaks: Mapping[str, int],
    reporting: Sequence[str],
    usual: FloatArray,
    adopt: int,
) -> BoolArray:
    """Cells to learn: calm nodes, and the cold cells of nodes alerting for ``adopt`` buckets."""
    settled = np.array([streaks.get(node, 0) >= adopt for node in reporting], dtype=bool)
    mask: BoolArray = calm[:, None] | (settled[:, None] & np.isnan(usual))
    return mask


def _model_for(
    model: GroupModel | None, names: Sequence[str], group: str, params: MultivariateParams
) -> GroupModel:
    """The group's model for this catalog and these parameters (a new one if either changed).

    Groups learn in different buckets (phase from a stable hash of the group
    name), so with ``learn_every`` > 1 the matrix inverses spread over buckets.
    """
    if model is None or model.features != tuple(names):
        phase = zlib.crc32(group.encode("utf-8")) % params.learn_every
        return GroupModel(names, params, phase=phase)
    if model.params != params:  # e.g. restored with other parameters: same state, new knobs
        return GroupModel.from_dict(model.to_dict(), params)
    return model


def _usual(
    baselines: NodeBaselines,
    nodes: Sequence[str],
    names: Sequence[str],
    regime: int,
    warmup: int,
) -> FloatArray:
    """Each node's usual z per feature before this bucket (NaN: unknown or still warming up)."""
    out = np.full((len(nodes), len(names)), np.nan)
    if not baselines.nodes or regime >= baselines.regimes:
        return out
    mean, count = baselines.mean[regime], baselines.count[regime]
    if baselines.nodes == tuple(nodes) and baselines.features == tuple(names):
        return np.where(count >= warmup, mean, np.nan)
    row_of = {n: i for i, n in enumerate(baselines.nodes)}
    col_of = {f: j for j, f in enumerate(baselines.features)}
    rows = [(k, row_of[n]) for k, n in enumerate(nodes) if n in row_of]
    cols = [(k, col_of[f]) for k, f in enumerate(names) if f in col_of]
    if rows and cols:
        dst_r, src_r = (np.array(a) for a in zip(*rows, strict=True))
        dst_c, src_c = (np.array(a) for a in zip(*cols, strict=True))
        sub = np.ix_(src_r, src_c)
        out[np.ix_(dst_r, dst_c)] = np.where(count[sub] >= warmup, mean[sub], np.nan)
    return out
