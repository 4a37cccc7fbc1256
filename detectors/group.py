"""Score one closed bucket of one peer group: the single entry point.

The Faust worker and the offline evaluator/backtest both call
:func:`score_bucket`, so what is measured offline is what runs live::

    state = GroupState()
    for bucket in buckets:                       # in bucket order, every closed bucket
        state, result = score_bucket(state, group, bucket.ts, bucket.frames, bucket.gpus,
                                     bucket.expected, features, params)
        send(result.changes)                     # transitions; re-send result.active

Steps: frames of the expected members → nodes x features matrix (missing =
NaN) → :func:`detectors.peer.peer_zscores` → group-shift guard (peer medians vs
the group's usual levels, :mod:`detectors.group_shift`) → residual z against each
node's learned usual z (:mod:`detectors.baseline`) → the group's multivariate model
on the residual vectors (:mod:`detectors.multivariate`; both in
:mod:`detectors.learned_scoring`) → :func:`detectors.fusion.fuse_bucket` with the
shifted features held → one :class:`detectors.alerts.Observation` per (family,
node) (:mod:`detectors.observations`) → :func:`detectors.alerts.step_alerts`.

``score_bucket`` does not mutate the state it is given; it returns a new
:class:`GroupState`. Membership is the caller's: frames of nodes outside
``expected`` are ignored (listed in ``BucketResult.ignored``), and alerts of
nodes that left ``expected`` are resolved. A bucket at or before the last one
scored is *stale* (a redelivery after a restart): it changes nothing and only
reports the active alerts, so at-least-once delivery is safe. "Consecutive"
means consecutive calls: call once per closed bucket, with empty ``frames`` if
nothing arrived, so silence keeps counting.

Training phases (:mod:`detectors.phase`). Checkpoint saves and restart loads
are known, not learned: the source report's rules classify every bucket from
its own frames (aggregate NFS write / read bytes, GPU util), so the first save
after a (re)start is recognised before any level exists. In a Save or Load
bucket (within its maximum length) the phase's moves are expected: the levels
are left as they were (neither learned nor warmed up on), the shifts and
cluster-wide events on the features it moves are no ``PeerwatchGroupDegraded``
evidence, node evidence is held on every feature but the error counters, and
the baselines learn nothing calm from it (regime 1, moved features held). The
hard collapse signatures stay judged against the bucket's peer median, so a
node that collapses while its peers save still pages at once; XIDs are judged
per GPU elsewhere and always page. The phase rides on ``BucketResult.phase``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, repeat
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from detectors.alerts import (
    AlertChange,
    AlertKey,
    AlertParams,
    AlertState,
    active_alerts,
    step_alerts,
)
from detectors.arrays import BoolArray, FloatArray
from detectors.baseline import BaselineParams, NodeBaselines
from detectors.checks import Checked, check_at_least, flag, integer, part
from detectors.features import FeatureSpec
from detectors.fusion import FusionParams, GroupEvent, NodeVerdict, fuse_bucket
from detectors.group_shift import GroupLevels, GroupShift, ShiftParams, regime_check, track_levels
from detectors.learned_scoring import learned_scoring
from detectors.multivariate import GroupModel, MultivariateParams
from detectors.observations import observations
from detectors.peer import peer_zscores
from detectors.phase import Phase, PhaseParams, step_phase
from detectors.population import (
    Composition,
    PopulationParams,
    Populations,
    role_peer_stats,
    step_populations,
)
from detectors.state_codec import JsonState, hook

__all__ = ["BucketResult", "GroupState", "ScoringParams", "score_bucket"]

_P = TypeVar("_P", FusionParams, AlertParams, ShiftParams)  # the parts ScoringParams builds

STATE_SCHEMA = 3


def _alerts_data(alerts: Mapping[AlertKey, AlertState]) -> list[dict[str, Any]]:
    ordered = sorted(alerts.values(), key=lambda a: (a.alertname, a.node or ""))
    return [a.to_dict() for a in ordered]


def _alerts(data: Any, where: str) -> dict[AlertKey, AlertState]:
    if not isinstance(data, list):
        raise ValueError(f"{where} must be a list, got {type(data).__name__}")
    alerts = [AlertState.from_dict(a) for a in data]
    return {a.key: a for a in alerts}


def _baselines_data(baselines: NodeBaselines) -> dict[str, Any] | None:
    # an empty NodeBaselines (0 regimes) is not a readable to_dict: store none
    return baselines.to_dict() if baselines.nodes else None


def _baselines(data: Any, where: str) -> NodeBaselines:
    return NodeBaselines() if data is None else NodeBaselines.from_dict(data)


def _model_data(model: GroupModel | None) -> dict[str, Any] | None:
    return None if model is None else model.to_dict()


def _model(data: Any, where: str) -> GroupModel | None:
    return None if data is None else GroupModel.from_dict(data, MultivariateParams())


@dataclass(frozen=True)
class ScoringParams(Checked):
    """Every knob of group scoring, validated on construction.

    ``min_peers``: present values a feature needs before anyone is scored on it
    (8: a median and MAD of fewer nodes is too easily moved by two bad ones).
    ``z_evidence``/``z_clip``/``top_k``/``score_threshold``/``max_signals``:
    see :class:`detectors.fusion.FusionParams`. ``cluster_fraction``: share of
    present nodes above which a same-direction deviation (or silence) is a
    group event. ``persistence``/``silent_buckets``/``resolve_after``: see
    :class:`detectors.alerts.AlertParams`.

    Group-shift guard (:mod:`detectors.group_shift`): ``shift_threshold`` — relative
    departure of a group median from its usual level that makes the feature
    shifted (0.35: a job death takes interrupts -83 %, GPU util -100 %; a restart
    load interrupts -47 %, procs -36 %, GETATTR time +300 %, while healthy
    training medians move < 2 % bucket to bucket); the tolerance never goes below
    the feature's ``abs_floor``. ``shift_release`` — a shifted feature stays
    shifted until back within this fraction (<= ``shift_threshold``).
    ``shift_alpha`` — EWMA weight of the usual level and of the shifted medians
    (0.1: half-life ~7 buckets). ``shift_warmup`` — consistent buckets a level
    needs before anything counts as shifted. ``shift_adopt_after`` — buckets
    after which a lasting shift is the new normal (40 = 20 min; >=
    ``persistence``, or a shift would be adopted before it could ever fire).

    Learned scoring (:mod:`detectors.learned_scoring`): ``learned_baselines`` — fuse soft
    evidence on each node's residual against its learned usual z instead of the
    raw peer z; ``baseline`` — how the usual is learned (two regimes: calm, and
    any bucket with a group shift). ``multivariate`` — run the group's
    multivariate model on the residual vectors and let an unusual combination
    be Deviation evidence; ``model`` — its parameters (``learn_every`` 1: at 31
    features the model costs a few tenths of a millisecond per 60-node bucket;
    with a catalog of ~300 features use 4 or more — one 305 x 305 inverse is
    ~7 ms single-threaded — and groups learn in different buckets, phased by a
    stable hash of their name). Both switches off give the peer-z-only scoring
    of schema 2. ``phase``: the training-phase rules (:class:`detectors.phase.PhaseParams`).
    """

    min_peers: int = integer(8, minimum=2, why="a node is not its own peer group")
    # the fusion's and the lifecycle's knobs, flat for settings; their defaults are theirs
    z_evidence: float = FusionParams.z_evidence
    z_clip: float = FusionParams.z_clip
    top_k: int = FusionParams.top_k
    score_threshold: float = FusionParams.score_threshold
    cluster_fraction: float = FusionParams.cluster_fraction
    max_signals: int = FusionParams.max_signals
    persistence: int = AlertParams.persistence
    silent_buckets: int = AlertParams.silent_buckets
    gap_min_features: int = integer(3)
    resolve_after: int = AlertParams.resolve_after
    shift_threshold: float = ShiftParams.shift_threshold
    shift_release: float = ShiftParams.shift_release
    shift_alpha: float = ShiftParams.shift_alpha
    shift_warmup: int = ShiftParams.shift_warmup
    shift_adopt_after: int = ShiftParams.shift_adopt_after
    learned_baselines: bool = flag(True)
    baseline: BaselineParams = part(BaselineParams, lambda: BaselineParams(regimes=2))
    multivariate: bool = flag(True)
    model: MultivariateParams = part(MultivariateParams)
    population: PopulationParams = part(PopulationParams)
    phase: PhaseParams = part(PhaseParams)

    def __post_init__(self) -> None:
        super().__post_init__()
        # Building the parts validates their fields.
        _ = self.fusion, self.alerts, self.shift
        check_at_least(
            self, "shift_adopt_after", "persistence", "a shift adopted sooner could never fire"
        )

    def _part(self, kind: type[_P]) -> _P:
        """The part ``kind`` built from this object's fields of the same names."""
        return kind(**{f.name: getattr(self, f.name) for f in dataclasses.fields(kind)})

    @cached_property
    def fusion(self) -> FusionParams:
        return self._part(FusionParams)

    @cached_property
    def alerts(self) -> AlertParams:
        return self._part(AlertParams)

    @cached_property
    def shift(self) -> ShiftParams:
        return self._part(ShiftParams)


