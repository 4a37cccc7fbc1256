"""The backtest's figures, gathered one scored bucket at a time in bounded memory.

``Accumulator(known_events, bucket_ms)``; ``.add(scored)`` for every
:class:`~streams.worker.pipeline.Scored` the pipeline closes (``.add_advice`` for an
advisor's :class:`~detectors.vocabulary.Advice` from elsewhere); ``.result()`` is one
JSON-safe dict with stable keys (:data:`RESULT_KEYS`, below). What it keeps
grows with the alerts, fail-slow episodes, distinct advice and groups × nodes ×
``max_columns`` heatmap cells, never with the number of buckets.

The definitions are the evaluator's (:mod:`detectors.episodes`), with a known
event at ``t`` as a fault whose onset and XID are both ``t``:

* alert transitions become episodes per group and (alertname, node), flaps
  within ``refire_merge_buckets`` merged; re-sent active alerts add nothing;
* an event naming a node is *found* when a node-level alert on that node fires
  in ``fault_window`` = [b(t) − L·B, b(t) + T·B]; ``buckets_to_event`` =
  (first firing − b(t)) / B; ``before``: < 0, an alert in an earlier bucket than
  the event's (a precursor: the source's "before the XID"); ``at_or_before``:
  <= 0 (the evaluator's ``at_or_before_xid``); ``lead_s`` = (b(t) − first) / 1000.
  An event naming only a group is found by any alert of that group in the window;
* a *false alert* is a node-level episode whose first firing lies in no
  ``explained_window`` = [b(t) − L·B, b(end) + A·B] of a known event on its node
  (``end``: the event's ``end_ms``, else ``t``)
  (group-level episodes are counted apart); per group-day = per node-day × 60
  (:data:`~detectors.episodes.GROUP_NODES`), and per UTC day as counts.

Events outside the scored span ``[start_ms, end_ms)`` are listed, not counted.
:data:`HISTORY_WINDOWS` are the defaults: a labelled XID time on real data is
exact but the precursor is not, so an hour before it counts (the evaluator's
lookback is 0 because a simulation has nothing before its onset).

Result keys: ``schema``, ``bucket_ms``, ``start_ms``/``end_ms`` (None before any
bucket), ``buckets`` (scored buckets), ``windows``; ``groups`` (per group its
``nodes``, ``node_days``, ``heatmap`` — ``width_ms``, ``start_ms``, ``columns``,
``nodes``, ``scores`` [node][column] the max fused peer score, None where
unscored — and ``markers``, known events and XID alerts with their column);
``alerts`` (the timeline: one row per episode); ``lead_time`` (``events``,
``found``, ``before``, ``at_or_before``, ``headline``, ``by_kind``, ``rows``);
``false_alerts`` (``count``, ``node_days``, ``group_days``, ``per_group_day``,
``by_group``, ``episodes``); ``failslow`` (one row per episode of confirmed
slowdown); ``advice`` (``source``, ``items``: each distinct advice
with its first and last bucket and count, the latest in full).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from detectors.episodes import (
    DAY_MS,
    GROUP_NODES,
    AlertEpisode,
    AlertEvent,
    ScoringWindows,
    alert_episodes,
    bucket_of,
    explained_window,
    fault_window,
)
from detectors.families import XID_ALERT
from detectors.vocabulary import Advice
from streams.backtest.events import EventsFileError, KnownEvent, load_events
from streams.worker.pipeline import Scored

__all__ = [
    "HISTORY_WINDOWS",
    "RESULT_KEYS",
    "SCHEMA",
    "Accumulator",
    "EventsFileError",
    "KnownEvent",
    "load_events",
]

SCHEMA = "peerwatch.backtest.summary/1"
RESULT_KEYS = (
    "schema",
    "bucket_ms",
    "start_ms",
    "end_ms",
    "buckets",
    "windows",
    "groups",
    "alerts",
    "lead_time",
    "false_alerts",
    "failslow",
    "advice",
)
HISTORY_WINDOWS = ScoringWindows(
    lookback_buckets=120, tolerance_buckets=2, aftermath_buckets=5, refire_merge_buckets=10
)
# Heatmap column widths (ms), each a multiple of the one before, so columns merge exactly.
_MINUTE = 60_000
_WIDTHS = tuple(
    m * _MINUTE for m in (1, 5, 15, 30, 60, 120, 360, 720, 1440, 2880, 10_080, 20_160, 40_320)
)


class _Heatmap:
    """Max score per node and column; columns widen (and merge) to stay within ``max_columns``.

    Rows are float32 arrays (NaN: no score), so a group costs nodes × ``max_columns``
    × 4 bytes whatever the span.
    """

    def __init__(self, bucket_ms: int, max_columns: int) -> None:
        self.width_ms = bucket_ms
        self.max_columns = max_columns
        self.first: int | None = None  # column index (ts // width) of rows[*][0]
        self.rows: dict[str, array[float]] = {}

    @property
    def columns(self) -> int:
        return max((len(r) for r in self.rows.values()), default=0)

    def add(self, ts: int, scores: Mapping[str, float]) -> None:
        if self.first is None:
            self.first = ts // self.width_ms
        while True:
            col = ts // self.width_ms
            lo, hi = min(self.first, col), max(self.first + self.columns - 1, col)
            if hi - lo < self.max_columns:
                break
            self._widen()
        if col < self.first:  # a bucket older than the first column: shift every row
            pad = self.first - col
            for node, old in self.rows.items():
                self.rows[node] = array("f", [math.nan] * pad) + old
            self.first = col
        i = col - self.first
        for node, score in scores.items():
            row = self.rows.setdefault(node, array("f"))
            if len(row) <= i:
                row.extend([math.nan] * (i + 1 - len(row)))
            if math.isfinite(score) and not score <= row[i]:  # NaN compares False
                row[i] = score

    def _widen(self) -> None:
        old = self.width_ms
        new = next((w for w in _WIDTHS if w > old and w % old == 0), old * 2)
        assert self.first is not None
        first = self.first * old // new
        for node, row in self.rows.items():
            merged = array("f", [math.nan] * ((self.first + len(row) - 1) * old // new - first + 1))
            for i, v in enumerate(row):
                j = (self.first + i) * old // new - first
                if not v <= merged[j]:
                    merged[j] = v
            self.rows[node] = merged
        self.width_ms, self.first = new, first

    def cells(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def to_dict(self) -> dict[str, Any]:
        nodes = sorted(self.rows)
        n = self.columns
        return {
            "width_ms": self.width_ms,
            "start_ms": None if self.first is None else self.first * self.width_ms,
            "columns": n,
            "max_columns": self.max_columns,
            "nodes": nodes,
            "scores": [
                [None if math.isnan(v) else round(float(v), 2) for v in self.rows[node]]
                + [None] * (n - len(self.rows[node]))
                for node in nodes
            ],
        }


@dataclass
class _SlowEpisode:
    group: str
    start_ts: int
    last_ts: int
    buckets: int = 1
    magnitude: float = 0.0
    culprits: list[str] = field(default_factory=list)
    klass: str | None = None
    stage: str | None = None
    loss_gpu_s: float = 0.0
    end_ts: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "start_ts": self.start_ts,
            "end_ts": self.end_ts,
            "buckets": self.buckets,
            "max_magnitude": round(self.magnitude, 4),
            "culprits": list(self.culprits),
            "klass": self.klass,
            "stage": self.stage,
            "loss_gpu_s": round(self.loss_gpu_s, 1),
        }


@dataclass
class _Group:
    heat: _Heatmap
    node_buckets: int = 0
    events: list[AlertEvent] = field(default_factory=list)
    slow: _SlowEpisode | None = None


@dataclass
class _AdviceSeen:
    first_ts: int
    last_ts: int
    count: int
    latest: Advice


class Accumulator:
    """Feed every scored bucket of a backtest to :meth:`add`; :meth:`result` is the summary."""

    def __init__(
        self,
        known_events: Iterable[KnownEvent],
        bucket_ms: int,
        *,
        windows: ScoringWindows = HISTORY_WINDOWS,
        max_columns: int = 1000,
    ) -> None:
        if bucket_ms <= 0:
            raise ValueError(f"bucket_ms must be > 0, got {bucket_ms}")
        if max_columns < 2:
            raise ValueError(f"max_columns must be >= 2, got {max_columns}")
        self.known_events = sorted(known_events, key=lambda e: (e.ts_ms, e.node or "", e.kind))
        self.bucket_ms = bucket_ms
        self.windows = windows
        self.max_columns = max_columns
        self.buckets = 0
        self.start_ms: int | None = None
        self.end_ms: int | None = None
        self.groups: dict[str, _Group] = {}
        self.slow_done: list[_SlowEpisode] = []
        self.advice: dict[tuple[str, str, str, str | None, str | None], _AdviceSeen] = {}

    def _group(self, name: str) -> _Group:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = _Group(_Heatmap(self.bucket_ms, self.max_columns))
        return g

    def add(self, scored: Scored) -> None:
        """Take one scored bucket (an ``ended`` one brings only its resolutions)."""
        g = self._group(scored.bucket.group)
        g.events.extend(AlertEvent.from_change(c) for c in scored.changes)
        for advice in scored.advice:
            self.add_advice(advice)
        if scored.ended is not None:
            self._close_slow(g, scored.bucket.ts)
            return
        ts = scored.bucket.ts
        self.buckets += 1
        self.start_ms = ts if self.start_ms is None else min(self.start_ms, ts)
        end = ts + self.bucket_ms
        self.end_ms = end if self.end_ms is None else max(self.end_ms, end)
        verdicts = scored.result.verdicts
        g.node_buckets += len(verdicts)
        g.heat.add(ts, {node: v.score for node, v in verdicts.items()})
        if scored.failslow is not None:
            self._step_slow(g, scored.bucket.group, ts, scored)

    def _step_slow(self, g: _Group, group: str, ts: int, scored: Scored) -> None:
        verdict = scored.failslow
        assert verdict is not None
        if not verdict.slow:
            self._close_slow(g, ts)
            return
        ep = g.slow
        if ep is None:
            ep = g.slow = _SlowEpisode(group, ts, ts, buckets=0)
        ep.last_ts = ts
        ep.buckets += 1
        ep.magnitude = max(ep.magnitude, abs(verdict.change.magnitude))
        loc = verdict.localisation
        if loc is not None:
            ep.klass = loc.klass
            ep.culprits += [c.node for c in loc.culprits if c.node not in ep.culprits]
        ep.stage = max(ep.stage or verdict.advice.stage, verdict.advice.stage)
        ep.loss_gpu_s = max(ep.loss_gpu_s, verdict.advice.loss_gpu_s)

    def _close_slow(self, g: _Group, ts: int) -> None:
        if g.slow is not None:
            g.slow.end_ts = ts
            self.slow_done.append(g.slow)
            g.slow = None

    def add_advice(self, advice: Advice) -> None:
        """Take one advice (``add`` takes those on a Scored; an advisor fed from elsewhere, e.g.
        job events, calls this); the same advice again only counts and moves its last bucket."""
        key = (advice.advisor, advice.kind, advice.group, advice.node, advice.action)
        seen = self.advice.get(key)
        if seen is None:
            self.advice[key] = _AdviceSeen(advice.bucket_ts, advice.bucket_ts, 1, advice)
            return
        seen.first_ts = min(seen.first_ts, advice.bucket_ts)
        seen.count += 1
        if advice.bucket_ts >= seen.last_ts:
            seen.last_ts, seen.latest = advice.bucket_ts, advice

    def held(self) -> dict[str, int]:
        """How much is kept (heatmap cells, alert transitions, episodes, advice): for tests."""
        return {
            "heatmap_cells": sum(g.heat.cells() for g in self.groups.values()),
            "alert_transitions": sum(len(g.events) for g in self.groups.values()),
            "failslow_episodes": len(self.slow_done)
            + sum(g.slow is not None for g in self.groups.values()),
            "advice": len(self.advice),
        }

    # ---- the summary

    def result(self) -> dict[str, Any]:
        B, w = self.bucket_ms, self.windows
        episodes = {
            name: alert_episodes(g.events, w.refire_merge_buckets * B)
            for name, g in self.groups.items()
        }
        node_eps = [(name, ep) for name, eps in episodes.items() for ep in eps if ep.node]
        rows = [self._outcome(e, episodes, node_eps) for e in self.known_events]
        false = self._false_alerts(node_eps)
        return {
            "schema": SCHEMA,
            "bucket_ms": B,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "buckets": self.buckets,
            "windows": {
                "lookback_buckets": w.lookback_buckets,
                "tolerance_buckets": w.tolerance_buckets,
                "aftermath_buckets": w.aftermath_buckets,
                "refire_merge_buckets": w.refire_merge_buckets,
            },
            "groups": {
                name: self._group_dict(name, g, episodes[name])
                for name, g in sorted(self.groups.items())
            },
            "alerts": [
                _episode_dict(name, ep)
                for name, ep in sorted(
                    ((n, ep) for n, eps in episodes.items() for ep in eps),
                    key=lambda x: (x[1].fired_ts, x[0], x[1].alertname, x[1].node or ""),
                )
            ],
            "lead_time": _lead_time(rows),
            "false_alerts": false,
            "failslow": [
                ep.to_dict()
                for ep in sorted(
                    [*self.slow_done, *(g.slow for g in self.groups.values() if g.slow)],
                    key=lambda ep: (ep.start_ts, ep.group),
                )
            ],
            "advice": {
                "source": "Scored.advice and add_advice",
                "items": [
                    {
                        "first_ts": s.first_ts,
                        "last_ts": s.last_ts,
                        "count": s.count,
                        **s.latest.to_dict(),
                    }
                    for s in sorted(
                        self.advice.values(),
                        key=lambda s: (s.first_ts, s.latest.group, s.latest.advisor),
                    )
                ],
            },
        }

    def _in_span(self, ts: int) -> bool:
        return (
            self.start_ms is not None
            and self.end_ms is not None
            and (self.start_ms <= ts < self.end_ms)
        )

    def _outcome(
        self,
        e: KnownEvent,
        episodes: Mapping[str, Sequence[AlertEpisode]],
        node_eps: Sequence[tuple[str, AlertEpisode]],
    ) -> dict[str, Any]:
        B = self.bucket_ms
        start, deadline = fault_window(e.ts_ms, e.ts_ms, self.windows, B)
        if e.node is not None:
            candidates = [ep for _, ep in node_eps if ep.node == e.node]
        else:
            candidates = list(episodes.get(e.group or "", ()))
        matches = sorted(
            (f.ts, ep.alertname, ep.node)
            for ep in candidates
            for f in ep.firings
            if start <= f.ts <= deadline
        )
        first = matches[0] if matches and self._in_span(e.ts_ms) else None
        to_event = None if first is None else (first[0] - bucket_of(e.ts_ms, B)) // B
        return {
            **e.to_dict(),
            "in_range": self._in_span(e.ts_ms),
            "window_start_ts": start,
            "deadline_ts": deadline,
            "found": first is not None,
            "first_alert_ts": None if first is None else first[0],
            "first_alertname": None if first is None else first[1],
            "first_alert_node": None if first is None else first[2],
            "buckets_to_event": to_event,
            "before": to_event is not None and to_event < 0,
            "at_or_before": to_event is not None and to_event <= 0,
            "lead_s": None if to_event is None else -to_event * B / 1000.0,
        }

    def _false_alerts(self, node_eps: Sequence[tuple[str, AlertEpisode]]) -> dict[str, Any]:
        explained: dict[str, list[tuple[int, int]]] = {}
        for e in self.known_events:
            if e.node is not None:
                end = e.ts_ms if e.end_ms is None else e.end_ms
                window = explained_window(e.ts_ms, end, self.windows, self.bucket_ms)
                explained.setdefault(e.node, []).append(window)
        false = [
            (name, ep)
            for name, ep in node_eps
            if not any(a <= ep.fired_ts <= b for a, b in explained.get(ep.node or "", ()))
        ]
        by_group: dict[str, Any] = {}
        for name, g in sorted(self.groups.items()):
            mine = [ep for n, ep in false if n == name]
            node_days = g.node_buckets * self.bucket_ms / DAY_MS
            by_day: dict[str, int] = {}
            for ep in mine:
                day = _day(ep.fired_ts)
                by_day[day] = by_day.get(day, 0) + 1
            by_group[name] = {
                "count": len(mine),
                "node_days": node_days,
                "group_days": node_days / GROUP_NODES,
                "per_group_day": _rate(len(mine), node_days / GROUP_NODES),
                "by_day": dict(sorted(by_day.items())),
            }
        node_days = sum(g["node_days"] for g in by_group.values())
        return {
            "count": len(false),
            "node_days": node_days,
            "group_days": node_days / GROUP_NODES,
            "per_group_day": _rate(len(false), node_days / GROUP_NODES),
            "group_nodes": GROUP_NODES,
            "by_group": by_group,
            "episodes": [_episode_dict(name, ep) for name, ep in false],
        }

    def _group_dict(self, name: str, g: _Group, episodes: Sequence[AlertEpisode]) -> dict[str, Any]:
        heat = g.heat.to_dict()
        width, first = heat["width_ms"], heat["start_ms"]
        span_end = None if first is None else first + heat["columns"] * width
        markers: list[dict[str, Any]] = []

        def column(ts: int) -> int | None:
            if first is None or span_end is None or not first <= ts < span_end:
                return None
            return (ts - first) // width

        for e in self.known_events:
            mine = e.group == name or (e.group is None and e.node in g.heat.rows)
            if mine and column(e.ts_ms) is not None:
                markers.append(
                    {
                        "ts_ms": e.ts_ms,
                        "node": e.node,
                        "kind": e.kind,
                        "source": "known",
                        "column": column(e.ts_ms),
                    }
                )
        for ep in episodes:
            if ep.alertname == XID_ALERT and column(ep.fired_ts) is not None:
                markers.append(
                    {
                        "ts_ms": ep.fired_ts,
                        "node": ep.node,
                        "kind": XID_ALERT,
                        "source": "alert",
                        "column": column(ep.fired_ts),
                    }
                )
        markers.sort(key=lambda m: (m["ts_ms"], m["node"] or "", m["source"] != "known"))
        return {
            "nodes": heat["nodes"],
            "node_days": g.node_buckets * self.bucket_ms / DAY_MS,
            "heatmap": heat,
            "markers": markers,
        }


def _episode_dict(group: str, ep: AlertEpisode) -> dict[str, Any]:
    return {
        "group": group,
        "alertname": ep.alertname,
        "node": ep.node,
        "fired_ts": ep.fired_ts,
        "resolved_ts": ep.resolved_ts,
        "firings": len(ep.firings),
        "severity": "critical" if ep.critical else "warning",
        "gpu": next((f.gpu for f in ep.firings if f.gpu), None),
        "class": next((f.fault_class for f in ep.firings if f.fault_class), None),
    }


def _lead_time(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    counted = [r for r in rows if r["in_range"]]
    by_kind: dict[str, dict[str, int]] = {}
    for r in counted:
        k = by_kind.setdefault(r["kind"], {"events": 0, "found": 0, "before": 0})
        k["events"] += 1
        k["found"] += r["found"]
        k["before"] += r["before"]
    n = len(counted)
    found = sum(r["found"] for r in counted)
    before = sum(r["before"] for r in counted)
    return {
        "events": n,
        "found": found,
        "before": before,
        "at_or_before": sum(r["at_or_before"] for r in counted),
        "out_of_range": len(rows) - n,
        "headline": f"{found}/{n} found, {before}/{n} before the event" if n else None,
        "by_kind": dict(sorted(by_kind.items())),
        "rows": list(rows),
    }


def _rate(num: int, den: float) -> float | None:
    return num / den if den else None


def _day(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d")
