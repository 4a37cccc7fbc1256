"""Frame building: Prometheus series in, one frame per (group, node, 30-s bucket) out.

Pure bookkeeping -- no I/O and no clock; event time comes from the samples and
wall time only as ``now_s`` arguments. The feature catalog
(``detectors.features.FeatureSpec``) says which series matter and how:

- gauges: the series' last value in the bucket;
- counters: a per-second rate between consecutive samples of one series,
  reset-safe (a drop means the process restarted from 0), placed in the bucket
  of the later sample; the first sample of a series gives no rate;
- ``per`` features: rate(metric) / rate(per) over the pair of series whose labels
  agree except ``__name__``; a zero denominator gives no value, never inf;
- several series of one node (GPUs, mounts) reduce with ``spec.reduce``; for
  max / min the winning series' ``gpu`` label is kept so an alert names the GPU.

A sample's bucket is its scrape's round (``streams.ingest.scrape_phase``): each
target's phase in the interval is learned, so scrape jitter near a bucket edge
never empties one bucket and doubles the next. A node's peer group is decided
per node from any of its series (see ``FrameBuilder``), and is sticky. Replicas
of an HA Prometheus pair are reduced to one (``streams.ingest.ha``).

Buckets close when the builder's watermark -- the newest sample time seen minus
``grace_ms`` -- passes their end. In a continuous stream that is the only way:
a node's targets are scraped at different offsets (node_exporter at +2 s,
dcgm-exporter at +25 s), and closing a node's frame because *it* was quiet for
a while would split it into partials the worker may score before the second
arrives. Only when the whole stream stops (no ``add`` for ``idle_s`` of wall
time; give it at least a bucket plus the grace) is everything open closed. A
sample for a bucket that already closed opens a fresh
*partial* frame for it; the worker merges frames of one (node, bucket) with
``streams.frames.merge_frames``. Only samples whose bucket ended more than ``late_horizon_ms``
before the watermark are dropped as late.

Merging and sum features
------------------------
Merging max / min partials is exact: the max of maxima over any split of the
series is the max over all of them, and applying it twice changes nothing. A sum
is not: two partials may hold disjoint series, so adding them double-counts a
resent frame and taking the larger loses the smaller part. peerwatch keeps merge
idempotent (``max`` for sum features, because a resent or replayed frame must
not change anything) and makes the *builder* emit complete sums instead: after a
frame closes, the builder keeps its per-series contributions to sum features (and
the numerator / denominator halves of ``per`` ratios, which have the same
problem) until the bucket falls behind the late horizon. A late sample reopens
the frame *with* them, so the re-emitted sum covers every series seen so far.
Contributions are rates or gauges >= 0 and a reopened frame only adds series, so
the newer sum is the larger one and ``max`` picks it. Limits: a sum is complete
only when all of a node's series pass through one builder -- as counter rates
need anyway (a rate needs the series' previous sample) -- so each Prometheus
must send to one ingest replica (sticky routing, not a round-robin balancer).
And if one series is sampled twice in a bucket across a reopen, merge keeps the
larger of its two values rather than the last.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from detectors.features import DEFAULT_BUCKET_MS, FeatureSpec, per_gpu_key
from streams.catalog import features_for
from streams.frames import Frame
from streams.gc_pause import gc_paused
from streams.ingest.ha import HaTracker
from streams.ingest.remote_write import is_stale_marker
from streams.ingest.scrape_phase import ScrapePhases, ScrapeTarget
from streams.ingest.series import SampleBatch, Series

if TYPE_CHECKING:
    from streams.settings import Settings

try:  # the compiled per-sample loop of ``add_batch`` (native/); ``_add_pairs`` is the reference
    from peerwatch_native import AddKernel as _AddKernel
except ImportError:  # pragma: no cover - not installed, or a build before AddKernel
    _AddKernel = None

KERNEL_AVAILABLE = _AddKernel is not None
"""True if the compiled loop is installed (built by ``pip install .`` where cargo is on PATH)."""

__all__ = [
    "DROP_REASONS",
    "AddStats",
    "FrameBuilder",
    "node_from_instance",
]

DROP_REASONS = (
    "unknown_metric",  # no feature uses the series (name unknown, or labels fail ``match``)
    "no_node",  # none of the node labels present
    "no_group",  # none of the group labels present: not in a job, not scored against peers
    "non_finite",  # NaN / +-Inf that is not a stale marker
    "stale",  # stale marker: the series ended (consumed, no value)
    "duplicate",  # same series, same timestamp as already seen (a resent request)
    "out_of_order",  # older than the series' newest sample
    "late",  # the bucket ended more than late_horizon_ms before the watermark
    "future",  # more than max_future_ms ahead of now_s (a skewed clock must not move time)
    "ha_replica",  # from an HA Prometheus replica that is not its cluster's elected one
    # cardinality guards: a new series / node / group member past its limit (existing go on)
    "series_limit",  # the node already has max_series_per_node series
    "node_limit",  # max_nodes nodes are tracked already
    "group_limit",  # the group it would join has max_nodes_per_group nodes
    "feature_limit",  # the series would add a feature key past its group's max_features_per_group
)


@dataclass(slots=True)
class AddStats:
    """What one ``FrameBuilder.add`` call did with its samples."""

    accepted: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str, n: int = 1) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())


def node_from_instance(instance: str) -> str:
    """``instance`` without its ``:port``: ``host:9100`` -> ``host``, ``[::1]:9100`` -> ``::1``.

    A bare IPv6 address (several colons, no brackets) has no port to strip.
    """
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    host, sep, port = instance.rpartition(":")
    if sep and ":" not in host and port.isdigit():
        return host
    return instance


# --- reductions ---------------------------------------------------------------------------------


def _reduce(reduce: str, items: Iterable[tuple[float, str | None]]) -> tuple[float, str | None]:
    """Fold ``items`` with ``reduce``: ``streams.frames``' tie order written out (a hot path)."""
    if reduce == "sum":
        try:
            return math.fsum(v for v, _ in items), None
        except (OverflowError, ValueError):  # a partial sum past 1e308, or inf + -inf
            return math.nan, None
    it = iter(items)
    first = next(it, None)
    if first is None:
        return math.nan, None
    best_v, best_g = first
    if reduce == "min":
        for v, g in it:
            if v != best_v:
                if v < best_v:
                    best_v, best_g = v, g
            elif g is not None and (best_g is None or g < best_g):
                best_v, best_g = v, g
    else:
        for v, g in it:
            if v != best_v:
                if v > best_v:
                    best_v, best_g = v, g
            elif g is not None and (best_g is None or g < best_g):
                best_v, best_g = v, g
    return best_v, best_g


