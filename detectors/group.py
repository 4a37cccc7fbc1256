"""Score one closed bucket of one peer group: the single entry point.

The Faust worker and the offline evaluator/backtest both call
:func:`score_bucket`, so what is measured offline is what runs live::

    state = GroupState()
    for bucket in buckets:                       # in bucket order, every closed bucket
        state, result = score_bucket(state, group, bucket.ts, bucket.frames, bucket.gpus,
                                     bucket.expected, features, params)
        send(result.changes)                     # transitions; re-send result.active

Steps: frames of the expected members → nodes x features matrix (missing =
NaN) → :func:`detectors.peer.peer_zscores` → :func:`detectors.fusion.fuse_bucket`
→ one :class:`detectors.alerts.Observation` per (family, node) →
:func:`detectors.alerts.step_alerts`.

``score_bucket`` does not mutate the state it is given; it returns a new
:class:`GroupState`. Membership is the caller's: frames of nodes outside
``expected`` are ignored (listed in ``BucketResult.ignored``), and alerts of
nodes that left ``expected`` are resolved. A bucket at or before the last one
scored is *stale* (a redelivery after a restart): it changes nothing and only
reports the active alerts, so at-least-once delivery is safe. "Consecutive"
means consecutive calls: call once per closed bucket, with empty ``frames`` if
nothing arrived, so silence keeps counting.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, repeat
from typing import Any

import numpy as np

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
from detectors.features import FeatureSpec
from detectors.fusion import FusedBucket, FusionParams, GroupEvent, NodeVerdict, fuse_bucket
from detectors.peer import peer_zscores

__all__ = ["BucketResult", "GroupState", "ScoringParams", "score_bucket"]

STATE_SCHEMA = 1


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
    """

    min_peers: int = 8
    z_evidence: float = 4.0
    z_clip: float = 10.0
    top_k: int = 3
    score_threshold: float = 8.0
    cluster_fraction: float = 0.3
    max_signals: int = 5
    persistence: int = 3
    silent_buckets: int = 2
    resolve_after: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.min_peers, bool) or not isinstance(self.min_peers, int):
            raise ValueError(f"min_peers must be an int, got {self.min_peers!r}")
        if self.min_peers < 2:
            raise ValueError(
                f"min_peers must be >= 2 (a node is not its own peer group), got {self.min_peers}"
            )
        # Building the parts validates their fields.
        _ = self.fusion, self.alerts

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
class GroupState:
    """Detector state of one group: the last bucket scored and the pending/firing alerts.

    Per-node persistence counters are the ``streak``/``clear_streak`` of the
    alert states. Treat as immutable. ``to_dict`` is JSON-safe; ``from_dict``
    rebuilds an equal state.
    """

    last_bucket_ts: int | None = None
    alerts: Mapping[AlertKey, AlertState] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        ordered = sorted(self.alerts.values(), key=lambda a: (a.alertname, a.node or ""))
        return {
            "schema": STATE_SCHEMA,
            "last_bucket_ts": self.last_bucket_ts,
            "alerts": [a.to_dict() for a in ordered],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupState:
        schema = data.get("schema")
        if schema != STATE_SCHEMA:
            raise ValueError(f"unsupported GroupState schema {schema!r} (expected {STATE_SCHEMA})")
        last = data.get("last_bucket_ts")
        alerts = [AlertState.from_dict(a) for a in data.get("alerts", ())]
        return cls(
            last_bucket_ts=None if last is None else int(last),
            alerts={a.key: a for a in alerts},
        )


@dataclass(frozen=True)
class BucketResult:
    """What one bucket produced.

    ``verdicts``: one per expected node (silent ones included). ``changes``:
    alert transitions to send now. ``active``: every firing alert after this
    bucket (re-send while firing). ``group_events``: features that moved as a
    group this bucket. ``ignored``: nodes that sent frames but are not expected.
    ``stale``: the bucket was not newer than the last one scored and changed
    nothing.
    """

    group: str
    bucket_ts: int
    verdicts: Mapping[str, NodeVerdict]
    changes: tuple[AlertChange, ...]
    active: tuple[AlertChange, ...]
    group_events: tuple[GroupEvent, ...]
    ignored: tuple[str, ...] = ()
    stale: bool = False


def score_bucket(
    state: GroupState,
    group: str,
    bucket_ts: int,
    frames: Mapping[str, Mapping[str, float]],
    gpus: Mapping[str, Mapping[str, str]],
    expected: Collection[str],
    features: Sequence[FeatureSpec],
    params: ScoringParams,
) -> tuple[GroupState, BucketResult]:
    """Score one closed bucket of ``group``; returns ``(new_state, result)``.

    ``frames[node]`` holds the node's feature values (absent = missing; a
    node with no frame or an empty one is silent this bucket);
    ``gpus[node][feature]`` the GPU behind a feature; ``expected`` the members
    that should have reported; ``features`` the catalog (unscored specs are
    ignored). ``state`` is left untouched.
    """
    if state.last_bucket_ts is not None and bucket_ts <= state.last_bucket_ts:
        active = active_alerts(state.alerts.values(), group=group, bucket_ts=state.last_bucket_ts)
        return state, BucketResult(group, bucket_ts, {}, (), active, (), stale=True)

    specs = tuple(f for f in features if f.scored)
    names = [f.name for f in specs]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"duplicate feature name(s): {', '.join(dupes)}")

    members = sorted(set(expected))
    member_set = set(members)
    ignored = tuple(sorted(n for n in frames if n not in member_set))
    reporting = [n for n in members if frames.get(n)]
    silent = [n for n in members if not frames.get(n)]

    values = _matrix(frames, reporting, names)
    stats = peer_zscores(
        values,
        np.array([f.abs_floor for f in specs], dtype=np.float64),
        np.array([f.rel_floor for f in specs], dtype=np.float64),
        params.min_peers,
    )
    fused = fuse_bucket(
        nodes=reporting,
        values=values,
        z=stats.z,
        median=stats.median,
        features=specs,
        gpus=gpus,
        silent=silent,
        params=params.fusion,
    )
    step = step_alerts(
        state.alerts,
        _observations(fused, members, params.max_signals),
        group=group,
        bucket_ts=bucket_ts,
        params=params.alerts,
        members=member_set,
    )
    new_state = GroupState(last_bucket_ts=bucket_ts, alerts=step.alerts)
    verdicts = {n: fused.verdicts[n] for n in members}
    return new_state, BucketResult(
        group=group,
        bucket_ts=bucket_ts,
        verdicts=verdicts,
        changes=step.changes,
        active=step.active,
        group_events=fused.group_events,
        ignored=ignored,
    )


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


