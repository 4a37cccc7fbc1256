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
the group's usual levels, below) → residual z against each node's learned
usual z (:mod:`detectors.baseline`) → the group's multivariate model on the
residual vectors (:mod:`detectors.multivariate`) → :func:`detectors.fusion.fuse_bucket`
with the shifted features held → one :class:`detectors.alerts.Observation`
per (family, node) → :func:`detectors.alerts.step_alerts`.

Learned scoring. Real fleets are not one population (the report's 12 light
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

``score_bucket`` does not mutate the state it is given; it returns a new
:class:`GroupState`. Membership is the caller's: frames of nodes outside
``expected`` are ignored (listed in ``BucketResult.ignored``), and alerts of
nodes that left ``expected`` are resolved. A bucket at or before the last one
scored is *stale* (a redelivery after a restart): it changes nothing and only
reports the active alerts, so at-least-once delivery is safe. "Consecutive"
means consecutive calls: call once per closed bucket, with empty ``frames`` if
nothing arrived, so silence keeps counting.

Group-shift guard. Peer z cannot see the whole group move: when a job dies
every node idles together and the median moves with them, so a node that
collapsed a bucket earlier looks like its peers again and its alert would
resolve while it is still broken. The group's own recent history can see it.
Per scored feature, :class:`GroupLevels` keeps the *usual level* of the group
median: an EWMA (weight ``shift_alpha``) folded in only in *calm* buckets, those
in which no feature is shifted. A feature is *shifted* when its median departs
from the usual level by more than ``max(shift_threshold · |level|, abs_floor)``,
either way; once shifted it stays so until it is back within
``shift_release`` (hysteresis: a median hovering at the threshold, such as
``procs_running`` during a restart load, is one shift, not a flicker). While a
feature is shifted:

* its node evidence is *held*: it gives no node evidence, and an open alert
  that rests on it (one of its signals is that feature) gets ``unknown`` — it
  neither advances nor counts toward resolution, so the culprit's Collapse
  stays firing through the job's death and nobody is paged for it;
* the group gets a ``PeerwatchGroupDegraded`` observation naming the shifted
  features ("intr_rate median 50.1 K vs usual 301 K (-83 %)"): soft evidence,
  so a one- or two-bucket checkpoint dip never fires it and a job death does.

Until a feature has folded ``shift_warmup`` consistent buckets into its level
it is never shifted (a median that jumps during warm-up restarts it). A shift
that lasts ``shift_adopt_after`` buckets is the new normal: the level adopts
an EWMA of the shifted medians. The level it left is kept as *home* (through
later adoptions too, until the median comes back to it), and a median back
within the threshold of home ends any shift at once. That is what keeps a
restart quiet: the job dies (idle), ~10 min later it loads its checkpoint for
25-33 min (GPU util < 50 % on every node), then trains again at the old
level. The idle and load buckets are one shift (one group alert), adopted
after ``shift_adopt_after`` buckets; training returns home with no second
alert. A job restarted at a different level is adopted and is normal from
then on. An open alert whose evidence was seen against a peer median that is
not the usual level any more (the culprit's Collapse, seen at 300 K/s, after
a long job death made 50 K/s usual) stays unknown until the group comes back
to that level or the node leaves: a job that stays dead for hours (manual
recovery: median 3.3 h) does not resolve its culprit. Limit: a group whose
history begins during a restart load learns the load level and raises one
group alert when training starts.

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

Why an EWMA gated on the whole bucket rather than a ring of recent medians:
it is one float per feature (plus two counters, and two floats only during or
after a shift), and gating on "no feature shifted" keeps a dip from leaking
into any level — the features that stay within the threshold during a
checkpoint or a restart load (temperature cooling, a slower procs count) would
otherwise drift toward the abnormal value and flag the return to normal.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, repeat
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from detectors.alerts import (
    GROUP_DEGRADED,
    NODE_COLLAPSE,
    NODE_DEVIATION,
    NODE_SILENT,
    AlertChange,
    AlertKey,
    AlertParams,
    AlertState,
    Observation,
    active_alerts,
    step_alerts,
)
from detectors.baseline import BaselineParams, NodeBaselines, update_and_residuals
from detectors.features import FeatureSpec
from detectors.fusion import (
    FusedBucket,
    FusionParams,
    GroupEvent,
    ModelJudgement,
    NodeVerdict,
    Signal,
    fuse_bucket,
)
from detectors.multivariate import GroupModel, MultivariateParams
from detectors.peer import peer_zscores
from detectors.phase import Phase, PhaseParams, step_phase
from detectors.population import (
    Composition,
    PopulationParams,
    Populations,
    role_peer_stats,
    step_populations,
)

__all__ = [
    "BucketResult",
    "GroupLevels",
    "GroupShift",
    "GroupState",
    "ScoringParams",
    "score_bucket",
]

STATE_SCHEMA = 3
# Older states keep their alerts; what they lack starts fresh and warms up again:
# schema 1 had no levels, schema 2 no node baselines and no multivariate model.
_LEGACY_SCHEMAS = (1, 2)
# A median beyond this is no usable level (arithmetic on it could overflow to inf).
_MAX_LEVEL = 1e300

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
ShiftDirection = Literal["up", "down"]


def _is_real(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class ScoringParams:
    """Every knob of group scoring, validated on construction.

    ``min_peers``: present values a feature needs before anyone is scored on it
    (8: a median and MAD of fewer nodes is too easily moved by two bad ones).
    ``z_evidence``/``z_clip``/``top_k``/``score_threshold``/``max_signals``:
    see :class:`detectors.fusion.FusionParams`. ``cluster_fraction``: share of
    present nodes above which a same-direction deviation (or silence) is a
    group event. ``persistence``/``silent_buckets``/``resolve_after``: see
    :class:`detectors.alerts.AlertParams`.

    Group-shift guard (module docstring): ``shift_threshold`` — relative
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

    Learned scoring (module docstring): ``learned_baselines`` — fuse soft
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

    min_peers: int = 8
    # the fusion's and the lifecycle's knobs, flat for settings; their defaults are theirs
    z_evidence: float = FusionParams.z_evidence
    z_clip: float = FusionParams.z_clip
    top_k: int = FusionParams.top_k
    score_threshold: float = FusionParams.score_threshold
    cluster_fraction: float = FusionParams.cluster_fraction
    max_signals: int = FusionParams.max_signals
    persistence: int = AlertParams.persistence
    silent_buckets: int = AlertParams.silent_buckets
    gap_min_features: int = 3
    resolve_after: int = AlertParams.resolve_after
    shift_threshold: float = 0.35
    shift_release: float = 0.25
    shift_alpha: float = 0.1
    shift_warmup: int = 5
    shift_adopt_after: int = 40
    learned_baselines: bool = True
    baseline: BaselineParams = field(default_factory=lambda: BaselineParams(regimes=2))
    multivariate: bool = True
    model: MultivariateParams = field(default_factory=MultivariateParams)
    population: PopulationParams = field(default_factory=PopulationParams)
    phase: PhaseParams = field(default_factory=PhaseParams)

    def __post_init__(self) -> None:
        if isinstance(self.min_peers, bool) or not isinstance(self.min_peers, int):
            raise ValueError(f"min_peers must be an int, got {self.min_peers!r}")
        if self.min_peers < 2:
            raise ValueError(
                f"min_peers must be >= 2 (a node is not its own peer group), got {self.min_peers}"
            )
        # Building the parts validates their fields.
        _ = self.fusion, self.alerts
        if not (_is_real(self.shift_threshold) and self.shift_threshold > 0):
            raise ValueError(
                f"shift_threshold must be finite and > 0, got {self.shift_threshold!r}"
            )
        if not (_is_real(self.shift_release) and 0 < self.shift_release <= self.shift_threshold):
            raise ValueError(
                f"shift_release must be in (0, shift_threshold={self.shift_threshold}], "
                f"got {self.shift_release!r}"
            )
        if not (_is_real(self.shift_alpha) and 0 < self.shift_alpha <= 1):
            raise ValueError(f"shift_alpha must be in (0, 1], got {self.shift_alpha!r}")
        for name in ("shift_warmup", "shift_adopt_after", "gap_min_features"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.shift_adopt_after < self.persistence:
            raise ValueError(
                f"shift_adopt_after ({self.shift_adopt_after}) must be >= persistence "
                f"({self.persistence}): a shift adopted sooner could never fire"
            )
        for name in ("learned_baselines", "multivariate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.baseline, BaselineParams):
            raise ValueError(f"baseline must be a BaselineParams, got {self.baseline!r}")
        if not isinstance(self.model, MultivariateParams):
            raise ValueError(f"model must be a MultivariateParams, got {self.model!r}")
        if not isinstance(self.population, PopulationParams):
            raise ValueError(f"population must be a PopulationParams, got {self.population!r}")
        if not isinstance(self.phase, PhaseParams):
            raise ValueError(f"phase must be a PhaseParams, got {self.phase!r}")

    @cached_property
    def fusion(self) -> FusionParams:
        return FusionParams(
            z_evidence=self.z_evidence,
            z_clip=self.z_clip,
            top_k=self.top_k,
            score_threshold=self.score_threshold,
            cluster_fraction=self.cluster_fraction,
            max_signals=self.max_signals,
        )

    @cached_property
    def alerts(self) -> AlertParams:
        return AlertParams(
            persistence=self.persistence,
            silent_buckets=self.silent_buckets,
            resolve_after=self.resolve_after,
        )


@dataclass(frozen=True)
class GroupLevels:
    """The group's own recent history: per scored feature, the usual level of its median.

    Columnar (one entry per feature that has had a median; the tuples are
    aligned with ``features``) so the state stays small and fast to rebuild.
    ``level``: the usual level. ``seen``: consistent calm buckets folded into
    it, capped at ``shift_warmup`` (below that the feature is warming up and
    never shifted). ``run``: consecutive buckets the feature has been shifted
    (0: not shifted). ``candidate``: EWMA of the medians during the current
    shift, adopted as the level after ``shift_adopt_after`` buckets (None when
    not shifted). ``home``: the level before the first adoption (None unless a
    shift was adopted); a median back near it ends a shift at once.
    """

    features: tuple[str, ...] = ()
    level: tuple[float, ...] = ()
    seen: tuple[int, ...] = ()
    run: tuple[int, ...] = ()
    candidate: tuple[float | None, ...] = ()
    home: tuple[float | None, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.features)
        columns = (self.level, self.seen, self.run, self.candidate, self.home)
        if any(len(c) != n for c in columns):
            raise ValueError("GroupLevels columns must all have one entry per feature")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (every float is finite; "none" is null)."""
        return {
            "features": list(self.features),
            "level": list(self.level),
            "seen": list(self.seen),
            "run": list(self.run),
            "candidate": list(self.candidate),
            "home": list(self.home),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupLevels:
        def level(x: Any) -> float:
            if not (_is_real(x) and abs(x) <= _MAX_LEVEL):
                raise ValueError(f"GroupLevels: level {x!r} is not a usable finite number")
            return float(x)

        def count(x: Any) -> int:
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise ValueError(f"GroupLevels: count {x!r} is not an int >= 0")
            return x

        features = tuple(str(f) for f in data.get("features", ()))
        if len(set(features)) != len(features):
            raise ValueError("GroupLevels: duplicate feature names")
        return cls(
            features=features,
            level=tuple(level(x) for x in data.get("level", ())),
            seen=tuple(count(x) for x in data.get("seen", ())),
            run=tuple(count(x) for x in data.get("run", ())),
            candidate=tuple(None if x is None else level(x) for x in data.get("candidate", ())),
            home=tuple(None if x is None else level(x) for x in data.get("home", ())),
        )


@dataclass(frozen=True)
class GroupShift:
    """A scored feature whose group median left its usual level this bucket (blames no node).

    ``median``: the group median this bucket; ``level``: its usual level
    before this bucket; ``buckets``: consecutive buckets the feature has been
    shifted, this one included.
    """

    feature: str
    direction: ShiftDirection
    median: float
    level: float
    buckets: int

    @property
    def change(self) -> float:
        """Relative change from the usual level (-0.84: 84 % below); ±inf from a level of 0."""
        if self.level == 0:
            return math.copysign(math.inf, self.median)
        return (self.median - self.level) / abs(self.level)

    def describe(self) -> str:
        text = f"{self.feature} median {_compact(self.median)} vs usual {_compact(self.level)}"
        if self.level == 0:
            return f"{text} ({self.direction})"
        return f"{text} ({self.change * 100:+.0f} %)"

    def as_signal(self) -> Signal:
        """The shift as an alert signal: value = group median, median = usual level, no z."""
        return Signal(self.feature, math.nan, self.median, self.level)

    def to_dict(self) -> dict[str, Any]:
        change = self.change
        return {
            "feature": self.feature,
            "direction": self.direction,
            "median": self.median,
            "level": self.level,
            "change": change if math.isfinite(change) else None,
            "buckets": self.buckets,
        }


def _compact(x: float) -> str:
    """3 significant digits with a K/M/G suffix: 301 K, 50.1 K, 7.5, 0.0119."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {suffix}"
    return f"{x:.3g}"


@dataclass(frozen=True, eq=False)
class GroupState:
    """Detector state of one group: last bucket scored, alerts, usual levels, learned models.

    Per-node persistence counters are the ``streak``/``clear_streak`` of the
    alert states; ``levels`` is the group-shift guard's history; ``baselines``
    each member's learned usual z (:mod:`detectors.baseline`); ``model`` the
    group's multivariate model of residual vectors (None until first used).
    Treat as immutable: :func:`score_bucket` copies the model before it learns.

    ``to_dict`` is JSON-safe; ``from_dict`` rebuilds an equal state (equality
    is equality of ``to_dict``) and also reads schemas 1 and 2, starting what
    they lack fresh: levels (schema 1), baselines and model (1 and 2). The
    model's parameters are not stored: ``from_dict`` takes them (default:
    :class:`MultivariateParams`'s) and :func:`score_bucket` re-applies its own
    if they differ.
    """

    last_bucket_ts: int | None = None
    alerts: Mapping[AlertKey, AlertState] = field(default_factory=dict)
    levels: GroupLevels = field(default_factory=GroupLevels)
    baselines: NodeBaselines = field(default_factory=NodeBaselines)
    model: GroupModel | None = None
    populations: Populations = field(default_factory=Populations)
    phase: Phase = field(default_factory=Phase)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupState):
            return NotImplemented
        return self is other or self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable parts: not hashable

    def to_dict(self) -> dict[str, Any]:
        ordered = sorted(self.alerts.values(), key=lambda a: (a.alertname, a.node or ""))
        return {
            "schema": STATE_SCHEMA,
            "last_bucket_ts": self.last_bucket_ts,
            "alerts": [a.to_dict() for a in ordered],
            "levels": self.levels.to_dict(),
            # an empty NodeBaselines (0 regimes) is not a readable to_dict: store none
            "baselines": self.baselines.to_dict() if self.baselines.nodes else None,
            "model": None if self.model is None else self.model.to_dict(),
            "populations": self.populations.to_dict(),
            "phase": self.phase.to_dict(),
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], model_params: MultivariateParams | None = None
    ) -> GroupState:
        schema = data.get("schema")
        if schema != STATE_SCHEMA and schema not in _LEGACY_SCHEMAS:
            raise ValueError(f"unsupported GroupState schema {schema!r} (expected {STATE_SCHEMA})")
        last = data.get("last_bucket_ts")
        alerts = [AlertState.from_dict(a) for a in data.get("alerts", ())]
        levels = data.get("levels") if schema in (2, STATE_SCHEMA) else None
        current = schema == STATE_SCHEMA
        baselines = data.get("baselines") if current else None
        model = data.get("model") if current else None
        populations = data.get("populations") if current else None
        phase = data.get("phase")  # absent in states saved before phases: training
        return cls(
            last_bucket_ts=None if last is None else int(last),
            alerts={a.key: a for a in alerts},
            levels=GroupLevels() if levels is None else GroupLevels.from_dict(levels),
            baselines=NodeBaselines() if baselines is None else NodeBaselines.from_dict(baselines),
            model=(
                None
                if model is None
                else GroupModel.from_dict(model, model_params or MultivariateParams())
            ),
            # states saved before populations: everyone is placed afresh (known nodes as job)
            populations=Populations()
            if populations is None
            else Populations.from_dict(populations),
            phase=Phase() if phase is None else Phase.from_dict(phase),
        )


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
    levels, shifts, held = _track_levels(state.levels, names, abs_floor, stats.median, params)
    collapse_only = np.zeros(len(names), dtype=bool)
    if phase.expected:  # a save or a load: expected moves, not the group's usual level
        levels = state.levels
        held, collapse_only = _phase_held(held, specs, params.phase.steady)
    moved = held | collapse_only
    z, median = stats.z, stats.median
    if roles:
        z, median = role_peer_stats(
            values, reporting, roles, stats, abs_floor, rel_floor, params.min_peers
        )
    learned = _learned_scoring(state, group, members, reporting, names, z, moved, params)
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
        _observations(
            fused,
            shifts,
            state.alerts,
            _regime_check(moved_names, levels, names, abs_floor, params),
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


@dataclass(frozen=True, eq=False)
class _Learned:
    """One bucket of learned scoring: the new baselines and model, and what fusion needs."""

    baselines: NodeBaselines
    model: GroupModel | None
    residual: FloatArray | None  # reporting nodes x features; None: fuse on raw z
    usual: FloatArray | None
    judgement: ModelJudgement | None  # None: the model did not score this bucket


def _learned_scoring(
    state: GroupState,
    group: str,
    members: Sequence[str],
    reporting: Sequence[str],
    names: Sequence[str],
    z: FloatArray,
    held: BoolArray,
    params: ScoringParams,
) -> _Learned:
    """Residuals against each node's usual z, then the group model on them; learn both.

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
    baselines, model = state.baselines, state.model
    residual: FloatArray | None = None
    usual: FloatArray | None = None
    judgement: ModelJudgement | None = None
    if not (params.learned_baselines or params.multivariate) or not reporting:
        return _Learned(baselines, model, residual, usual, judgement)
    streaks: dict[str, int] = {}  # node → the shortest evidence streak of its open alerts
    for (_, node), alert in state.alerts.items():
        if node is not None:
            streaks[node] = min(alert.streak, streaks.get(node, alert.streak))
    calm = np.array([node not in streaks for node in reporting], dtype=bool)
    if params.learned_baselines:
        shifted = bool(held.any())
        regime = min(1, params.baseline.regimes - 1) if shifted else 0
        prior = baselines.retain(members)
        usual = _usual(prior, reporting, names, regime, params.baseline.warmup_buckets)
        learn: BoolArray = (  # one flag per node, or per cell where cells differ
            calm if calm.all() else _learn_mask(calm, streaks, reporting, usual, params)
        )
        if shifted:
            learn = (learn[:, None] if learn.ndim == 1 else learn) & ~held[None, :]
        baselines, residual = update_and_residuals(
            prior, reporting, z, names, learn, params.baseline, regime
        )
    if params.multivariate and not held.any():
        model = _model_for(model, names, group, params.model).copy()
        x = z if residual is None else residual
        scores = model.score_and_learn(x, calm)
        flagged = model.is_anomalous(scores)
        shares = np.full(x.shape, np.nan)
        if flagged.any():  # rare; explained by the model as this bucket left it (display only)
            shares[flagged] = model.explain(x[flagged])
        judgement = ModelJudgement(scores, flagged, shares, params.model.alpha)
    return _Learned(baselines, model, residual, usual, judgement)


def _learn_mask(
    calm: BoolArray,
    streaks: Mapping[str, int],
    reporting: Sequence[str],
    usual: FloatArray,
    params: ScoringParams,
) -> BoolArray:
    """Cells to learn: calm nodes, and the cold cells of nodes alerting for ``adopt_after``."""
    adopt = params.baseline.adopt_after
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


def _track_levels(
    prev: GroupLevels,
    names: Sequence[str],
    abs_floor: FloatArray,
    median: FloatArray,
    params: ScoringParams,
) -> tuple[GroupLevels, tuple[GroupShift, ...], BoolArray]:
    """One bucket of the group-shift guard: (new levels, the shifts, held flag per feature).

    Vectorised over features; a feature without a usable median this bucket
    (too few peers) is left exactly as it was.
    """
    level, seen, run, candidate, home = _level_columns(prev, names)
    thr, alpha = params.shift_threshold, params.shift_alpha
    m = np.asarray(median, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(m) & (np.abs(m) <= _MAX_LEVEL)
    m = np.where(ok, m, 0.0)
    dist = np.abs(m - level)
    enter = np.maximum(thr * np.abs(level), abs_floor)
    stay = np.maximum(params.shift_release * np.abs(level), abs_floor)
    has_home = np.isfinite(home)
    home_v = np.where(has_home, home, 0.0)

    warm = seen >= params.shift_warmup
    fresh = ok & (seen == 0)
    restart = ok & ~warm & ~fresh & (dist > enter)  # warm-up on an inconsistent level
    away = ok & warm & (dist > np.where(run > 0, stay, enter))
    back_home = (
        away & has_home & (np.abs(m - home_v) <= np.maximum(thr * np.abs(home_v), abs_floor))
    )
    shifted = away & ~back_home
    before = level  # what the shifts are reported against

    reset = fresh | restart
    level = np.where(reset, m, np.where(back_home, home_v, level))
    seen = np.where(reset, 1, seen)
    home = np.where(reset | back_home, np.nan, home)
    run = np.where(shifted, run + 1, np.where(ok, 0, run))
    with np.errstate(invalid="ignore"):
        candidate = np.where(
            shifted,
            np.where(run == 1, m, candidate + alpha * (m - candidate)),
            np.where(ok, np.nan, candidate),
        )
    shifts = tuple(
        GroupShift(
            feature=names[j],
            direction="up" if m[j] > before[j] else "down",
            median=float(m[j]),
            level=float(before[j]),
            buckets=int(run[j]),
        )
        for j in np.flatnonzero(shifted).tolist()
    )

    adopt = shifted & (run >= params.shift_adopt_after)
    if adopt.any():
        home = np.where(adopt & ~np.isfinite(home), level, home)  # keep the first home
        level = np.where(adopt, candidate, level)
        run = np.where(adopt, 0, run)
        candidate = np.where(adopt, np.nan, candidate)
    if not shifted.any():  # a calm bucket: fold it into the levels
        fold = ok & ~reset
        level = np.where(fold, level + alpha * (m - level), level)
        seen = np.where(fold, np.minimum(seen + 1, params.shift_warmup), seen)

    kept = np.flatnonzero(seen > 0).tolist()
    new = GroupLevels(
        features=tuple(names[j] for j in kept),
        level=tuple(level[kept].tolist()),
        seen=tuple(seen[kept].tolist()),
        run=tuple(run[kept].tolist()),
        candidate=_optional(candidate[kept]),
        home=_optional(home[kept]),
    )
    return new, shifts, shifted


def _level_columns(
    prev: GroupLevels, names: Sequence[str]
) -> tuple[FloatArray, npt.NDArray[np.int64], npt.NDArray[np.int64], FloatArray, FloatArray]:
    """The stored columns aligned with ``names``: (level, seen, run, candidate, home).

    A feature not stored yet has seen = 0; a None candidate or home becomes NaN.
    """
    level = np.array(prev.level, dtype=np.float64)
    seen = np.array(prev.seen, dtype=np.int64)
    run = np.array(prev.run, dtype=np.int64)
    candidate = np.array(prev.candidate, dtype=np.float64)  # None → NaN
    home = np.array(prev.home, dtype=np.float64)
    if prev.features == tuple(names):  # the usual case: the catalog of the last bucket
        return level, seen, run, candidate, home
    index = {f: i for i, f in enumerate(prev.features)}
    rows = np.array([index.get(name, -1) for name in names], dtype=np.int64)
    have = rows >= 0
    picked = rows[have]
    n = len(names)
    new_level, new_seen, new_run = np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64)
    new_candidate, new_home = np.full(n, np.nan), np.full(n, np.nan)
    new_level[have], new_seen[have], new_run[have] = level[picked], seen[picked], run[picked]
    new_candidate[have], new_home[have] = candidate[picked], home[picked]
    return new_level, new_seen, new_run, new_candidate, new_home


def _optional(values: FloatArray) -> tuple[float | None, ...]:
    return tuple(None if math.isnan(v) else v for v in values.tolist())


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


def _regime_check(
    held: Collection[str],
    levels: GroupLevels,
    names: Sequence[str],
    abs_floor: FloatArray,
    params: ScoringParams,
) -> Callable[[Signal], bool]:
    """Whether a signal of an open alert can no longer be judged against the peers.

    True when its feature is held this bucket (shifted, or moved by a phase), or
    when the alert saw it against a peer median that is not the group's usual
    level now (more than the shift threshold apart): the culprit's Collapse seen
    at 300 K interrupts/s says nothing once a long job death has made 50 K/s the
    usual level. It can be judged again when the group comes back (home) or from
    a new alert.
    """
    thr = params.shift_threshold
    usual: dict[str, tuple[float, float]] = {}  # feature → (level, tolerance), built on first use

    def unjudgeable(signal: Signal) -> bool:
        if signal.feature in held:
            return True
        if not usual:
            floors = dict(zip(names, abs_floor.tolist(), strict=True))
            usual.update(
                (f, (level, max(thr * abs(level), floors[f])))
                for f, level, seen in zip(levels.features, levels.level, levels.seen, strict=True)
                if seen >= params.shift_warmup and f in floors
            )
        level, tolerance = usual.get(signal.feature, (math.nan, math.nan))
        return math.isfinite(signal.median) and abs(signal.median - level) > tolerance

    return unjudgeable


def _observations(
    fused: FusedBucket,
    shifts: Sequence[GroupShift],
    alerts: Mapping[AlertKey, AlertState],
    unjudgeable: Callable[[Signal], bool],
    members: Sequence[str],
    max_signals: int,
    gaps: Mapping[str, Sequence[str]],
    composition: Composition,
    excused: Collection[str] = frozenset(),
    on_hold: Collection[str] = frozenset(),
) -> dict[AlertKey, Observation]:
    unknown = Observation("unknown")
    absent = Observation("absent")

    def clear(key: AlertKey) -> Observation:
        # No evidence on the features judged this bucket. An open alert whose own
        # evidence cannot be judged now is not cleared by that: unknown, frozen.
        prev = alerts.get(key)
        if prev is not None and any(unjudgeable(s) for s in prev.signals):
            return unknown
        return absent

    obs: dict[AlertKey, Observation] = {}
    open_nodes = {node for (_, node) in alerts if node is not None}
    for node in members:
        v = fused.verdicts[node]
        if v.status == "ok" and node not in open_nodes and node not in gaps:
            continue  # nothing present and nothing open: every observation would be a no-op
        if node in on_hold:  # maybe no longer a member: no evidence either way
            for alertname in (NODE_SILENT, NODE_COLLAPSE, NODE_DEVIATION):
                obs[(alertname, node)] = unknown
            continue
        if v.silent:
            silent = (
                unknown if fused.silence_is_group else Observation("present", 1.0, (), v.reason)
            )
            obs[(NODE_SILENT, node)] = silent
            obs[(NODE_COLLAPSE, node)] = unknown
            obs[(NODE_DEVIATION, node)] = unknown
            continue
        gap = gaps.get(node)
        obs[(NODE_SILENT, node)] = (
            Observation(
                "present",
                1.0,
                (),
                f"exporter gap: {len(gap)} features its peers report are missing "
                f"({', '.join(gap[:4])}{', …' if len(gap) > 4 else ''})",
            )
            if gap
            else absent
        )
        if not v.collapse_checked:
            obs[(NODE_COLLAPSE, node)] = unknown
        elif v.collapsed:
            obs[(NODE_COLLAPSE, node)] = Observation(
                "present", v.collapse_strength, v.signals, v.reason
            )
        else:
            obs[(NODE_COLLAPSE, node)] = clear((NODE_COLLAPSE, node))
        if not v.scored:
            obs[(NODE_DEVIATION, node)] = unknown
        elif v.deviating:
            obs[(NODE_DEVIATION, node)] = Observation("present", v.score, v.signals, v.reason)
        else:
            obs[(NODE_DEVIATION, node)] = clear((NODE_DEVIATION, node))
    obs[(GROUP_DEGRADED, None)] = _group_observation(
        fused, shifts, max_signals, composition, excused
    )
    return obs


def _group_observation(
    fused: FusedBucket,
    shifts: Sequence[GroupShift],
    max_signals: int,
    composition: Composition,
    excused: Collection[str] = frozenset(),
) -> Observation:
    """PeerwatchGroupDegraded's evidence: shifted medians first (largest change), then events.

    The score is the share of the group involved: 1 for a shift of the median
    (at least half the group moved), the deviating fraction for an event.
    ``excused``: features a save or load moves; their shifts and events are the
    phase's, no evidence (and no evidence clears an open alert: absent).
    """
    shifts = [s for s in shifts if s.feature not in excused]
    events = [e for e in fused.group_events if e.feature not in excused]
    if not (shifts or events):
        return Observation("absent") if fused.any_reference else Observation("unknown")
    ranked = sorted(shifts, key=lambda s: -abs(s.change))
    widest = sorted(events, key=lambda e: -e.fraction)
    signals = [s.as_signal() for s in ranked] + [e.as_signal() for e in widest]
    score = max([1.0] * bool(shifts) + [e.fraction for e in events])
    parts = [s.describe() for s in ranked] + [e.describe() for e in events]
    reason = "group-level: " + "; ".join(parts) + f" ({composition.describe()})"
    return Observation("present", score, tuple(signals[:max_signals]), reason)