# --- builder state ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Use:
    """One way a metric name feeds a feature."""

    feature: str
    counter: bool
    ratio_part: str | None  # None: the feature's value; "num" / "den": a half of a ``per`` ratio
    match: tuple[tuple[str, str], ...]


# A series' identity: its sorted (name, value) pairs, NUL-joined into one string --
# a string caches its hash, and the hot path stores every contribution under its
# series key, where a tuple of pairs would be rehashed each time. Label sets with
# a NUL inside a name or value (legal, never seen) keep the tuple: no string equals it.
SeriesKey = str | tuple[tuple[str, str], ...]


def _series_key(items: Sequence[tuple[str, str]]) -> SeriesKey:
    """The key of the series whose sorted label pairs are ``items``."""
    key = "\x00".join(map("\x00".join, items))
    if key.count("\x00") != 2 * len(items) - 1:
        return tuple(items)
    return key


class _Partial:
    """An open frame: per-series contributions, reduced only when the frame closes.

    ``parts`` holds one dict per contribution slot (``FrameBuilder`` numbers them):
    a feature's values or the numerator of its ``per`` ratio, each keyed by series
    key -> (value, gpu) -- a later sample of the series overwrites -- and the
    denominators of ``per`` ratios, keyed by pair key (labels without
    ``__name__``) -> rate.
    """

    __slots__ = ("group", "node", "on_hold", "parts")

    def __init__(self, slots: int, group: str, node: _Node) -> None:
        self.parts: list[dict[SeriesKey, Any]] = [{} for _ in range(slots)]
        self.group = group  # decided per node and bucket: a move in the bucket moves it
        self.node = node
        self.on_hold = False  # set when the node leaves ``group`` after holding this bucket


_ASSIGNED_RANK = -1  # a scheduler's assignment ranks above the first of ``group_labels``


class _Node:
    """A node's membership, and the partial its samples went to last in this ``add``.

    ``group`` came from the label at ``rank`` in ``group_labels`` (``rank`` is
    ``len(group_labels)`` while the node is in no group); ``held`` is the newest
    bucket in which one of its series carried that label, ``since`` the bucket
    it joined in. Series of one node arrive together and nearly always into one
    bucket, so the open partial is looked up once per node and call.
    """

    __slots__ = (
        "assigned",
        "bucket",
        "call",
        "group",
        "held",
        "name",
        "parts",
        "pending",
        "rank",
        "role",
        "series",
        "since",
    )

    def __init__(self, name: str, rank: int) -> None:
        self.name = name
        self.series = 0  # entries in the builder's series state (``max_series_per_node``)
        self.group: str | None = None
        self.rank = rank
        self.held = self.since = -(1 << 62)
        self.role: str | None = None
        # while in no group: (bucket, series) of the current bucket, replayed if a later
        # series of the node names its group in that bucket
        self.pending: list[tuple[int, Series]] | None = None
        self.assigned: str | None = None  # the scheduler's job for the node (``assign``)
        self.call = -1  # the ``add`` call that filled ``bucket`` / ``parts``
        self.bucket = 0
        self.parts: list[dict[SeriesKey, Any]] = []


# What ``FrameBuilder`` resolves once per label dict (``_label_memo``): the dict itself
# (to pin its id), the node (None: unknown metric or no node; then ``key`` says which
# drop), the series key, its ``gpu`` label, the slots it writes to -- values (gauges),
# rates (counters), ratio numerators, ratio denominators -- its pair key, its scrape
# target, the rank and value of its group label (rank ``len(group_labels)``: none),
# its role label's value, and its HA (cluster, replica) or None.
_Resolved = tuple[
    Mapping[str, str],
    _Node | None,
    SeriesKey,
    str | None,
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    SeriesKey,
    ScrapeTarget,
    int,
    str | None,
    str | None,
    tuple[str, str] | None,
]
_NO_SLOTS: tuple[int, ...] = ()
_LABELS_SAMPLES = attrgetter("labels", "samples")
_Pair = tuple[dict[str, str], Sequence[tuple[int, float]]]  # a series' labels and samples
_MAX_PENDING = 4096  # series a node in no group may hold for its bucket
_NO_SCRAPE = ScrapeTarget()  # the scrape target of series that add nothing
_Slots = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