def _observations(
    fused: FusedBucket, members: Sequence[str], max_signals: int
) -> dict[AlertKey, Observation]:
    unknown = Observation("unknown")
    absent = Observation("absent")
    obs: dict[AlertKey, Observation] = {}
    for node in members:
        v = fused.verdicts[node]
        if v.silent:
            silent = (
                unknown if fused.silence_is_group else Observation("present", 1.0, (), v.reason)
            )
            obs[(NODE_SILENT, node)] = silent
            obs[(NODE_COLLAPSE, node)] = unknown
            obs[(NODE_DEVIATION, node)] = unknown
            continue
        obs[(NODE_SILENT, node)] = absent
        if not v.collapse_checked:
            obs[(NODE_COLLAPSE, node)] = unknown
        elif v.collapsed:
            obs[(NODE_COLLAPSE, node)] = Observation(
                "present", v.collapse_strength, v.signals, v.reason
            )
        else:
            obs[(NODE_COLLAPSE, node)] = absent
        if not v.scored:
            obs[(NODE_DEVIATION, node)] = unknown
        elif v.deviating:
            obs[(NODE_DEVIATION, node)] = Observation("present", v.score, v.signals, v.reason)
        else:
            obs[(NODE_DEVIATION, node)] = absent
    events = fused.group_events
    if events:
        widest = sorted(events, key=lambda e: -e.fraction)[:max_signals]
        obs[(GROUP_DEGRADED, None)] = Observation(
            "present",
            widest[0].fraction,
            tuple(e.as_signal() for e in widest),
            "group-level: " + "; ".join(e.describe() for e in events),
        )
    elif fused.any_reference:
        obs[(GROUP_DEGRADED, None)] = absent
    else:
        obs[(GROUP_DEGRADED, None)] = unknown
    return obs
