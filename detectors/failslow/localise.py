"""Culprit localisation for a slow synchronous job, from metrics alone.

In a synchronous job every rank runs at the pace of the slowest dependency, so
the job's throughput says *that* it is slow, not *who*. The peers with the same
role (one data-parallel group, one pipeline stage: ranks that do the same work
and move the same traffic) are compared feature by feature with the robust
peer z of :func:`detectors.peer.peer_zscores`, per GPU for GPU features and per
node for host and link features:

* **compute** — a slow GPU stays busy while its peers wait for it: its SM
  activity is *higher* than its peers' (theirs dropped), or its SM clock is
  lower. A clock-event reason that slows the clock (HW slowdown, SW/HW
  thermal, HW power brake) set on few peers convicts only together with a
  lower clock; otherwise it is listed as evidence. The culprit names the GPU
  when it is the node's only one out of line; when several are (node-wide
  throttling) it names the node alone.
* **cpu** — CPU busy fraction, idle cores (fewer than its peers') or run
  queue out of line while the node's GPUs look like everyone else's
  (launch-starved GPUs idle like their waiting peers). On a node that is
  also compute-slow, the CPU figures are attached to the compute culprit as
  evidence.
* **network** — the node's link counters out of line: transmit wait,
  retransmits, congestion marks (ECN / CNP). A lower transmit rate is
  corroboration only (less work also sends less).
* **temperature never convicts.** A hot GPU whose clock and activity match its
  peers' is named in the reason as "hot but not slow" and not blamed.
* **cluster-wide** — nobody is out of line (the job is slow but every peer is
  equally affected: fabric congestion, a power cap, a storage stall), or more
  than ``cluster_fraction`` of a role deviates the same way (the feature moved
  as a group). No node is blamed. With a ``reference`` (the group medians from
  before the slowdown, see :func:`group_medians`) the features that moved are
  given as evidence.
* **unknown** — the job is slow and no role has enough peers to compare.
* **none** — the job is not slow and nothing convicts (the "hot but not slow"
  case); :class:`Localisation` then blames no one.

Confidence of a culprit grows with its strongest convicting z, from 0.5 at
``z_threshold`` to 0.9 at twice that, plus 0.1 when a second feature of the
same class corroborates. A cluster-wide verdict has 0.6, or 0.9 with a moved
reference feature. "unknown" and "none" have 0.

Pure: mappings and dataclasses in, a :class:`Localisation` out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from detectors.arrays import FloatArray
from detectors.checks import Checked, integer, real
from detectors.peer import peer_zscores
from detectors.state_codec import JsonState
from detectors.vocabulary import Signal

__all__ = [
    "GPU_FEATURES",
    "NODE_FEATURES",
    "SLOWDOWN_REASONS",
    "Culprit",
    "Klass",
    "Localisation",
    "LocaliseParams",
    "NodeMetrics",
    "combine_buckets",
    "group_medians",
    "localise",
    "overflow_safe_median",
]

Klass = Literal["compute", "network", "cpu", "cluster-wide", "unknown", "none"]

# DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits (nvmlClocksEventReason*): the ones that mean
# "this GPU is being slowed" rather than "idle" or "held at the application clock".
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
SW_POWER_CAP = 0x4
SLOWDOWN_REASONS = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
MASK_MAX = 2**64 - 1  # the reasons are an unsigned long long
_MASK_BITS = np.arange(64, dtype=np.uint64)


@dataclass(frozen=True)
class _Scale:
    """How a feature is compared: floors of the peer spread, and whether on log1p(value).

    Link counters are multiplicative (a busy node's wait is a multiple of a
    quiet one's, nodes differ by tens of percent at rest): on a log scale a
    5x congestion is a clear outlier while the upper tail of the resting
    spread is not. Their floors are then in log units (0.1 ≈ 10 %).
    """

    abs_floor: float
    rel_floor: float
    log: bool = False


# Floors sized to the exporter's resolution so a tight group of identical peers
# does not turn rounding into large z.
GPU_FEATURES: Mapping[str, _Scale] = {
    "sm_active": _Scale(0.01, 0.01),  # fraction 0..1
    "sm_clock_mhz": _Scale(15.0, 0.005),  # clocks step in ~15 MHz
    "power_w": _Scale(10.0, 0.02),
    "temp_c": _Scale(2.0, 0.0),
}
NODE_FEATURES: Mapping[str, _Scale] = {
    "cpu_busy": _Scale(0.03, 0.02),  # fraction of CPU time not idle
    "cpu_idle_cores": _Scale(0.5, 0.05),  # idle CPU-seconds per second (no CPU count needed)
    "run_queue": _Scale(2.0, 0.10),  # runnable tasks
    "link_xmit_wait": _Scale(0.1, 0.0, log=True),  # per second
    "link_retransmits": _Scale(0.5, 0.0, log=True),  # per second; sparse: 1-3/s is noise
    "link_congestion": _Scale(0.1, 0.0, log=True),  # ECN-marked packets / CNPs per second
    "link_tx_bytes": _Scale(0.02, 0.0, log=True),  # bytes per second
}
_CPU = ("cpu_busy", "cpu_idle_cores", "run_queue")
# Which way a node feature is out of line: fewer idle cores and a lower transmit
# rate than the peers', more of everything else.
_NODE_BAD_SIGN: Mapping[str, float] = {
    f: (-1.0 if f in ("cpu_idle_cores", "link_tx_bytes") else 1.0) for f in NODE_FEATURES
}
_NET = ("link_xmit_wait", "link_retransmits", "link_congestion")
_PER_GPU_FIELDS = (*GPU_FEATURES, "clock_event_reasons", "gpus")  # NodeMetrics' per-GPU tuples


@dataclass(frozen=True)
class NodeMetrics:
    """One node's figures for one bucket (NaN / empty = not exported).

    Per-GPU tuples are indexed like ``gpus`` (the DCGM ``gpu`` label; default
    "0", "1", ...). ``sm_active`` is a fraction (DCGM_FI_PROF_SM_ACTIVE, or GPU
    util / 100). ``clock_event_reasons`` holds the 64-bit mask as an int (NVML's
    "unknown" reason is bit 63, so masks are compared as unsigned, never int64).
    ``cpu_busy`` is a fraction of the node's CPU time; ``cpu_idle_cores`` the
    idle CPU-seconds per second (``node_cpu_seconds_total{mode="idle"}`` summed),
    which needs no CPU count. ``run_queue``: runnable tasks (``node_procs_running``).
    """

    sm_active: tuple[float, ...] = ()
    sm_clock_mhz: tuple[float, ...] = ()
    power_w: tuple[float, ...] = ()
    temp_c: tuple[float, ...] = ()
    clock_event_reasons: tuple[int, ...] = ()
    gpus: tuple[str, ...] = ()
    cpu_busy: float = math.nan
    cpu_idle_cores: float = math.nan
    run_queue: float = math.nan
    link_xmit_wait: float = math.nan
    link_retransmits: float = math.nan
    link_congestion: float = math.nan
    link_tx_bytes: float = math.nan

    def __post_init__(self) -> None:
        lengths = {len(getattr(self, name)) for name in _PER_GPU_FIELDS} - {0}
        if len(lengths) > 1:
            raise ValueError(f"per-GPU tuples differ in length: {sorted(lengths)}")

    @property
    def n_gpus(self) -> int:
        return max((len(getattr(self, n)) for n in _PER_GPU_FIELDS), default=0)

    def gpu_name(self, index: int) -> str:
        return self.gpus[index] if self.gpus else str(index)

    def gpu_values(self, feature: str) -> FloatArray:
        values = getattr(self, feature)
        if not values:
            return np.full(self.n_gpus, np.nan)
        return np.asarray(values, dtype=np.float64)

    def reasons(self) -> tuple[int, ...]:
        """The masks, each as an unsigned 64-bit value (anything outside that range is 0)."""
        if not self.clock_event_reasons:
            return (0,) * self.n_gpus
        return tuple(r if 0 <= r <= MASK_MAX else 0 for r in self.clock_event_reasons)


@dataclass(frozen=True)
class LocaliseParams(Checked):
    """Thresholds of :func:`localise`.

    ``z_threshold``: |z| that convicts (4 = the fusion layer's evidence gate).
    ``min_peers``: nodes a role needs to be compared. ``cluster_fraction``:
    share of a role deviating the same way beyond which the movement is the
    group's, not a node's. ``reference_shift``: relative move of a group
    median from the reference that counts as cluster-wide evidence.
    ``throttle_clock_z``: how far below its peers a GPU's clock must be for a
    slowdown reason to convict. ``max_evidence``: signals kept per culprit.
    """

    z_threshold: float = real(4.0, above=0)
    min_peers: int = integer(4, minimum=3, why="a median of two blames no one")
    cluster_fraction: float = real(0.3, above=0, below=0.5)
    reference_shift: float = real(0.25, above=0)
    throttle_clock_z: float = real(2.0, at_least=0)
    max_evidence: int = integer(6)


@dataclass(frozen=True)
class Culprit(JsonState):
    """A node (and GPU for compute) blamed for the slowdown, with the signals that convict it."""

    node: str
    gpu: str | None
    klass: Klass
    confidence: float
    evidence: tuple[Signal, ...]


@dataclass(frozen=True)
class Localisation(JsonState):
    """Who is to blame: ``culprits`` (strongest first), the overall ``klass`` and ``confidence``.

    ``klass`` is the strongest culprit's class; "cluster-wide", "unknown" or
    "none" when no one is blamed. ``evidence`` holds group-level signals for a
    cluster-wide verdict (feature, no z, median now, median before).
    """

    culprits: tuple[Culprit, ...]
    klass: Klass
    confidence: float
    reason: str
    evidence: tuple[Signal, ...] = field(default=())


def localise(
    metrics: Mapping[str, NodeMetrics],
    *,
    roles: Mapping[str, str] | None = None,
    job_slow: bool = True,
    reference: Mapping[str, float] | None = None,
    params: LocaliseParams | None = None,
) -> Localisation:
    """Blame the node(s) behind a slow synchronous job, or say that no one is to blame.

    ``metrics``: node → its figures this bucket (or a few buckets combined with
    :func:`combine_buckets`). ``roles``: node → role; nodes are compared only
    within their role (default: one role; a node missing from ``roles`` joins
    the role ""). ``job_slow``: whether the job is known to be slow (a
    confirmed change); it decides between "cluster-wide" and "none" when no
    one is blamed. ``reference``: group medians from before the slowdown.
    """
    params = params or LocaliseParams()
    groups: dict[str, list[str]] = defaultdict(list)
    for node in sorted(metrics):
        groups[roles.get(node, "") if roles is not None else ""].append(node)

    culprits: list[Culprit] = []
    notes: list[str] = []
    compared = 0
    for role in sorted(groups):
        nodes = groups[role]
        if len(nodes) < params.min_peers:
            notes.append(f"role {role or '(all)'}: {len(nodes)} node(s), too few to compare")
            continue
        compared += 1
        found, role_notes = _localise_role(role, nodes, metrics, params)
        culprits.extend(found)
        notes.extend(role_notes)

    culprits.sort(key=lambda c: (-c.confidence, c.node, c.gpu or ""))
    if culprits:
        top = culprits[0]
        names = ", ".join(
            f"{c.node}{'/gpu' + c.gpu if c.gpu is not None else ''} ({c.klass}, {c.confidence:.2f})"
            for c in culprits
        )
        return Localisation(
            culprits=tuple(culprits),
            klass=top.klass,
            confidence=top.confidence,
            reason="; ".join([f"blamed: {names}", *notes]),
        )

    moved = _moved(metrics, reference, params)
    if compared == 0:
        klass: Klass = "unknown" if job_slow else "none"
        return Localisation((), klass, 0.0, "; ".join(notes or ["no metrics to compare"]), moved)
    if not job_slow:
        return Localisation((), "none", 0.0, "; ".join(["no node out of line", *notes]), moved)
    why = "every peer equally affected: no node out of line with its role"
    if moved:
        why += "; group moved: " + ", ".join(
            f"{s.feature} {s.value:.3g} vs {s.median:.3g} before" for s in moved
        )
    return Localisation((), "cluster-wide", 0.9 if moved else 0.6, "; ".join([why, *notes]), moved)


def group_medians(metrics: Mapping[str, NodeMetrics]) -> dict[str, float]:
    """Median of every feature over all GPUs / nodes (NaN skipped): a ``reference`` snapshot.

    Always finite: the state keeps it, and huge gauges must not make it infinite.
    """
    out: dict[str, float] = {}
    for feature in GPU_FEATURES:
        # one array from every node's tuple, not one per node (this runs each steady bucket)
        per_node = (getattr(m, feature) for m in metrics.values())
        values = np.fromiter(chain.from_iterable(per_node), dtype=np.float64)
        median = overflow_safe_median(values[np.isfinite(values)])
        if math.isfinite(median):
            out[feature] = median
    for feature in NODE_FEATURES:
        host = np.array([getattr(m, feature) for m in metrics.values()], dtype=np.float64)
        median = overflow_safe_median(host[np.isfinite(host)])
        if math.isfinite(median):
            out[feature] = median
    return out


def overflow_safe_median(values: npt.ArrayLike) -> float:
    """Median of finite values that stays finite near the float limit (NaN when empty)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    if not ordered.size:
        return math.nan
    low, high = ordered[(ordered.size - 1) // 2], ordered[ordered.size // 2]
    return float(low if low == high else 0.5 * low + 0.5 * high)


def combine_buckets(buckets: Sequence[Mapping[str, NodeMetrics]]) -> dict[str, NodeMetrics]:
    """Per node, the per-feature median over several buckets (a reason bit: set in >= half).

    Localising on the median of the confirmation window (three buckets) rather
    than on one bucket divides the noise without blurring a fault that lasts.
    A node keeps the GPU count of its widest bucket; missing values are skipped.
    """
    nodes = sorted({node for bucket in buckets for node in bucket})
    if not nodes:
        return {}
    k = len(buckets)
    widths = [max((b[n].n_gpus for b in buckets if n in b), default=0) for n in nodes]
    width = max(widths)
    gpu_median: dict[str, FloatArray] = {}
    for feature in GPU_FEATURES:
        cube = np.full((k, len(nodes), width), np.nan)
        for b, bucket in enumerate(buckets):
            for i, node in enumerate(nodes):
                values = getattr(bucket[node], feature) if node in bucket else ()
                cube[b, i, : len(values)] = values
        gpu_median[feature] = _nanmedian_axis0(cube)
    reasons = np.zeros((k, len(nodes), width), dtype=np.uint64)
    seen = np.zeros((len(nodes), width), dtype=np.int64)
    for b, bucket in enumerate(buckets):
        for i, node in enumerate(nodes):
            if node in bucket and bucket[node].n_gpus:
                masks = bucket[node].reasons()
                reasons[b, i, : len(masks)] = masks
                seen[i, : len(masks)] += 1
    bits = (reasons[..., None] >> _MASK_BITS) & np.uint64(1)
    majority = (2 * bits.sum(axis=0) >= seen[..., None]) & (seen[..., None] > 0)
    combined_reasons = np.bitwise_or.reduce(majority.astype(np.uint64) << _MASK_BITS, axis=-1)
    host = np.full((k, len(nodes), len(NODE_FEATURES)), np.nan)
    for b, bucket in enumerate(buckets):
        for i, node in enumerate(nodes):
            if node in bucket:
                host[b, i] = [getattr(bucket[node], f) for f in NODE_FEATURES]
    host_median = _nanmedian_axis0(host)

    out: dict[str, NodeMetrics] = {}
    for i, node in enumerate(nodes):
        w = widths[i]
        kwargs: dict[str, Any] = {
            feature: tuple(gpu_median[feature][i, :w].tolist()) for feature in GPU_FEATURES
        }
        kwargs["clock_event_reasons"] = tuple(int(r) for r in combined_reasons[i, :w])
        kwargs["gpus"] = next((b[node].gpus for b in buckets if node in b and b[node].gpus), ())
        kwargs.update({f: _float(host_median[i, j]) for j, f in enumerate(NODE_FEATURES)})
        out[node] = NodeMetrics(**kwargs)
    return out


# -- internals -------------------------------------------------------------------------------


def _localise_role(
    role: str, nodes: Sequence[str], metrics: Mapping[str, NodeMetrics], params: LocaliseParams
) -> tuple[list[Culprit], list[str]]:
    notes: list[str] = []
    label = role or "(all)"
    gpu_rows = [(node, g) for node in nodes for g in range(metrics[node].n_gpus)]
    compute: dict[str, tuple[int, float, list[Signal], bool]] = {}  # node → best GPU
    slow_gpus: dict[str, int] = defaultdict(int)  # node → how many of its GPUs convict
    hot: list[str] = []
    if len(gpu_rows) >= params.min_peers:
        table = np.vstack(
            [
                np.column_stack([metrics[n].gpu_values(f) for f in GPU_FEATURES])
                for n in nodes
                if metrics[n].n_gpus
            ]
        )
        gz, gmed, gval, gheld = _peer_table(
            table,
            GPU_FEATURES,
            {"sm_active": 1.0, "sm_clock_mhz": -1.0, "power_w": 0.0, "temp_c": 1.0},
            params,
        )
        reasons = np.array([metrics[n].reasons()[g] for n, g in gpu_rows], dtype=np.uint64)
        slowed = (reasons & np.uint64(SLOWDOWN_REASONS)) != 0
        unusual_throttle = slowed & (slowed.mean() <= params.cluster_fraction)
        for held in gheld:
            notes.append(f"role {label}: {held} moved as a group")
        for i, (node, g) in enumerate(gpu_rows):
            gpu_name = metrics[node].gpu_name(g)
            verdict = _gpu_verdict(
                i, gz, gmed, gval, gheld, bool(unusual_throttle[i]), int(reasons[i]), params
            )
            if verdict is None:
                if gz[i, 3] >= params.z_threshold and "temp_c" not in gheld:
                    hot.append(f"{node}/gpu{gpu_name} (temp z {gz[i, 3]:.1f})")
                continue
            score, signals, corroborated = verdict
            slow_gpus[node] += 1
            if node not in compute or score > compute[node][1]:
                compute[node] = (g, score, signals, corroborated)

    nz, nmed, nval, nheld = _peer_table(
        [[getattr(metrics[n], f) for f in NODE_FEATURES] for n in nodes],
        NODE_FEATURES,
        _NODE_BAD_SIGN,
        params,
    )
    for held in nheld:
        notes.append(f"role {label}: {held} moved as a group")
    names = list(NODE_FEATURES)
    culprits: list[Culprit] = []
    for i, node in enumerate(nodes):
        cpu = _signals(i, names, _CPU, nz, nmed, nval, nheld, params)
        net = _signals(i, names, _NET, nz, nmed, nval, nheld, params)
        if net:
            tx = _signals(i, names, ("link_tx_bytes",), nz, nmed, nval, nheld, params)
            culprits.append(_culprit(node, None, "network", net, tx, params))
        if node in compute:
            g, score, signals, corroborated = compute[node]
            gpu: str | None = metrics[node].gpu_name(g)
            if slow_gpus[node] > 1:
                # The node's GPUs, not one of them (a node-wide thermal or power
                # problem): naming the worst GPU would send the repair to one card.
                notes.append(
                    f"{node}: {slow_gpus[node]} of {metrics[node].n_gpus} GPUs out of line "
                    f"(worst gpu{gpu})"
                )
                gpu = None
            signals = [replace(sig, gpu=gpu) for sig in signals]
            culprits.append(
                _culprit(node, gpu, "compute", signals, cpu, params, score, corroborated)
            )
        elif cpu:
            culprits.append(_culprit(node, None, "cpu", cpu, [], params))

    blamed = {c.node for c in culprits}
    if len(blamed) > params.cluster_fraction * len(nodes):
        notes.append(
            f"role {label}: {len(blamed)} of {len(nodes)} nodes out of line — "
            "a group movement, no node blamed"
        )
        culprits = []
    for h in hot:
        if not any(h.startswith(f"{c.node}/") and c.klass == "compute" for c in culprits):
            notes.append(f"{h} hot but not slow: not blamed")
    return culprits, notes


def _peer_table(
    rows: npt.ArrayLike,
    features: Mapping[str, _Scale],
    bad_sign: Mapping[str, float],
    params: LocaliseParams,
) -> tuple[FloatArray, FloatArray, FloatArray, set[str]]:
    """Peer z, raw medians and values of a rows x features table; group-moved features are held."""
    values = np.asarray(rows, dtype=np.float64).reshape(-1, len(features))
    scales = list(features.values())
    logged = np.array([sc.log for sc in scales])
    with np.errstate(invalid="ignore"):
        compared = np.where(logged, np.log1p(np.maximum(values, 0.0)), values)
    stats = peer_zscores(
        compared,
        abs_floor=np.array([sc.abs_floor for sc in scales]),
        rel_floor=np.array([sc.rel_floor for sc in scales]),
        min_peers=params.min_peers,
    )
    raw_median = stats.median.copy()
    raw_median[logged] = np.expm1(stats.median[logged])
    held: set[str] = set()
    for j, name in enumerate(features):
        sign = bad_sign[name]
        col = stats.z[:, j]
        present = np.isfinite(col)
        if not present.any():
            continue
        bad = (sign * col >= params.z_threshold) if sign else (np.abs(col) >= params.z_threshold)
        if bad.sum() >= 2 and bad.sum() > params.cluster_fraction * present.sum():
            held.add(name)
    return stats.z, raw_median, values, held


def _gpu_verdict(
    i: int,
    z: FloatArray,
    median: FloatArray,
    values: FloatArray,
    held: set[str],
    unusual_throttle: bool,
    reasons: int,
    params: LocaliseParams,
) -> tuple[float, list[Signal], bool] | None:
    """(score, signals, corroborated) when GPU row ``i`` is compute-slow, else None."""
    thr = params.z_threshold
    names = list(GPU_FEATURES)
    z_busy = z[i, 0] if "sm_active" not in held else math.nan
    z_clock = z[i, 1] if "sm_clock_mhz" not in held else math.nan
    signals: list[Signal] = []
    score = 0.0
    if z_busy >= thr:
        signals.append(Signal(names[0], float(z_busy), float(values[i, 0]), float(median[0])))
        score = max(score, float(z_busy))
    if z_clock <= -thr:
        signals.append(Signal(names[1], float(z_clock), float(values[i, 1]), float(median[1])))
        score = max(score, float(-z_clock))
    throttled = unusual_throttle and z_clock <= -params.throttle_clock_z
    if throttled:
        signals.append(Signal("clock_event_reasons", math.nan, float(reasons), 0.0))
        score = max(score, thr)
    if not signals:
        return None
    if unusual_throttle and not throttled:
        signals.append(Signal("clock_event_reasons", math.nan, float(reasons), 0.0))
    for j in (1, 2, 3):  # clock (if not already), power, temperature: context
        if (
            names[j] not in held
            and abs(z[i, j]) >= thr
            and all(s.feature != names[j] for s in signals)
        ):
            signals.append(Signal(names[j], float(z[i, j]), float(values[i, j]), float(median[j])))
    convicting = sum(1 for s in signals if s.feature in ("sm_active", "sm_clock_mhz"))
    corroborated = convicting >= 2 or unusual_throttle
    return score, signals, corroborated


def _signals(
    i: int,
    names: Sequence[str],
    wanted: Sequence[str],
    z: FloatArray,
    median: FloatArray,
    values: FloatArray,
    held: set[str],
    params: LocaliseParams,
) -> list[Signal]:
    out = []
    for name in wanted:
        j = names.index(name)
        if name not in held and _NODE_BAD_SIGN[name] * z[i, j] >= params.z_threshold:
            out.append(Signal(name, float(z[i, j]), float(values[i, j]), float(median[j])))
    return out


def _culprit(
    node: str,
    gpu: str | None,
    klass: Klass,
    convicting: Sequence[Signal],
    extra: Sequence[Signal],
    params: LocaliseParams,
    score: float | None = None,
    corroborated: bool = False,
) -> Culprit:
    thr = params.z_threshold
    if score is None:
        score = max(abs(s.z) for s in convicting)
    strength = min(max((score - thr) / thr, 0.0), 1.0)
    corroborated = corroborated or len(convicting) >= 2
    confidence = round(min(0.5 + 0.4 * strength + (0.1 if corroborated else 0.0), 1.0), 3)
    evidence = [*convicting, *extra]
    evidence.sort(key=lambda s: -abs(s.z) if math.isfinite(s.z) else 0.0)
    return Culprit(node, gpu, klass, confidence, tuple(evidence[: params.max_evidence]))


def _moved(
    metrics: Mapping[str, NodeMetrics],
    reference: Mapping[str, float] | None,
    params: LocaliseParams,
) -> tuple[Signal, ...]:
    """Group medians that left the reference by more than ``reference_shift``."""
    if not reference:
        return ()
    now = group_medians(metrics)
    moved = []
    for feature, before in sorted(reference.items()):
        after = now.get(feature)
        if after is None or not math.isfinite(before) or before == 0:
            continue
        if abs(after - before) / abs(before) >= params.reference_shift:
            moved.append(Signal(feature, math.nan, after, before))
    return tuple(moved)


def _float(value: float) -> float:
    """``float(value)``, with NaN as the one ``math.nan`` (equal metrics then compare equal)."""
    out = float(value)
    return out if out == out else math.nan


def _nanmedian_axis0(cube: FloatArray) -> FloatArray:
    """Median along the first axis over finite entries (NaN where there are none).

    The first axis is short (the buckets combined), so one sort with the
    missing entries pushed to the end and a gather of the middle one or two
    beats ``np.nanmedian``, whose per-slice fallback dominated a bucket.
    """
    finite = np.isfinite(cube)
    if finite.all():
        with np.errstate(over="ignore"):
            result: FloatArray = np.median(cube, axis=0)
        if np.isfinite(result).all():  # else two huge middles overflowed: the safe path below
            return result
    ordered = np.sort(np.where(finite, cube, np.inf), axis=0)
    count = finite.sum(axis=0)
    lo = np.maximum((count - 1) // 2, 0)  # the middle one (odd count) or the lower of two
    hi = np.where(count % 2 == 0, count // 2, lo)
    low = np.take_along_axis(ordered, lo[None, ...], axis=0)[0]
    high = np.take_along_axis(ordered, hi[None, ...], axis=0)[0]
    with np.errstate(invalid="ignore"):  # inf - inf where nothing is finite: masked below
        middle = np.where(low == high, low, 0.5 * low + 0.5 * high)
    nan_result: FloatArray = np.where(count > 0, middle, np.nan)
    return nan_result