class FrameBuilder:
    """Turns decoded series into ``Frame``, one per (group, node, bucket).

    ``add`` accumulates, ``close_due`` / ``close_due_by_watermark`` hand out the
    frames whose bucket is over, ``flush_all`` everything (shutdown). State is
    bounded: a series not seen for ``series_ttl_ms`` of event time is forgotten
    (its next sample counts as a first sample), and closed-frame contributions
    kept for reopening are dropped once the bucket is behind the late horizon.

    Membership is per node: exporters label unevenly (dcgm-exporter puts a
    scheduler's ``hpc_job`` on GPU series only, node_exporter carries none), so
    the highest-priority ``group_labels`` label seen on *any* of a node's series
    names its group, and series without one inherit it. It is sticky: the node
    leaves (a ``left`` frame for the old group) only when none of its series
    carried the group's label for ``membership_hold_buckets`` buckets -- the XID
    in the scrape where the dying job's label vanished still belongs to that job
    -- or at once when a series names another job (or a higher-priority label
    shows). A move inside a bucket moves the node's whole frame of that bucket.
    A series without a group label for a node in no group waits for the rest of
    its bucket (a later series of the node may name the group: then it joins);
    when the node's next bucket starts without one, it drops as ``no_group``.
    ``role_labels`` work alike: the last role any series named sticks to the node.
    A scheduler's word (``assign``, fed by ``streams.ingest.membership``)
    outranks every label: an assigned node is in its job whatever its series say.

    ``add`` is the ingest's hot path (design target: >= 350,000 samples/s on one
    core). Everything a label dict implies -- its uses, node, group label, scrape
    target, series key, GPU and the contribution slots it writes -- is resolved
    once per dict (the decoders and the simulator hand out the same dict for a
    series every time), membership and phase once per series, and the open
    partial once per node and call; a sample then costs a state lookup, a rate
    and a dict store per use.
    """

    def __init__(
        self,
        features: Sequence[FeatureSpec],
        node_labels: Sequence[str] = ("instance", "hostname", "Hostname"),
        group_labels: Sequence[str] = ("cluster",),
        bucket_ms: int = DEFAULT_BUCKET_MS,
        *,
        grace_ms: int = 15_000,
        late_horizon_ms: int = 600_000,
        series_ttl_ms: int = 600_000,
        max_future_ms: int = 300_000,
        membership_hold_buckets: int = 2,
        role_labels: Sequence[str] = (),
        replica_labels: Sequence[str] = ("prometheus_replica", "__replica__"),
        ha_cluster_labels: Sequence[str] = ("cluster",),
        ha_failover_ms: int = 60_000,
        max_series_per_node: int = 20_000,
        max_nodes: int = 200_000,
        max_nodes_per_group: int = 5_000,
        max_features_per_group: int = 2_000,
        native: bool | None = None,
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
        if membership_hold_buckets < 0:
            raise ValueError("membership_hold_buckets must be >= 0")
        if min(max_series_per_node, max_nodes, max_nodes_per_group, max_features_per_group) <= 0:
            raise ValueError(
                "max_series_per_node, max_nodes, max_nodes_per_group, max_features_per_group "
                "must be > 0"
            )
        # Cardinality guards, checked only where a series / node / membership is created:
        # what is tracked keeps flowing, what is new past a limit drops (counted).
        self.max_series_per_node = max_series_per_node
        self.max_nodes = max_nodes
        self.max_nodes_per_group = max_nodes_per_group
        # a group's frame keys: the catalog's features, per-GPU ones once per ``gpu`` label
        # value (a label of unbounded values would otherwise widen every peer matrix)
        self.max_features_per_group = max_features_per_group
        self.features = tuple(features)
        self.node_labels = tuple(node_labels)
        self.group_labels = tuple(group_labels)
        self.bucket_ms = bucket_ms
        self.grace_ms = grace_ms
        self.late_horizon_ms = late_horizon_ms
        self.series_ttl_ms = series_ttl_ms
        self.max_future_ms = max_future_ms
        self.membership_hold_buckets = membership_hold_buckets
        self.role_labels = tuple(role_labels)
        self.replica_labels = frozenset(replica_labels)
        self.ha_cluster_labels = tuple(ha_cluster_labels)
        self.phases = ScrapePhases(bucket_ms)
        self.ha = HaTracker(ha_failover_ms)
        self._no_group_rank = len(self.group_labels)

        # Contribution slots: feature i's values (or its ratio's numerators) in slot i,
        # the denominators of the k-th ``per`` feature in slot len(features) + k.
        self._slot: dict[str, int] = {spec.name: i for i, spec in enumerate(self.features)}
        self._den_slot: dict[str, int] = {}
        for spec in self.features:
            if spec.per is not None:
                self._den_slot[spec.name] = len(self.features) + len(self._den_slot)
        self._slot_count = len(self.features) + len(self._den_slot)
        # slot -> (feature name, per_gpu): the frame key a series writing the slot adds
        self._slot_feature = [(spec.name, spec.per_gpu) for spec in self.features]
        self._slot_feature += [self._slot_feature[self._slot[n]] for n in self._den_slot]
        # (name, slot, denominator slot or -1, reduce, gpu -> frame key if per_gpu else None),
        # in catalog order
        self._reducers: tuple[tuple[str, int, int, str, dict[str, str] | None], ...] = tuple(
            (
                spec.name,
                i,
                self._den_slot.get(spec.name, -1),
                spec.reduce,
                {} if spec.per_gpu else None,
            )
            for i, spec in enumerate(self.features)
        )
        # the slots whose contributions a closed frame keeps for a reopen (module doc)
        self._kept_slots = tuple(
            sorted(
                {i for i, s in enumerate(self.features) if s.reduce == "sum" or s.per is not None}
                | set(self._den_slot.values())
            )
        )

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
        self._slots_by_name = {
            m: self._slots_of(uses) for m, uses in self._uses.items() if m not in self._matched
        }

        self._series: dict[SeriesKey, list] = {}  # series key -> [last_ts, last value or None]
        self._open: dict[int, dict[str, _Partial]] = {}  # bucket -> node -> open frame
        # closed frames' group and sum / ratio slots [(slot, contributions)], kept for reopening
        self._closed: dict[int, dict[str, tuple[str, list[tuple[int, dict]]]]] = {}
        self._max_ts: int | None = None
        self._last_sweep_ts: int | None = None
        # node name -> membership; scrape target -> phase. Both forgotten after
        # series_ttl_ms without a sample (issue 9: 1 M distinct nodes must not pile up).
        self._nodes: dict[str, _Node] = {}
        self._assigned: dict[str, str] = {}  # node -> the scheduler's job (``assign``)
        self._group_nodes: dict[str, int] = {}  # group -> nodes in it (``max_nodes_per_group``)
        # group -> frame keys its series write (``max_features_per_group``); rebuilt from the
        # live series at each sweep, so a key frees when its last series expires
        self._group_features: dict[str, set[str]] = {}
        self._feature_keys: dict[tuple[_Slots, str | None], frozenset[str]] = {}
        self._scrapes: dict[tuple[str, str, str], ScrapeTarget] = {}
        # id(labels) -> _Resolved; holds the dicts so their ids stay unique while memoised
        self._label_memo: dict[int, _Resolved] = {}
        self.label_memo_size = 1_000_000
        self._last_add_s: float | None = None  # wall time of the last ``add`` that gave one
        self._keys: dict[tuple[tuple[str, str], ...], SeriesKey] = {}  # sorted labels -> key
        self._calls = 0
        self._departures: list[Frame] = []
        self._replay: list[Series] = []  # see ``_move``
        self._replay_dropped = 0
        # node -> {"pci_bus_id@<gpu>": bus id}: dcgm-exporter's label next to ``gpu``, sent in
        # the frame's ``gpus`` so the worker can put a kernel-log XID (bus id) on its GPU index
        self._pci_of: dict[str, dict[str, str]] = {}
        # features left out of emitted frames, by reason (counted here, not per ``add``)
        self.dropped_results: dict[str, int] = {}
        if native and _AddKernel is None:
            raise RuntimeError(
                "the compiled loop (peerwatch_native) is not installed: "
                "it builds with peerwatch where cargo is on PATH"
            )
        self._kernel = _AddKernel() if _AddKernel is not None and native is not False else None

    def _add_use(self, metric: str, use: _Use) -> None:
        self._uses[metric] = (*self._uses.get(metric, ()), use)

    # --- public state ---------------------------------------------------------------------------

    @property
    def watermark_ms(self) -> int | None:
        """Newest sample time seen minus ``grace_ms``; None before the first sample."""
        return None if self._max_ts is None else self._max_ts - self.grace_ms

    @property
    def bucket_due(self) -> bool:
        """Whether the watermark has passed the end of an open bucket: ``close_due_by_watermark``
        has frames to give now."""
        watermark = self.watermark_ms
        return (
            watermark is not None
            and bool(self._open)
            and min(self._open) + self.bucket_ms <= watermark
        )

    @property
    def metric_names(self) -> frozenset[str]:
        """Every metric name some feature reads (for ``WriteRequestDecoder(metric_names=...)``)."""
        return frozenset(self._uses)

    @property
    def tracked_series(self) -> int:
        return len(self._series)

    @property
    def tracked_nodes(self) -> int:
        return len(self._nodes)

    @property
    def open_frames(self) -> int:
        return sum(len(frames) for frames in self._open.values())

    @property
    def open_buckets(self) -> tuple[int, int] | None:
        """(oldest, newest) bucket holding an open frame; None when no frame is open.

        A sample is filed by its scrape's round, which may be the bucket after the one its
        timestamp falls in, and only ever into an open frame: right after an ``add`` the
        newest open bucket bounds every bucket its samples went to, and once the oldest
        open bucket is past that bound all of them have been handed out by a close
        (``streams.ingest.wal`` retires its segments by this).
        """
        if not self._open:
            return None
        return min(self._open), max(self._open)

    @property
    def kept_frames(self) -> int:
        """Closed frames whose sum / ratio contributions are kept for a late reopen."""
        return sum(len(frames) for frames in self._closed.values())

    def scrape_phases(self) -> list[tuple[str, str, str, str, int]]:
        """Every scrape target's learnt phase: (instance, job, HA replica, node, shift).

        ``restore_scrape_phases`` in another builder makes it file a target's samples into
        the rounds this one does, instead of learning the phase afresh from whichever
        sample it sees first (a replay of the write-ahead log).
        """
        phases = []
        for key, target in self._scrapes.items():
            if target.shift is not None:
                instance, job, replica = key
                phases.append((instance, job, replica, target.node, target.shift))
        return phases

    def restore_scrape_phases(self, phases: Iterable[Sequence[str | int]]) -> None:
        """Take the phases ``scrape_phases`` gave (of a killed process: before any ``add``).
        A target that sends nothing is forgotten as any quiet target is."""
        for instance, job, replica, node, shift in phases:
            key = (str(instance), str(job), str(replica))
            if key not in self._scrapes:
                target = self._scrapes[key] = ScrapeTarget(str(node))
                target.shift = int(shift)

    def node_of(self, labels: Mapping[str, str]) -> str | None:
        """The first node label present (``instance`` without its port), or None."""
        for name in self.node_labels:
            value = labels.get(name)
            if value:
                return node_from_instance(value) if name == "instance" else value
        return None

    def group_label(self, labels: Mapping[str, str]) -> tuple[int, str | None]:
        """(rank in ``group_labels``, value) of the first group label present, else
        (``len(group_labels)``, None)."""
        for rank, name in enumerate(self.group_labels):
            value = labels.get(name)
            if value:
                return rank, value
        return self._no_group_rank, None

    # --- adding samples -------------------------------------------------------------------------

    def add(self, series: Iterable[Series], now_s: float | None = None) -> AddStats:
        """Account every sample; ``now_s`` (wall clock) marks the stream alive for idle closing."""
        return self._add(map(_LABELS_SAMPLES, series), now_s)

    def add_batch(
        self, batch: SampleBatch | Iterable[Series], now_s: float | None = None
    ) -> AddStats:
        """``add`` for what ``WriteRequestDecoder.decode_batch`` gives. A ``SampleBatch``
        goes through the compiled loop (``native/``'s ``AddKernel``) where installed: it
        takes the samples whose outcome is plain and stops before any other, which
        ``_add_pairs`` -- the reference -- then takes alone, in order. Without it, the
        columns go to ``_add_pairs`` as (labels, ((ts, value),)) pairs zipped in C."""
        if not isinstance(batch, SampleBatch):
            return self.add(batch, now_s)
        # No collection while the body's objects are made (a pass every 700 of them only
        # promotes them): the collector runs after, on its own schedule -- as the
        # compiled decoder does for the objects it makes.
        with gc_paused():
            if self._kernel is None:
                ts, values = batch.timestamps.tolist(), batch.values.tolist()
                samples = zip(zip(ts, values, strict=True), strict=True)
                return self._add(zip(batch.labels, samples, strict=True), now_s)
            return self._add_columns(batch, now_s)

    def _add_columns(self, batch: SampleBatch, now_s: float | None) -> AddStats:
        """``_add`` of a batch: the compiled loop, and ``_add_pairs`` for each sample it
        leaves (a new series, a target's new round, a node's first sample of the call, a
        drop, a membership move ...)."""
        stats, call = self._begin_add(now_s)
        labels, ts, values = batch.labels, batch.timestamps, batch.values
        if ts.dtype != np.int64 or not ts.flags.c_contiguous:
            ts = np.ascontiguousarray(ts, np.int64)
        if values.dtype != np.float64 or not values.flags.c_contiguous:
            values = np.ascontiguousarray(values, np.float64)
        future_limit = None if now_s is None else int(now_s * 1000) + self.max_future_ms
        hold_ms = self.membership_hold_buckets * self.bucket_ms
        late_lag = self.grace_ms + self.late_horizon_ms + self.bucket_ms
        run = cast(Any, self._kernel).run
        memo, series_state, open_frames = self._label_memo, self._series, self._open
        phase = (self.bucket_ms, self.phases.low, self.phases.high)
        accepted = unknown = 0
        i, n = 0, len(labels)
        while True:
            i, end, self._max_ts, taken, skipped = run(
                labels, ts, values, i, memo, series_state, open_frames, call,
                self._max_ts, future_limit, hold_ms, late_lag, phase,
            )  # fmt: skip
            accepted += taken
            unknown += skipped
            if i >= n:
                break
            pairs: Iterable[_Pair]
            if end == i + 1:
                pairs = ((labels[i], ((int(ts[i]), float(values[i])),)),)
            else:  # a run the Python loop takes whole (a node in no group)
                samples = zip(ts[i:end].tolist(), values[i:end].tolist(), strict=True)
                pairs = zip(labels[i:end], zip(samples, strict=True), strict=True)
            taken, skipped = self._add_pairs(pairs, stats, call, now_s)
            accepted += taken
            unknown += skipped
            i = end
        return self._finish_add(stats, accepted, unknown, now_s)

    def _add(self, pairs: Iterable[_Pair], now_s: float | None) -> AddStats:
        """``add`` over (labels, samples) pairs."""
        stats, call = self._begin_add(now_s)
        accepted, unknown = self._add_pairs(pairs, stats, call, now_s)
        return self._finish_add(stats, accepted, unknown, now_s)

    def _begin_add(self, now_s: float | None) -> tuple[AddStats, int]:
        """A new ``add`` call: its stats and its number (``_Node.call``)."""
        self._calls += 1
        if now_s is not None:
            self._last_add_s = now_s
        return AddStats(), self._calls

    def _add_pairs(
        self, pairs: Iterable[_Pair], stats: AddStats, call: int, now_s: float | None
    ) -> tuple[int, int]:
        """Account (labels, samples) pairs in ``add`` call ``call``: (accepted, unknown_metric)."""
        # This runs for every sample: locals instead of attribute lookups, and the
        # rare outcomes (drops, stale markers, a node changing group, a target off
        # its phase, HA replicas) off the main line.
        accepted = unknown = 0
        memo_get = self._label_memo.get
        series_state = self._series
        state_of = series_state.get
        isfinite = math.isfinite
        bucket_ms = self.bucket_ms
        phases = self.phases
        hold_ms = self.membership_hold_buckets * bucket_ms
        future_limit = math.inf if now_s is None else int(now_s * 1000) + self.max_future_ms
        # a sample is late if bucket + bucket_ms <= max_ts - grace_ms - late_horizon_ms
        late_lag = self.grace_ms + self.late_horizon_ms + bucket_ms
        max_ts: float = -math.inf if self._max_ts is None else self._max_ts
        latest_late_bucket = max_ts - late_lag
        for labels, samples in pairs:
            # Decoders and the simulator hand out the same (read-only) label dict
            # for a series every time: resolve everything it implies once.
            seen = memo_get(id(labels))
            if seen is None or seen[0] is not labels:
                seen = self._resolve(labels)
            (
                _,
                node,
                key,
                gpu,
                value_slots,
                rate_slots,
                num_slots,
                den_slots,
                pair,
                scrape,
                rank,
                group_value,
                role,
                ha,
            ) = seen
            if node is None:  # then key is the drop reason, "" for unknown_metric
                if key:
                    stats.drop(cast(str, key), len(samples))
                else:
                    unknown += len(samples)
                continue
            if not samples:
                continue
            ts0 = samples[0][0]
            if ha is not None and not self.ha.accepts(ha[0], ha[1], samples[-1][0]):
                stats.drop("ha_replica", len(samples))
                continue
            # the round of the series' first sample (a scrape's series share its
            # timestamp: one comparison), then membership
            bucket0 = scrape.bucket if scrape.lo <= ts0 <= scrape.hi else phases.bucket(scrape, ts0)
            if node.assigned is not None:  # the scheduler's word outranks every label
                rank, group_value = _ASSIGNED_RANK, node.assigned
            node_rank = node.rank
            move = False
            if rank == node_rank:
                if group_value != node.group:
                    move = True  # another job: at once
                elif bucket0 > node.held:
                    node.held = bucket0
            elif rank < node_rank or bucket0 - node.held > hold_ms:
                # a label that outranks the node's, or the node's label not seen for the hold
                move = True
            if move and not self._move(node, rank, group_value, bucket0):
                stats.drop("group_limit", len(samples))
                continue
            if role is not None and role != node.role:
                node.role = role
            if node.group is None:  # a later series of the node may still name its group
                self._hold_groupless(node, Series(labels, list(samples)), bucket0, stats)
                continue
            state = state_of(key)
            for ts, value in samples:
                if ts > future_limit:
                    stats.drop("future")
                    continue
                if not isfinite(value):
                    if value != value and is_stale_marker(value):
                        # The series ended: its next sample starts afresh (no rate across the gap).
                        if state is None:
                            created = self._new_series(node, key, ts, None, seen)
                            if isinstance(created, str):  # the limit that refused it
                                stats.drop(created)
                                continue
                            state = created
                        else:
                            state[0], state[1] = max(state[0], ts), None
                        if ts > max_ts:
                            max_ts = self._max_ts = ts
                            latest_late_bucket = ts - late_lag
                        stats.drop("stale")
                    else:
                        stats.drop("non_finite")
                    continue
                if state is not None and ts <= state[0]:
                    stats.drop("duplicate" if ts == state[0] else "out_of_order")
                    continue
                if ts == ts0:
                    bucket = bucket0
                elif scrape.lo <= ts <= scrape.hi:
                    bucket = scrape.bucket
                else:
                    bucket = phases.bucket(scrape, ts)
                if bucket <= latest_late_bucket:
                    stats.drop("late")
                    continue
                rate: float | None = None
                if state is None:
                    created = self._new_series(node, key, ts, value, seen)
                    if isinstance(created, str):  # the limit that refused it
                        stats.drop(created)
                        continue
                    state = created
                else:
                    previous_value = state[1]
                    if previous_value is not None:
                        # A counter that went down was restarted from 0: all of it is increase.
                        increase = value - previous_value if value >= previous_value else value
                        rate = increase * 1000.0 / (ts - state[0])
                    state[0] = ts
                    state[1] = value
                if ts > max_ts:
                    max_ts = self._max_ts = ts
                    latest_late_bucket = ts - late_lag
                accepted += 1

                if node.call == call and node.bucket == bucket:
                    parts = node.parts
                else:
                    parts = self._parts_for(node, bucket, call)
                if value_slots:
                    item = (value, gpu)
                    for slot in value_slots:
                        parts[slot][key] = item
                if rate is not None:
                    if rate_slots:
                        item = (rate, gpu)
                        for slot in rate_slots:
                            parts[slot][key] = item
                    if num_slots:
                        item = (rate, gpu)
                        for slot in num_slots:
                            parts[slot][pair] = item
                    for slot in den_slots:
                        parts[slot][pair] = rate
        return accepted, unknown

    def _finish_add(
        self, stats: AddStats, accepted: int, unknown: int, now_s: float | None
    ) -> AddStats:
        """The call's stats, after replaying the series that waited for their node's group."""
        stats.accepted = accepted
        stats.drop("unknown_metric", unknown)
        if self._replay_dropped:
            stats.drop("no_group", self._replay_dropped)
            self._replay_dropped = 0
        if self._replay:  # series that waited for their node's group, now named (``_move``)
            replay, self._replay = self._replay, []
            replayed = self.add(replay, now_s)
            stats.accepted += replayed.accepted
            for reason, n in replayed.dropped.items():
                stats.drop(reason, n)
        return stats

    def _new_series(
        self, node: _Node, key: SeriesKey, ts: int, value: float | None, seen: _Resolved
    ) -> list | str:
        """The state of ``node``'s new series ``key``, or the limit that refuses it."""
        if node.series >= self.max_series_per_node:
            return "series_limit"
        keys = self._keys_of(cast(_Slots, seen[4:8]), seen[3])
        group = cast(str, node.group)
        have = self._group_features.get(group)
        if have is None:
            have = self._group_features[group] = set()
        if not keys <= have:
            if len(have | keys) > self.max_features_per_group:
                return "feature_limit"
            have |= keys
        node.series += 1
        # the node: to count it down when forgotten; the keys: to rebuild _group_features
        state = self._series[key] = [ts, value, node, keys]
        return state

    def _keys_of(self, slots: _Slots, gpu: str | None) -> frozenset[str]:
        """The frame keys a series writing ``slots`` with ``gpu`` label adds to its group."""
        keys = self._feature_keys.get((slots, gpu))
        if keys is None:
            if len(self._feature_keys) >= self.label_memo_size:
                self._feature_keys.clear()
            named = {self._slot_feature[slot] for part in slots for slot in part}
            keys = self._feature_keys[(slots, gpu)] = frozenset(
                (per_gpu_key(name, gpu) if gpu else "") if per_gpu else name
                for name, per_gpu in named
            ) - {""}  # a per-GPU series without a gpu label writes no key
        return keys

    def _hold_groupless(self, node: _Node, series: Series, bucket: int, stats: AddStats) -> None:
        """Keep a series of a node in no group until its bucket passes; what an older
        bucket held is dropped as ``no_group``."""
        pending = node.pending
        if pending is None:
            pending = node.pending = []
        elif pending and pending[0][0] != bucket:
            if bucket < pending[0][0]:  # a late series: its bucket has passed already
                stats.drop("no_group", len(series.samples))
                return
            stats.drop("no_group", sum(len(s.samples) for _, s in pending))
            pending.clear()
        if len(pending) >= _MAX_PENDING:
            stats.drop("no_group", len(series.samples))
            return
        pending.append((bucket, series))

    def _resolve(self, labels: Mapping[str, str]) -> _Resolved:
        """What ``labels`` means for this builder (see ``_Resolved``), memoised by identity."""
        memo = self._label_memo
        if len(memo) >= self.label_memo_size:
            memo.clear()
            self._pci_of.clear()
        name = labels.get("__name__", "")
        uses = self._uses.get(name)
        if uses is not None and name in self._matched:
            uses = tuple(u for u in uses if all(labels.get(k) == v for k, v in u.match))
            slots = self._slots_of(uses) if uses else None
        else:
            slots = self._slots_by_name.get(name)
        resolved: _Resolved
        node_name = self.node_of(labels) if slots else None
        if slots is None or node_name is None:
            # nothing to add; the key field names the drop ("": unknown_metric, counted per call)
            drop = "no_node" if slots else ""
            resolved = (
                labels, None, drop, None, _NO_SLOTS, _NO_SLOTS, _NO_SLOTS, _NO_SLOTS, "",
                _NO_SCRAPE, 0, None, None, None,
            )  # fmt: skip
        else:
            node = self._nodes.get(node_name)
            if node is None:
                if len(self._nodes) >= self.max_nodes:
                    # not memoised: a flood of new names must not fill the memo either
                    return (
                        labels, None, "node_limit", None, _NO_SLOTS, _NO_SLOTS, _NO_SLOTS,
                        _NO_SLOTS, "", _NO_SCRAPE, 0, None, None, None,
                    )  # fmt: skip
                node = self._nodes[node_name] = _Node(node_name, self._no_group_rank)
                node.assigned = self._assigned.get(node_name)
            rank, group_value = self.group_label(labels)
            replica = None
            for k in self.replica_labels:
                replica = labels.get(k)
                if replica:
                    break
            ha: tuple[str, str] | None = None
            if replica:
                cluster = "\x00".join(labels.get(k, "") for k in self.ha_cluster_labels)
                ha = (cluster, replica)
                # the replicas' copies of a series are one series
                replicas = self.replica_labels
                items = tuple(sorted(kv for kv in labels.items() if kv[0] not in replicas))
            else:
                replica = ""
                items = tuple(sorted(labels.items()))
            scrape_key = (labels.get("instance") or node_name, labels.get("job", ""), replica)
            scrape = self._scrapes.get(scrape_key)
            if scrape is None:
                scrape = self._scrapes[scrape_key] = ScrapeTarget(node_name)
            role = None
            for k in self.role_labels:
                role = labels.get(k)
                if role:
                    break
            # equal label sets in new dicts (a decoder's cache turning over) need no new key
            key = self._keys.get(items)
            if key is None:
                if len(self._keys) >= self.label_memo_size:
                    self._keys.clear()
                key = self._keys[items] = _series_key(items)
            values, rates, nums, dens = slots
            pair = _series_key([kv for kv in items if kv[0] != "__name__"]) if nums or dens else ""
            gpu, pci = labels.get("gpu"), labels.get("pci_bus_id")
            if gpu and pci:
                self._pci_of.setdefault(node_name, {})[per_gpu_key("pci_bus_id", gpu)] = pci
            resolved = (
                labels, node, key, gpu, values, rates, nums, dens, pair,
                scrape, rank, group_value, role, ha,
            )  # fmt: skip
        memo[id(labels)] = resolved
        return resolved

    def _slots_of(self, uses: Iterable[_Use]) -> _Slots:
        """The slots ``uses`` write: (values, rates, ratio numerators, ratio denominators)."""
        values: list[int] = []
        rates: list[int] = []
        nums: list[int] = []
        dens: list[int] = []
        for use in uses:
            if use.ratio_part is None:
                (rates if use.counter else values).append(self._slot[use.feature])
            elif use.ratio_part == "num":
                nums.append(self._slot[use.feature])  # ``per`` features are counters
            else:
                dens.append(self._den_slot[use.feature])
        return tuple(values), tuple(rates), tuple(nums), tuple(dens)

    def _parts_for(self, node: _Node, bucket: int, call: int) -> list[dict[SeriesKey, Any]]:
        """The open partial of (bucket, node) -- reopened from kept contributions, or new --
        remembered on ``node`` for the rest of this call."""
        frames = self._open.get(bucket)
        if frames is None:
            frames = self._open[bucket] = {}
        partial = frames.get(node.name)
        if partial is None:
            kept = self._closed.get(bucket)
            kept_frame = kept.pop(node.name, None) if kept else None
            if kept_frame is None:
                partial = _Partial(self._slot_count, cast(str, node.group), node)
            else:  # a reopen stays in the group the frame was closed in
                partial = _Partial(self._slot_count, kept_frame[0], node)
                for slot, contributions in kept_frame[1]:
                    partial.parts[slot] = contributions
            frames[node.name] = partial
        node.call, node.bucket, node.parts = call, bucket, partial.parts
        return partial.parts

    def _move(self, node: _Node, rank: int, group: str | None, bucket: int) -> bool:
        """``node`` is in ``group`` (None: in none) from ``bucket`` on; the old group gets a
        departure unless the node joined it in this very bucket and its frame moves along.
        False (nothing changes) if ``group`` is full: ``max_nodes_per_group``."""
        old = node.group
        if group != old:
            sizes = self._group_nodes
            if group is not None:
                size = sizes.get(group, 0)
                if size >= self.max_nodes_per_group:
                    return False
                sizes[group] = size + 1
            if old is not None:
                self._leave_group(old)
        if old is not None and old != group:
            # the buckets it was held in (label gone) are on hold: it did not stay
            for open_bucket, open_frames in self._open.items():
                held = open_frames.get(node.name)
                if held is not None and held.group == old and open_bucket > node.held:
                    held.on_hold = True
        frames = self._open.get(bucket)
        partial = frames.get(node.name) if frames else None
        moved = False
        if partial is not None:
            if group is None:  # what the bucket holds stays with the group it was sent to
                pass
            else:
                moved = partial.group == old
                partial.group = group
        if old is not None and old != group and (node.since < bucket or not moved):
            self._departures.append(Frame(old, node.name, bucket, {}, {}, left=True))
        node.group, node.rank = group, rank
        node.held = node.since = bucket
        if node.pending and group is not None:
            # the node's series of this bucket that came before its group was named
            self._replay.extend(s for b, s in node.pending if b == bucket)
            self._replay_dropped += sum(len(s.samples) for b, s in node.pending if b != bucket)
            node.pending = None
        return True

    def _leave_group(self, group: str) -> None:
        sizes = self._group_nodes
        left = sizes[group] - 1
        if left:
            sizes[group] = left
        else:
            del sizes[group]

    def assign(self, node: str, group: str | None) -> None:
        """The scheduler says ``node`` runs in ``group`` (None: it left it; labels decide again).

        The move takes effect with the node's next sample, as a label change would.
        """
        if group is None:
            self._assigned.pop(node, None)
        else:
            self._assigned[node] = group
        state = self._nodes.get(node)
        if state is not None and state.assigned != group:
            state.assigned = group
            if group is None and state.rank == _ASSIGNED_RANK:
                state.rank = self._no_group_rank  # any label may now place it, at once

    @property
    def assigned(self) -> dict[str, str]:
        """Nodes the scheduler placed (``assign``), node -> job."""
        return dict(self._assigned)

    # --- closing frames -------------------------------------------------------------------------

    def close_due(
        self, watermark_ms: int | None, now_s: float | None = None, idle_s: float | None = None
    ) -> list[Frame]:
        """Frames whose bucket ended at or before ``watermark_ms`` -- and every open frame
        when (given ``now_s`` and ``idle_s``) no ``add`` came for ``idle_s`` seconds: the
        stream stopped. They are forgotten here.

        Frames that end up with no value (only first counter samples) are not returned.
        """
        stopped = (
            now_s is not None
            and idle_s is not None
            and self._last_add_s is not None
            and now_s - self._last_add_s >= idle_s
        )
        due: list[tuple[int, str, _Partial]] = []
        for bucket in list(self._open):
            if stopped or (watermark_ms is not None and bucket + self.bucket_ms <= watermark_ms):
                due.extend((bucket, name, p) for name, p in self._open.pop(bucket).items())
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
        due = [(b, name, p) for b, frames in self._open.items() for name, p in frames.items()]
        self._open.clear()
        out = self._emit(due)
        out.extend(self._departures)
        self._departures.clear()
        return out

    def _emit(self, due: list[tuple[int, str, _Partial]]) -> list[Frame]:
        out: list[Frame] = []
        due.sort(key=lambda item: (item[0], item[2].group, item[1]))
        closed = self._closed
        for bucket, name, partial in due:
            parts = partial.parts
            values, gpus = self._reduce_partial(parts)
            if values:
                pci = self._pci_of.get(name)
                if pci:
                    gpus.update(pci)
                node = partial.node
                on_hold = partial.on_hold or (
                    node.assigned is None and node.group == partial.group and node.held < bucket
                )
                out.append(
                    Frame(
                        partial.group, name, bucket, values, gpus, role=node.role, on_hold=on_hold
                    )
                )
            # keep what a reopened frame needs to emit complete sums and ratios (module doc)
            kept = [(slot, parts[slot]) for slot in self._kept_slots if parts[slot]]
            if kept:
                frames = closed.get(bucket)
                if frames is None:
                    frames = closed[bucket] = {}
                frames[name] = (partial.group, kept)
        return out

    def _reduce_partial(
        self, parts: list[dict[SeriesKey, Any]]
    ) -> tuple[dict[str, float], dict[str, str]]:
        values: dict[str, float] = {}
        gpus: dict[str, str] = {}
        isfinite = math.isfinite
        for name, slot, den_slot, reduce, per_gpu in self._reducers:
            contributions = parts[slot]
            if not contributions:
                continue
            items: Iterable[tuple[float, str | None]]
            if den_slot < 0:
                items = contributions.values()
            else:
                den = parts[den_slot]
                if not den:
                    continue
                items = [
                    (n / d, g)
                    for pk, (n, g) in contributions.items()
                    if (d := den.get(pk)) is not None and d > 0
                ]
                if not items:
                    continue
            if per_gpu is not None:
                for v, g in items:
                    if g is None:
                        continue
                    if not isfinite(v):
                        self._drop_result()
                        continue
                    gpu_key = per_gpu.get(g)
                    if gpu_key is None:
                        gpu_key = self._per_gpu_key(per_gpu, name, g)
                    values[gpu_key] = v
                continue
            value, gpu = _reduce(reduce, items)
            if isfinite(value):
                values[name] = value
                if gpu is not None and reduce != "sum":
                    gpus[name] = gpu
            else:  # a rate or a sum out of the float range: this feature only, counted
                self._drop_result()
        return values, gpus

    def _drop_result(self, reason: str = "non_finite_result") -> None:
        self.dropped_results[reason] = self.dropped_results.get(reason, 0) + 1

    @staticmethod
    def _per_gpu_key(keys: dict[str, str], feature: str, gpu: str) -> str:
        if len(keys) >= 1024:  # GPU labels are a node's few indices; bound it all the same
            keys.clear()
        key = keys[gpu] = per_gpu_key(feature, gpu)
        return key

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
                self._series.pop(k)[2].series -= 1
            features: dict[str, set[str]] = {}
            for state in self._series.values():
                group = state[2].group
                if group is not None:
                    features.setdefault(group, set()).update(state[3])
            self._group_features = features
            quiet = [sk for sk, t in self._scrapes.items() if t.last_ts < cutoff]
            for sk in quiet:
                del self._scrapes[sk]
            # a node lives while one of its scrape targets does
            live = {t.node for t in self._scrapes.values()}
            gone = [n for n in self._nodes if n not in live]
            for n in gone:
                group = self._nodes.pop(n).group
                if group is not None:
                    self._leave_group(group)
                self._pci_of.pop(n, None)
            if gone or quiet:
                # memoised label dicts point at the forgotten objects: resolve afresh
                self._label_memo.clear()
            self.ha.forget_before(cutoff)
            self._last_sweep_ts = self._max_ts


def frame_builder_for(settings: Settings) -> FrameBuilder:
    """The frame builder the ingest runs for ``settings`` (features, labels, bucket)."""
    return FrameBuilder(
        features_for(settings),
        node_labels=tuple(settings.node_labels),
        group_labels=tuple(settings.group_labels),
        bucket_ms=settings.bucket_ms,
        grace_ms=int(settings.ingest_grace_s * 1000),
        membership_hold_buckets=settings.membership_hold_buckets,
        role_labels=tuple(settings.role_labels),
        replica_labels=tuple(settings.replica_labels),
        ha_cluster_labels=tuple(settings.ha_cluster_labels),
        ha_failover_ms=int(settings.ha_failover_s * 1000),
        max_series_per_node=settings.ingest_max_series_per_node,
        max_nodes=settings.ingest_max_nodes,
        max_nodes_per_group=settings.ingest_max_nodes_per_group,
        max_features_per_group=settings.ingest_max_features_per_group,
    )
