"""The frame builder as it stood before the hot-path rework (commit 29672ff; bbdc932 algorithm).

Frozen here as the benchmark's baseline: ``bench.ingest_bench`` runs it beside
``streams.ingest.builder.FrameBuilder`` on the same input, in the same process,
and checks that both emit the same frames. Not used by peerwatch itself; do not
optimise it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from detectors.features import FeatureSpec, per_gpu_key
from streams.frames import Frame
from streams.ingest.builder import AddStats, node_from_instance
from streams.ingest.remote_write import is_stale_marker
from streams.ingest.series import Series

__all__ = ["BaselineFrameBuilder"]

SeriesKey = tuple[tuple[str, str], ...]


# --- reductions ---------------------------------------------------------------------------------


def _better(reduce: str, va: float, ga: str | None, vb: float, gb: str | None) -> bool:
    """True if (vb, gb) beats (va, ga) under ``reduce`` (sum counts as max, see module doc).

    Ties go to the smaller GPU id, and a named GPU beats none: a total order, so
    reducing and merging are commutative, associative and idempotent.
    """
    if vb != va:
        return vb < va if reduce == "min" else vb > va
    if gb is None:
        return False
    return ga is None or gb < ga


def _reduce(reduce: str, items: Iterable[tuple[float, str | None]]) -> tuple[float, str | None]:
    if reduce == "sum":
        try:
            return math.fsum(v for v, _ in items), None
        except (OverflowError, ValueError):  # out of the float range: no value (as the builder)
            return math.nan, None
    best_v, best_g = math.nan, None
    first = True
    for v, g in items:
        if first or _better(reduce, best_v, best_g, v, g):
            best_v, best_g, first = v, g, False
    return best_v, best_g


# --- builder state ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Use:
    """One way a metric name feeds a feature."""

    feature: str
    counter: bool
    ratio_part: str | None  # None: the feature's value; "num" / "den": a half of a ``per`` ratio
    match: tuple[tuple[str, str], ...]


class _Partial:
    """An open frame: per-series contributions, reduced only when the frame closes."""

    __slots__ = ("den", "num", "values")

    def __init__(self) -> None:
        # feature -> series key -> (value, gpu); a later sample of the series overwrites.
        self.values: dict[str, dict[SeriesKey, tuple[float, str | None]]] = {}
        # ``per`` features: feature -> pair key (labels without __name__) -> (rate, gpu).
        self.num: dict[str, dict[SeriesKey, tuple[float, str | None]]] = {}
        self.den: dict[str, dict[SeriesKey, float]] = {}


class BaselineFrameBuilder:
    """Turns decoded series into ``Frame``, one per (group, node, bucket).

    ``add`` accumulates, ``close_due`` / ``close_due_by_watermark`` hand out the
    frames whose bucket is over, ``flush_all`` everything (shutdown). State is
    bounded: a series not seen for ``series_ttl_ms`` of event time is forgotten
    (its next sample counts as a first sample), and closed-frame contributions
    kept for reopening are dropped once the bucket is behind the late horizon.
    """

    def __init__(
        self,
        features: Sequence[FeatureSpec],
        node_labels: Sequence[str] = ("instance", "hostname", "Hostname"),
        group_labels: Sequence[str] = ("cluster",),
        bucket_ms: int = 30_000,
        *,
        grace_ms: int = 15_000,
        late_horizon_ms: int = 600_000,
        series_ttl_ms: int = 600_000,
        max_future_ms: int = 300_000,
    ) -> None:
        if not features:
            raise ValueError("a frame builder needs at least one feature")
        names = [spec.name for spec in features]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate feature names in {names}")
        if not node_labels or not group_labels:
            raise ValueError("node_labels and group_labels must name at least one label each")
        if bucket_ms <= 0:
            raise ValueError("bucket_ms must be > 0")
        if min(grace_ms, late_horizon_ms, max_future_ms) < 0 or series_ttl_ms <= 0:
            raise ValueError(
                "grace_ms, late_horizon_ms, max_future_ms must be >= 0 and series_ttl_ms > 0"
            )
        self.features = tuple(features)
        self.node_labels = tuple(node_labels)
        self.group_labels = tuple(group_labels)
        self.bucket_ms = bucket_ms
        self.grace_ms = grace_ms
        self.late_horizon_ms = late_horizon_ms
        self.series_ttl_ms = series_ttl_ms
        self.max_future_ms = max_future_ms

        self._uses: dict[str, tuple[_Use, ...]] = {}
        for spec in self.features:
            match = tuple(sorted(spec.match.items()))
            part = "num" if spec.per is not None else None
            for metric in spec.metrics:
                self._add_use(metric, _Use(spec.name, spec.kind == "counter", part, match))
            if spec.per is not None:
                self._add_use(spec.per, _Use(spec.name, True, "den", match))
        # metric names with a label-matching use: only their series pay for the filter
        self._matched = {m for m, uses in self._uses.items() if any(u.match for u in uses)}
        self._kept = {s.name for s in self.features if s.reduce == "sum" or s.per is not None}

        self._series: dict[SeriesKey, list] = {}  # key -> [last_ts, last value or None]
        self._open: dict[int, dict[tuple[str, str], _Partial]] = {}  # bucket -> (group, node)
        self._closed: dict[int, dict[tuple[str, str], _Partial]] = {}  # kept for reopening
        self._max_ts: int | None = None
        self._last_sweep_ts: int | None = None
        # node -> the group its series last carried (None: in no group), to tell
        # "left the job" from "went silent"; bounded by the number of nodes
        self._group_of_node: dict[str, str | None] = {}
        # id(labels) -> (labels, uses, node, group, series key); holds the dicts so
        # their ids stay unique while memoised
        self._label_memo: dict[int, tuple[Any, ...]] = {}
        self.label_memo_size = 1_000_000
        self._departures: list[Frame] = []
        self._last_add_s: float | None = None  # wall time of the last ``add`` that gave one
        # node -> {"pci_bus_id@<gpu>": bus id}, sent in the frame's ``gpus`` (as the builder)
        self._pci_of: dict[str, dict[str, str]] = {}

    def _add_use(self, metric: str, use: _Use) -> None:
        self._uses[metric] = (*self._uses.get(metric, ()), use)

    # --- public state ---------------------------------------------------------------------------

    @property
    def watermark_ms(self) -> int | None:
        """Newest sample time seen minus ``grace_ms``; None before the first sample."""
        return None if self._max_ts is None else self._max_ts - self.grace_ms

    @property
    def metric_names(self) -> frozenset[str]:
        """Every metric name some feature reads (for ``WriteRequestDecoder(metric_names=...)``)."""
        return frozenset(self._uses)

    @property
    def tracked_series(self) -> int:
        return len(self._series)

    @property
    def open_frames(self) -> int:
        return sum(len(frames) for frames in self._open.values())

    @property
    def kept_frames(self) -> int:
        """Closed frames whose sum / ratio contributions are kept for a late reopen."""
        return sum(len(frames) for frames in self._closed.values())

    def node_of(self, labels: Mapping[str, str]) -> str | None:
        """The first node label present (``instance`` without its port), or None."""
        for name in self.node_labels:
            value = labels.get(name)
            if value:
                return node_from_instance(value) if name == "instance" else value
        return None

    def group_of(self, labels: Mapping[str, str]) -> str | None:
        for name in self.group_labels:
            value = labels.get(name)
            if value:
                return value
        return None

    # --- adding samples -------------------------------------------------------------------------

    def add(self, series: Iterable[Series], now_s: float | None = None) -> AddStats:
        """Account every sample; ``now_s`` (wall clock) marks the stream alive for idle closing."""
        stats = AddStats()
        unknown = 0
        if now_s is not None:
            self._last_add_s = now_s
        uses_of = self._uses.get
        memo = self._label_memo
        for s in series:
            labels = s.labels
            # Decoders and the simulator hand out the same (read-only) label dict
            # for a series every time: resolve its uses, identity and key once.
            seen = memo.get(id(labels))
            if seen is not None and seen[0] is labels:
                _, uses, node, group, key = seen
            else:
                name = labels.get("__name__", "")
                uses = uses_of(name)
                if uses is not None and name in self._matched:
                    uses = tuple(u for u in uses if all(labels.get(k) == v for k, v in u.match))
                node = self.node_of(labels) if uses else None
                group = self.group_of(labels) if uses else None
                key = tuple(sorted(labels.items())) if uses else ()
                if len(memo) >= self.label_memo_size:
                    memo.clear()
                    self._pci_of.clear()
                gpu, pci = labels.get("gpu"), labels.get("pci_bus_id")
                if node is not None and gpu and pci:
                    self._pci_of.setdefault(node, {})[per_gpu_key("pci_bus_id", gpu)] = pci
                memo[id(labels)] = (labels, uses, node, group, key)
            if not uses:
                unknown += len(s.samples)
                continue
            if node is None:
                stats.drop("no_node", len(s.samples))
                continue
            if self._group_of_node.get(node, group) != group and s.samples:
                self._depart(node, group, s.samples[0][0])
            self._group_of_node[node] = group
            if group is None:
                stats.drop("no_group", len(s.samples))
                continue
            self._add_series(key, labels, s.samples, uses, (group, node), now_s, stats)
        stats.drop("unknown_metric", unknown)
        return stats

    def _add_series(
        self,
        key: SeriesKey,
        labels: Mapping[str, str],
        samples: Sequence[tuple[int, float]],
        uses: tuple[_Use, ...],
        frame_key: tuple[str, str],
        now_s: float | None,
        stats: AddStats,
    ) -> None:
        # This runs for every accepted sample: locals instead of attribute lookups.
        pair_key: SeriesKey | None = None
        gpu = labels.get("gpu")
        series_state = self._series
        state = series_state.get(key)
        future_limit = None if now_s is None else int(now_s * 1000) + self.max_future_ms
        bucket_ms = self.bucket_ms
        isfinite = math.isfinite
        for ts, value in samples:
            if future_limit is not None and ts > future_limit:
                stats.drop("future")
                continue
            if not isfinite(value):
                if value != value and is_stale_marker(value):
                    # The series ended: its next sample starts afresh (no rate across the gap).
                    if state is None:
                        state = series_state[key] = [ts, None]
                    else:
                        state[0], state[1] = max(state[0], ts), None
                    self._advance(ts)
                    stats.drop("stale")
                else:
                    stats.drop("non_finite")
                continue
            if state is not None and ts <= state[0]:
                stats.drop("duplicate" if ts == state[0] else "out_of_order")
                continue
            bucket = ts - ts % bucket_ms
            max_ts = self._max_ts
            if (
                max_ts is not None
                and bucket + bucket_ms <= max_ts - self.grace_ms - self.late_horizon_ms
            ):
                stats.drop("late")
                continue
            rate: float | None = None
            if state is None:
                state = series_state[key] = [ts, value]
            else:
                previous_ts, previous_value = state
                if previous_value is not None:
                    # A counter that went down was restarted from 0: all of it is increase.
                    increase = value - previous_value if value >= previous_value else value
                    rate = increase * 1000.0 / (ts - previous_ts)
                state[0], state[1] = ts, value
            if max_ts is None or ts > max_ts:
                self._max_ts = ts
            stats.accepted += 1

            partial = self._partial(bucket, frame_key)
            for use in uses:
                contribution = rate if use.counter else value
                if contribution is None:
                    continue
                if use.ratio_part is None:
                    partial.values.setdefault(use.feature, {})[key] = (contribution, gpu)
                    continue
                if pair_key is None:
                    pair_key = tuple(kv for kv in key if kv[0] != "__name__")
                if use.ratio_part == "num":
                    partial.num.setdefault(use.feature, {})[pair_key] = (contribution, gpu)
                else:
                    partial.den.setdefault(use.feature, {})[pair_key] = contribution

    def _depart(self, node: str, new_group: str | None, ts: int) -> None:
        old = self._group_of_node[node]
        if old is not None:
            bucket = ts - ts % self.bucket_ms
            self._departures.append(Frame(old, node, bucket, {}, {}, left=True))

    def _advance(self, ts: int) -> None:
        if self._max_ts is None or ts > self._max_ts:
            self._max_ts = ts

    def _partial(self, bucket: int, frame_key: tuple[str, str]) -> _Partial:
        frames = self._open.get(bucket)
        if frames is None:
            frames = self._open[bucket] = {}
        partial = frames.get(frame_key)
        if partial is None:
            kept = self._closed.get(bucket)
            partial = kept.pop(frame_key, None) if kept else None
            if partial is None:
                partial = _Partial()
            frames[frame_key] = partial
        return partial

    # --- closing frames -------------------------------------------------------------------------

    def close_due(
        self, watermark_ms: int | None, now_s: float | None = None, idle_s: float | None = None
    ) -> list[Frame]:
        """Frames whose bucket ended at or before ``watermark_ms`` -- and every open frame
        when (given ``now_s`` and ``idle_s``) no ``add`` came for ``idle_s`` seconds: the
        stream stopped (the builder's rule since per-node membership). They are forgotten
        here.

        Frames that end up with no value (only first counter samples) are not returned.
        """
        stopped = (
            now_s is not None
            and idle_s is not None
            and self._last_add_s is not None
            and now_s - self._last_add_s >= idle_s
        )
        due: list[tuple[int, tuple[str, str], _Partial]] = []
        for bucket in list(self._open):
            if stopped or (watermark_ms is not None and bucket + self.bucket_ms <= watermark_ms):
                due.extend((bucket, fk, p) for fk, p in self._open.pop(bucket).items())
        out = self._emit(due)
        out.extend(self._departures)
        self._departures.clear()
        self._forget_old()
        return out

    def close_due_by_watermark(
        self, now_s: float | None = None, idle_s: float | None = None
    ) -> list[Frame]:
        """``close_due`` at the builder's own watermark."""
        return self.close_due(self.watermark_ms, now_s, idle_s)

    def flush_all(self) -> list[Frame]:
        """Every open frame (shutdown); the builder keeps its per-series state."""
        due = [(b, fk, p) for b, frames in self._open.items() for fk, p in frames.items()]
        self._open.clear()
        out = self._emit(due)
        out.extend(self._departures)
        self._departures.clear()
        return out

    def _emit(self, due: list[tuple[int, tuple[str, str], _Partial]]) -> list[Frame]:
        out: list[Frame] = []
        due.sort(key=lambda item: (item[0], item[1]))
        for bucket, (group, node), partial in due:
            values, gpus = self._reduce_partial(partial)
            if values:
                gpus.update(self._pci_of.get(node, {}))
                out.append(Frame(group, node, bucket, values, gpus))
            self._keep_for_reopen(bucket, (group, node), partial)
        return out

    def _reduce_partial(self, partial: _Partial) -> tuple[dict[str, float], dict[str, str]]:
        values: dict[str, float] = {}
        gpus: dict[str, str] = {}
        for spec in self.features:
            items: Iterable[tuple[float, str | None]]
            if spec.per is None:
                contributions = partial.values.get(spec.name)
                if not contributions:
                    continue
                items = contributions.values()
            else:
                num = partial.num.get(spec.name)
                den = partial.den.get(spec.name)
                if not num or not den:
                    continue
                items = [
                    (n / d, g)
                    for pk, (n, g) in num.items()
                    if (d := den.get(pk)) is not None and d > 0
                ]
                if not items:
                    continue
            if spec.per_gpu:
                for v, g in items:
                    if g is not None and math.isfinite(v):
                        values[per_gpu_key(spec.name, g)] = v
                continue
            value, gpu = _reduce(spec.reduce, items)
            if math.isfinite(value):
                values[spec.name] = value
                if gpu is not None and spec.reduce != "sum":
                    gpus[spec.name] = gpu
        return values, gpus

    def _keep_for_reopen(self, bucket: int, frame_key: tuple[str, str], partial: _Partial) -> None:
        """Keep what a reopened frame needs to emit complete sums and ratios (module doc)."""
        kept = _Partial()
        kept.values = {f: c for f, c in partial.values.items() if f in self._kept}
        kept.num, kept.den = partial.num, partial.den
        if kept.values or kept.num or kept.den:
            self._closed.setdefault(bucket, {})[frame_key] = kept

    def _forget_old(self) -> None:
        """Drop kept contributions behind the late horizon and series not seen for the TTL."""
        watermark = self.watermark_ms
        if watermark is None or self._max_ts is None:
            return
        horizon = watermark - self.late_horizon_ms
        for bucket in [b for b in self._closed if b + self.bucket_ms <= horizon]:
            del self._closed[bucket]
        # Sweeping every series is O(n): do it a few times per TTL, not per call.
        if self._last_sweep_ts is None:
            self._last_sweep_ts = self._max_ts
        elif self._max_ts - self._last_sweep_ts >= max(self.series_ttl_ms // 4, self.bucket_ms):
            cutoff = self._max_ts - self.series_ttl_ms
            stale = [k for k, state in self._series.items() if state[0] < cutoff]
            for k in stale:
                del self._series[k]
            self._last_sweep_ts = self._max_ts
