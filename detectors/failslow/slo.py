"""Throughput-SLO accounting per job: what the allocated GPU-hours actually delivered.

Fail-slow does not change the installed, powered or allocated GPU count; it
changes how much training those GPU-hours buy, and the loss spreads to every
healthy GPU that has to wait for the slow one. Per job and per bucket this
module keeps:

* **baseline** — the expected throughput: ``SloParams.expected_throughput``
  when the operator knows it, else learned as the median of the *healthy*
  buckets (no confirmed slowdown, no expected dip) once there are
  ``min_baseline_buckets`` of them. A bucket is judged against the baseline
  known *before* it; buckets before any baseline are "unjudged".
* **P50 / P5** — of the observed throughput (every bucket with a figure, dips
  and slowdowns included), streaming with bounded relative error
  (:class:`detectors.quantile.QuantileSketch`).
* **time below** — seconds with throughput < ``band`` × baseline (default
  90 %), and how many of those fell in expected dips (checkpoints).
* **GPU-hours** — allocated (n_gpus × bucket, every bucket), within the band
  (judged buckets at or above it), lost (n_gpus × (1 − throughput/baseline) ×
  bucket, below the baseline), and *healthy GPU-hours waiting*: in buckets
  below the band with a culprit named, (n_gpus − culprit GPUs) × bucket — the
  healthy GPUs held by a slow dependency. A culprit with a GPU counts one GPU,
  a node-level culprit ``gpus_per_node``.
* **incidents** — one per confirmed slowdown (``slow``), from its onset
  (``since_bucket``) to the first bucket no longer slow, with the most
  confident localisation seen (culprits, class, confidence), the highest
  mitigation stage advised, its loss and the worst throughput fraction. A
  slowdown that returns within ``merge_gap_buckets`` reopens the incident
  (intermittent congestion is one incident). The last ``max_incidents`` are kept.

State is a frozen :class:`SloState` (JSON-safe ``to_dict``/``from_dict``);
:func:`step_slo` folds a bucket in, :func:`summarise` gives the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from detectors.checks import Checked, int_rule, integer, maybe_real, real
from detectors.failslow.localise import Localisation
from detectors.failslow.mitigation import STAGES, Advice, Stage
from detectors.features import DEFAULT_BUCKET_MS
from detectors.quantile import QuantileSketch
from detectors.state_codec import JsonState

__all__ = ["Incident", "SloParams", "SloState", "SloSummary", "step_slo", "summarise"]


@dataclass(frozen=True)
class SloParams(Checked):
    """Accounting parameters (see the module docstring)."""

    bucket_s: float = real(DEFAULT_BUCKET_MS / 1000, above=0)
    band: float = real(0.9, above=0, at_most=1)
    expected_throughput: float | None = maybe_real(None, above=0)
    min_baseline_buckets: int = integer(10)
    gpus_per_node: int = integer(8)
    relative_accuracy: float = real(0.005, above=0, below=0.5)
    max_incidents: int = integer(100)
    merge_gap_buckets: int = integer(10, minimum=0)


@dataclass(frozen=True)
class Incident(JsonState):
    """One slowdown episode. ``end_bucket`` None: still open. ``culprits``: (node, gpu) pairs."""

    start_bucket: int
    end_bucket: int | None
    culprits: tuple[tuple[str, str | None], ...] = ()
    klass: str = "unknown"
    confidence: float = 0.0
    stage: Stage = "S1"
    loss_gpu_s: float = 0.0
    worst_fraction: float | None = None


@dataclass(frozen=True)
class SloState(JsonState):
    """Running totals of one job (seconds and GPU-seconds), the two sketches, the incidents."""

    last_bucket: int | None = None
    allocated_gpu_s: float = real(0.0, at_least=0)
    judged_s: float = real(0.0, at_least=0)
    unjudged_s: float = real(0.0, at_least=0)
    below_s: float = real(0.0, at_least=0)
    below_in_dips_s: float = real(0.0, at_least=0)
    in_band_gpu_s: float = real(0.0, at_least=0)
    lost_gpu_s: float = real(0.0, at_least=0)
    waiting_gpu_s: float = real(0.0, at_least=0)
    observed: QuantileSketch = field(default_factory=QuantileSketch)
    healthy: QuantileSketch = field(default_factory=QuantileSketch)
    incidents: tuple[Incident, ...] = ()
    incident_count: int = 0


@dataclass(frozen=True)
class SloSummary(JsonState):
    """The job's SLO figures (hours, seconds, throughput in the input's unit)."""

    baseline: float | None
    p50: float | None
    p5: float | None
    seconds_below: float
    seconds_below_in_dips: float
    seconds_unjudged: float
    gpu_hours_allocated: float
    gpu_hours_in_band: float
    gpu_hours_lost: float
    healthy_gpu_hours_waiting: float
    incidents: tuple[Incident, ...]
    incident_count: int


_GPUS = int_rule(numpy=False)


def step_slo(
    state: SloState,
    params: SloParams,
    *,
    bucket: int,
    throughput: float,
    n_gpus: int,
    slow: bool = False,
    since_bucket: int | None = None,
    expected_dip: bool = False,
    localisation: Localisation | None = None,
    advice: Advice | None = None,
) -> SloState:
    """Fold one bucket into the job's accounting.

    ``throughput``: the bucket's figure (NaN / non-positive: missing — the
    GPUs still count as allocated). ``slow``: a confirmed slowdown is open
    (the change detector's verdict); ``since_bucket``: its onset (default:
    this bucket). ``expected_dip``: the cycle model predicted a dip here.
    ``localisation`` / ``advice``: this bucket's, if any.
    """
    if isinstance(bucket, bool) or not isinstance(bucket, int):
        raise ValueError(f"bucket must be an int, got {bucket!r}")
    if state.last_bucket is not None and bucket <= state.last_bucket:
        raise ValueError(f"bucket {bucket} is not after the last one ({state.last_bucket})")
    _GPUS("n_gpus", n_gpus)
    dt = params.bucket_s
    value = float(throughput)
    present = math.isfinite(value) and value > 0
    baseline = _baseline(state, params)
    fraction = value / baseline if present and baseline is not None else math.nan

    changes: dict[str, Any] = {
        "last_bucket": bucket,
        "allocated_gpu_s": state.allocated_gpu_s + n_gpus * dt,
    }
    if present:
        changes["observed"] = state.observed.add(value)
        if not slow and not expected_dip:
            changes["healthy"] = state.healthy.add(value)
    if math.isnan(fraction):
        changes["unjudged_s"] = state.unjudged_s + dt
    else:
        changes["judged_s"] = state.judged_s + dt
        changes["lost_gpu_s"] = state.lost_gpu_s + n_gpus * max(0.0, 1.0 - fraction) * dt
        if fraction >= params.band:
            changes["in_band_gpu_s"] = state.in_band_gpu_s + n_gpus * dt
        else:
            changes["below_s"] = state.below_s + dt
            if expected_dip:
                changes["below_in_dips_s"] = state.below_in_dips_s + dt
            if localisation is not None and localisation.culprits:
                held = max(n_gpus - _culprit_gpus(localisation, params), 0)
                changes["waiting_gpu_s"] = state.waiting_gpu_s + held * dt
    incidents, count = _track_incident(
        state, params, bucket, slow, since_bucket, fraction, n_gpus, localisation, advice
    )
    changes["incidents"] = incidents
    changes["incident_count"] = count
    return replace(state, **changes)


def summarise(state: SloState, params: SloParams) -> SloSummary:
    """The job's figures so far."""
    observed = state.observed
    return SloSummary(
        baseline=_baseline(state, params),
        p50=observed.quantile(0.5) if observed.count else None,
        p5=observed.quantile(0.05) if observed.count else None,
        seconds_below=state.below_s,
        seconds_below_in_dips=state.below_in_dips_s,
        seconds_unjudged=state.unjudged_s,
        gpu_hours_allocated=state.allocated_gpu_s / 3600.0,
        gpu_hours_in_band=state.in_band_gpu_s / 3600.0,
        gpu_hours_lost=state.lost_gpu_s / 3600.0,
        healthy_gpu_hours_waiting=state.waiting_gpu_s / 3600.0,
        incidents=state.incidents,
        incident_count=state.incident_count,
    )