@dataclass(frozen=True, eq=False)
class GroupState(JsonState):
    """Detector state of one group: last bucket scored, alerts, usual levels, learned models.

    Per-node persistence counters are the ``streak``/``clear_streak`` of the
    alert states; ``levels`` is the group-shift guard's history; ``baselines``
    each member's learned usual z (:mod:`detectors.baseline`); ``model`` the
    group's multivariate model of residual vectors (None until first used).
    Treat as immutable: :func:`score_bucket` copies the model before it learns.

    ``to_dict`` is JSON-safe; ``from_dict`` rebuilds an equal state (equality
    is equality of ``to_dict``) and also reads schemas 1 and 2, starting what
    they lack fresh: levels (schema 1), baselines and model (1 and 2). The
    model's parameters are not stored: ``from_dict`` restores it with
    :class:`MultivariateParams`'s defaults and :func:`score_bucket` re-applies
    its own if they differ.
    """

    last_bucket_ts: int | None = None
    alerts: Mapping[AlertKey, AlertState] = field(
        default_factory=dict, metadata=hook(_alerts_data, _alerts)
    )
    levels: GroupLevels = field(default_factory=GroupLevels)
    baselines: NodeBaselines = field(
        default_factory=NodeBaselines, metadata=hook(_baselines_data, _baselines)
    )
    model: GroupModel | None = field(default=None, metadata=hook(_model_data, _model))
    populations: Populations = field(default_factory=Populations)
    phase: Phase = field(default_factory=Phase)

    VERSION = ("schema", STATE_SCHEMA)
    LEGACY_VERSIONS = (1, 2)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupState):
            return NotImplemented
        return self is other or self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable parts: not hashable

    @classmethod
    def upgrade(cls, data: Mapping[str, Any], version: int) -> Mapping[str, Any]:
        """An older schema keeps its alerts (and levels from 2); the rest starts fresh."""
        kept = ("last_bucket_ts", "alerts", "phase") + (("levels",) if version == 2 else ())
        return {k: data[k] for k in kept if k in data}