def _baseline(state: SloState, params: SloParams) -> float | None:
    if params.expected_throughput is not None:
        return params.expected_throughput
    if state.healthy.count < params.min_baseline_buckets:
        return None
    return state.healthy.quantile(0.5)


def _culprit_gpus(localisation: Localisation, params: SloParams) -> int:
    blamed = {(c.node, c.gpu) for c in localisation.culprits}
    whole_nodes = {node for node, gpu in blamed if gpu is None}
    single = {(node, gpu) for node, gpu in blamed if gpu is not None and node not in whole_nodes}
    return len(whole_nodes) * params.gpus_per_node + len(single)


def _track_incident(
    state: SloState,
    params: SloParams,
    bucket: int,
    slow: bool,
    since_bucket: int | None,
    fraction: float,
    n_gpus: int,
    localisation: Localisation | None,
    advice: Advice | None,
) -> tuple[tuple[Incident, ...], int]:
    incidents = list(state.incidents)
    count = state.incident_count
    last = incidents[-1] if incidents else None
    if not slow:
        if last is not None and last.end_bucket is None:
            incidents[-1] = replace(last, end_bucket=bucket)
        return tuple(incidents), count
    start = bucket if since_bucket is None else min(since_bucket, bucket)
    if last is not None and last.end_bucket is None:
        current = last
    elif (
        last is not None
        and last.end_bucket is not None
        and start - last.end_bucket <= params.merge_gap_buckets
    ):
        current = replace(last, end_bucket=None)
    else:
        current = Incident(start_bucket=start, end_bucket=None)
        incidents.append(current)
        count += 1
    if not math.isnan(fraction):
        current = replace(
            current,
            loss_gpu_s=current.loss_gpu_s + n_gpus * max(0.0, 1.0 - fraction) * params.bucket_s,
            worst_fraction=fraction
            if current.worst_fraction is None
            else min(current.worst_fraction, fraction),
        )
    if localisation is not None and localisation.confidence >= current.confidence:
        current = replace(
            current,
            culprits=tuple((c.node, c.gpu) for c in localisation.culprits),
            klass=localisation.klass,
            confidence=localisation.confidence,
        )
    if advice is not None and STAGES.index(advice.stage) > STAGES.index(current.stage):
        current = replace(current, stage=advice.stage)
    incidents[-1] = current
    return tuple(incidents[-params.max_incidents :]), count