@dataclass(frozen=True)
class BucketResult:
    """What one bucket produced.

    ``verdicts``: one per expected node (silent ones included). ``changes``:
    alert transitions to send now. ``active``: every firing alert after this
    bucket (re-send while firing). ``group_events``: features on which a large
    share of the nodes deviated from the median together this bucket.
    ``group_shifts``: features whose group median left its usual level (their
    node evidence was held), in catalog order. ``phase``: the bucket's training
    phase (None for a stale bucket). ``ignored``: nodes that sent
    frames but are not expected. ``stale``: the bucket was not newer than the
    last one scored and changed nothing.
    """

    group: str
    bucket_ts: int
    verdicts: Mapping[str, NodeVerdict]
    changes: tuple[AlertChange, ...]
    active: tuple[AlertChange, ...]
    group_events: tuple[GroupEvent, ...]
    group_shifts: tuple[GroupShift, ...] = ()
    ignored: tuple[str, ...] = ()
    stale: bool = False
    idle: tuple[str, ...] = ()
    composition: Composition | None = None
    phase: Phase | None = None


def score_bucket(
    state: GroupState,
    group: str,
    bucket_ts: int,
    frames: Mapping[str, Mapping[str, float]],
    gpus: Mapping[str, Mapping[str, str]],
    expected: Collection[str],
    features: Sequence[FeatureSpec],
    params: ScoringParams,
    roles: Mapping[str, str] | None = None,
    on_hold: Collection[str] = frozenset(),
) -> tuple[GroupState, BucketResult]:
    """Score one closed bucket of ``group``; returns ``(new_state, result)``.

    ``frames[node]`` holds the node's feature values (absent = missing; a
    node with no frame or an empty one is silent this bucket);
    ``gpus[node][feature]`` the GPU behind a feature; ``expected`` the members
    that should have reported; ``features`` the catalog (unscored specs are
    ignored); ``roles`` each node's role in the job, where known
    (:func:`detectors.population.role_peer_stats`). ``on_hold``: members whose frames
    lacked the group's label (the scheduler may have taken them out of the job: their
    departure is only known some buckets later); their node alerts are frozen, neither
    opened nor cleared, until the label shows again or they leave. ``state`` is left
    untouched.
    """
    if state.last_bucket_ts is not None and bucket_ts <= state.last_bucket_ts:
        active = active_alerts(state.alerts.values(), group=group, bucket_ts=state.last_bucket_ts)
        return state, BucketResult(group, bucket_ts, {}, (), active, (), stale=True)

    specs = tuple(f for f in features if f.scored)
    names = [f.name for f in specs]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"duplicate feature name(s): {', '.join(dupes)}")

    expected_set = set(expected)
    known = {node for (_, node) in state.alerts if node is not None} | set(state.baselines.nodes)
    populations, composition = step_populations(
        state.populations, frames, expected_set, params.population, known
    )
    # Only the job population is scored; idle nodes are reported, never paged.
    members = sorted(populations.job)
    member_set = set(members)
    ignored = tuple(sorted(n for n in frames if n not in expected_set))
    reporting = [n for n in members if frames.get(n)]
    silent = [n for n in members if not frames.get(n)]

    values = _matrix(frames, reporting, names)
    abs_floor = np.array([f.abs_floor for f in specs], dtype=np.float64)
    rel_floor = np.array([f.rel_floor for f in specs], dtype=np.float64)
    stats = peer_zscores(values, abs_floor, rel_floor, params.min_peers)
    # The job's phase; before any node has been busy (a history that opens in a
    # restart load: GPUs < 50 %, every node still "idle") the whole group's.
    phase = step_phase(state.phase, frames, members or sorted(expected_set), params.phase)
    levels, shifts, held = track_levels(state.levels, names, abs_floor, stats.median, params.shift)
    collapse_only = np.zeros(len(names), dtype=bool)
    if phase.expected:  # a save or a load: expected moves, not the group's usual level
        levels = state.levels
        held, collapse_only = _phase_held(held, specs, params.phase.steady)
        if phase.name == "load" and phase.run == 1:
            # The job (re)started inside this bucket: which side of that instant each
            # node's scrape fell on (offsets spread over the interval) sets its rates and
            # processes, not its health. Hard signatures are judged from the next one
            # (a save's first bucket is judged at once: its dip is too short to mimic one).
            held, collapse_only = held | collapse_only, np.zeros_like(collapse_only)
    moved = held | collapse_only
    z, median = stats.z, stats.median
    if roles:
        z, median = role_peer_stats(
            values, reporting, roles, stats, abs_floor, rel_floor, params.min_peers
        )
    learned = learned_scoring(
        state.baselines,
        state.model,
        state.alerts,
        group,
        members,
        reporting,
        names,
        z,
        moved,
        params.baseline if params.learned_baselines else None,
        params.model if params.multivariate else None,
    )
    residual = learned.residual
    if collapse_only.any():  # no soft evidence on them: a NaN residual gives none
        residual = np.array(z if residual is None else residual, dtype=np.float64)
        residual[:, collapse_only] = np.nan
    moved_names = {names[j] for j in np.flatnonzero(moved).tolist()}
    fused = fuse_bucket(
        nodes=reporting,
        values=values,
        z=z,
        median=median,
        features=specs,
        gpus=gpus,
        silent=silent,
        params=params.fusion,
        held=held,
        residual=residual,
        usual=learned.usual,
        model=learned.judgement,
    )
    step = step_alerts(
        state.alerts,
        observations(
            fused,
            shifts,
            state.alerts,
            regime_check(moved_names, stats.median, names, abs_floor, params.shift),
            members,
            params.max_signals,
            _exporter_gaps(values, stats.present, reporting, names, params),
            composition,
            moved_names if phase.expected else frozenset(),
            on_hold,
        ),
        group=group,
        bucket_ts=bucket_ts,
        params=params.alerts,
        members=member_set,
    )
    new_state = GroupState(
        last_bucket_ts=bucket_ts,
        alerts=step.alerts,
        levels=levels,
        baselines=learned.baselines,
        model=learned.model,
        populations=populations,
        phase=phase,
    )
    verdicts = {n: fused.verdicts[n] for n in members}
    return new_state, BucketResult(
        group=group,
        bucket_ts=bucket_ts,
        verdicts=verdicts,
        changes=step.changes,
        active=step.active,
        group_events=fused.group_events,
        group_shifts=shifts,
        ignored=ignored,
        idle=tuple(sorted(populations.idle)),
        composition=composition,
        phase=phase,
    )


def _phase_held(
    shifted: BoolArray, specs: Sequence[FeatureSpec], steady: Collection[str]
) -> tuple[BoolArray, BoolArray]:
    """A save's or load's holds: (held features, features checked for collapse only).

    The phase moves every feature but the ``steady`` error counters, on every
    node at once, so their node evidence is held like a shift's, but the hard
    collapse signatures stay judged against this bucket's peer median: a node
    whose interrupts or processes collapse while its peers save is still caught.
    """
    moved = shifted | np.array([f.name not in steady for f in specs], dtype=bool)
    collapse = np.array([f.collapse_ratio is not None for f in specs], dtype=bool)
    held: BoolArray = moved & ~collapse
    collapse_only: BoolArray = moved & collapse
    return held, collapse_only


def _exporter_gaps(
    values: FloatArray,
    present: npt.NDArray[np.integer],
    nodes: Sequence[str],
    names: Sequence[str],
    params: ScoringParams,
) -> dict[str, list[str]]:
    """Nodes that report, but lack many features nearly all their peers report.

    One exporter of a node down (dcgm-exporter hung, node_exporter fine) shows
    as missing features, not as a missing frame: it is a silence of its own.
    A feature counts when at least 90 % of the reporting nodes have it; a node
    is gapped when it lacks at least ``gap_min_features`` of those and a fifth
    of them. A node's very first frame lacks its counter rates (no previous
    sample): persistence over ``silent_buckets`` absorbs that.
    """
    if not nodes or not names:
        return {}
    common = present >= max(params.min_peers, 0.9 * len(nodes))
    n_common = int(common.sum())
    if not n_common:
        return {}
    missing = np.isnan(values) & common[None, :]
    counts = missing.sum(axis=1)
    need = max(params.gap_min_features, 0.2 * n_common)
    return {
        nodes[i]: [names[j] for j in np.flatnonzero(missing[i]).tolist()]
        for i in np.flatnonzero(counts >= need).tolist()
    }


def _matrix(
    frames: Mapping[str, Mapping[str, float]], nodes: Sequence[str], names: Sequence[str]
) -> np.ndarray:
    # A missing key becomes NaN. fromiter over one C-level map per node is the
    # cheapest way from dicts to a matrix (this dominates scoring at fleet scale).
    shape = (len(nodes), len(names))
    cells = chain.from_iterable(map(frames[n].get, names, repeat(math.nan)) for n in nodes)
    try:
        return np.fromiter(cells, dtype=np.float64, count=shape[0] * shape[1]).reshape(shape)
    except (TypeError, ValueError):  # a None or numeric string somewhere: the slow, lenient path
        rows = [[frames[n].get(f, math.nan) for f in names] for n in nodes]
        return np.array(rows, dtype=np.float64).reshape(shape)
