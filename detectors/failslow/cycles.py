"""The job's cyclic structure: periodic throughput dips (checkpoint saves, evaluation steps).

A training job's throughput dips on a schedule: a checkpoint save every
~1.4–3.3 h that stalls training for 18–32 s (the report's 523 saves, interval
median 2.23 h), an evaluation pass every N steps. Those dips are expected and
must not become change points. This module learns the schedule from the
throughput series alone and predicts, for any bucket, whether a dip is due.

1. **Dip events.** The *level* is the median of the last ``level_buckets``
   non-dip buckets. A bucket ``dip_depth`` (10 %) or more below it is a dip
   bucket; a run of dip buckets that recovers within ``max_dip_buckets`` is a
   dip *event* (start bucket, length). A longer run is a level shift, not a
   dip: it is dropped and the level restarts from the new values.
2. **Period by autocorrelation.** The events since ``history_bins ·
   downsample`` buckets ago become a 0/1 series of ``downsample``-bucket bins
   (2 min by default: a day of history is 720 numbers). Its autocorrelation
   (unbiased, via FFT), summed over ±max(``jitter_bins``, ``tolerance`` · lag)
   lags to absorb schedule jitter, peaks at the period and its multiples; the *smallest* lag whose
   peak reaches 80 % of the highest (and ``min_acf``) is the period, so a
   harmonic never wins over the fundamental.
3. **Phase and refinement.** The events that fall on that period's comb
   (within the tolerance, walking back from the latest event) form a chain;
   a least-squares line through their starts refines the period, its
   residuals size the prediction window (3 σ, at least ``tolerance`` of the
   period and ``min_tolerance_buckets``), the latest member is the anchor and
   the longest member the expected dip length. At least ``min_repeats``
   events are needed. Up to ``max_cycles`` cycles are found, each on the
   events the previous ones did not claim (evaluation every 30 min *and* a
   checkpoint every 2 h).

:func:`expected_dip` returns the dip length predicted to cover a bucket (0:
none), which :func:`detectors.failslow.changepoint.step_changepoint` takes as
``expected_dip`` so a dip has to be outlasted before it can be confirmed.
State is a frozen :class:`CycleState` with JSON-safe ``to_dict``/``from_dict``;
refitting happens only when a dip event closes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from detectors.arrays import FloatArray
from detectors.checks import Checked, checked, each, integer, is_int, real, real_rule
from detectors.state_codec import JsonState

__all__ = [
    "Cycle",
    "CycleParams",
    "CycleState",
    "DipEvent",
    "expected_dip",
    "fit_cycles",
    "is_expected_dip",
    "step_cycles",
]

DipEvent = tuple[int, int]  # (first bucket, length in buckets)

_MAD_TO_SIGMA = 1.4826
_HARMONIC_SHARE = 0.8  # a shorter lag within 80 % of the best peak is the fundamental


@dataclass(frozen=True)
class CycleParams(Checked):
    """Dip detection, history and period search of :func:`step_cycles`.

    ``dip_depth``: relative drop below the level that makes a dip bucket.
    ``max_dip_buckets``: longest run that is still a dip (20 = 10 min).
    ``level_buckets``: non-dip buckets whose median is the level.
    ``downsample``: buckets per autocorrelation bin; ``history_bins``: bins
    of history (720 × 4 × 30 s = 24 h). ``min_period_buckets`` /
    ``max_period_buckets``: the period search range (20 min – 8 h).
    ``min_repeats``: events a cycle needs (4 = three intervals seen: with three,
    ~10 % of runs of random dips at a checkpoint's rate formed a false cycle;
    with four, ~1 %). ``min_acf``: autocorrelation (jitter-summed) a period
    needs (a real schedule gives ~0.8–1.0, random dips up to ~0.5).
    ``jitter_bins``: least half-width of that sum. ``tolerance``: the schedule
    jitter allowed, as a fraction of the period (it widens the sum, the chain
    and the prediction window); ``min_tolerance_buckets``: least half-window.
    ``max_events``: events kept. ``max_cycles``: cycles fitted.
    ``max_ahead``: how many periods past the anchor a prediction is still
    made (a missed dip or two does not lose the phase).
    """

    dip_depth: float = real(0.10, above=0, below=1)
    max_dip_buckets: int = integer(20)
    level_buckets: int = integer(20, minimum=3)
    downsample: int = integer(4)
    history_bins: int = integer(720, minimum=8)
    min_period_buckets: int = integer(40, minimum=2)
    max_period_buckets: int = integer(960, minimum=2)
    min_repeats: int = integer(4, minimum=2)
    min_acf: float = real(0.6, above=0, at_most=1)
    jitter_bins: int = integer(2, minimum=0)
    tolerance: float = real(0.05, at_least=0, below=0.5)
    min_tolerance_buckets: int = integer(2, minimum=0)
    max_events: int = integer(128, minimum=2)
    max_cycles: int = integer(2)
    max_ahead: int = integer(3)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_period_buckets <= self.min_period_buckets:
            raise ValueError("max_period_buckets must be > min_period_buckets")
        if self.min_period_buckets <= self.max_dip_buckets:
            raise ValueError("min_period_buckets must exceed max_dip_buckets (a dip is shorter)")


@dataclass(frozen=True)
class Cycle(JsonState):
    """One learned dip schedule.

    ``period`` (buckets, fractional), ``anchor`` (first bucket of the latest
    dip on the schedule), ``dip_buckets`` (longest dip seen on it),
    ``tolerance`` (half-width of the prediction window, buckets), ``strength``
    (the autocorrelation peak), ``repeats`` (events on the schedule).
    """

    period: float
    anchor: int
    dip_buckets: int
    tolerance: float
    strength: float
    repeats: int

    def window(self, cycles_ahead: int) -> tuple[float, float]:
        """First and last bucket of the window predicted ``cycles_ahead`` periods past the anchor.

        The half-width grows with √cycles_ahead: schedule jitter accumulates.
        """
        centre = self.anchor + cycles_ahead * self.period
        half = self.tolerance * math.sqrt(cycles_ahead)
        return centre - half, centre + half + self.dip_buckets - 1


@dataclass(frozen=True)
class CycleState(JsonState):
    """Learner state of one job: level window, open dip run, recent events, fitted cycles."""

    last_bucket: int | None = None
    level_window: tuple[float, ...] = checked((), each(real_rule(above=0)))
    dip_start: int | None = None
    events: tuple[DipEvent, ...] = ()
    cycles: tuple[Cycle, ...] = ()


def step_cycles(
    state: CycleState, throughput: float, params: CycleParams, *, bucket: int
) -> CycleState:
    """Fold one bucket's throughput into ``state`` (refits when a dip event closes).

    ``bucket`` must increase from call to call. A missing throughput (NaN,
    non-positive) only moves the clock; an open dip stays open.
    """
    if not is_int(bucket):
        raise ValueError(f"bucket must be an int, got {bucket!r}")
    bucket = int(bucket)
    if state.last_bucket is not None and bucket <= state.last_bucket:
        raise ValueError(f"bucket {bucket} is not after the last one ({state.last_bucket})")
    value = float(throughput)
    if not (math.isfinite(value) and value > 0):
        return replace(state, last_bucket=bucket)

    window = state.level_window
    warm = len(window) >= min(5, params.level_buckets)
    level = statistics.median(window) if warm else math.nan
    dipping = warm and value < level * (1.0 - params.dip_depth)

    if dipping:
        start = bucket if state.dip_start is None else state.dip_start
        if bucket - start + 1 > params.max_dip_buckets:
            # Too long for a dip: the level itself moved. Learn the new level afresh.
            return replace(state, last_bucket=bucket, level_window=(value,), dip_start=None)
        return replace(state, last_bucket=bucket, dip_start=start)

    window = (*window, value)[-params.level_buckets :]
    if state.dip_start is None:
        return replace(state, last_bucket=bucket, level_window=window)
    event = (state.dip_start, bucket - state.dip_start)
    events = (*state.events, event)[-params.max_events :]
    horizon = bucket - params.history_bins * params.downsample
    events = tuple(e for e in events if e[0] > horizon)
    return CycleState(
        last_bucket=bucket,
        level_window=window,
        dip_start=None,
        events=events,
        cycles=fit_cycles(events, bucket, params),
    )


def expected_dip(state: CycleState, bucket: int, params: CycleParams) -> int:
    """Length (buckets) of the dip predicted to cover ``bucket``; 0 when none is due."""
    longest = 0
    for cycle in state.cycles:
        ahead = round((bucket - cycle.anchor) / cycle.period)
        for m in (ahead - 1, ahead, ahead + 1):
            if not 1 <= m <= params.max_ahead:
                continue
            first, last = cycle.window(m)
            if first <= bucket <= last:
                longest = max(longest, cycle.dip_buckets)
    return longest


def is_expected_dip(state: CycleState, bucket: int, params: CycleParams) -> bool:
    """Whether a learned schedule predicts a dip at ``bucket``."""
    return expected_dip(state, bucket, params) > 0


def fit_cycles(events: Sequence[DipEvent], now: int, params: CycleParams) -> tuple[Cycle, ...]:
    """Up to ``max_cycles`` schedules in ``events`` (each fitted on what the others left)."""
    remaining = sorted(events)
    found: list[Cycle] = []
    while len(found) < params.max_cycles and len(remaining) >= params.min_repeats:
        fitted = _fit_one(remaining, now, params)
        if fitted is None:
            break
        cycle, members = fitted
        found.append(cycle)
        remaining = [e for e in remaining if e not in members]
    return tuple(found)


def _fit_one(
    events: Sequence[DipEvent], now: int, params: CycleParams
) -> tuple[Cycle, set[DipEvent]] | None:
    ds = params.downsample
    first = events[0][0]
    n_bins = (now - first) // ds + 1
    series = np.zeros(n_bins)
    for start, length in events:
        series[(start - first) // ds : (start + max(length, 1) - 1 - first) // ds + 1] = 1.0
    acf = _autocorrelation(series)

    lo = max(1, math.ceil(params.min_period_buckets / ds))
    hi = min(params.max_period_buckets // ds, (n_bins - 1) // (params.min_repeats - 1))
    if hi < lo:
        return None
    summed = np.array(
        [
            acf[max(lag - w, 1) : lag + w + 1].sum()
            for lag in range(lo, hi + 1)
            for w in (_half_width(lag, params),)
        ]
    )
    if summed.size == 0 or not np.isfinite(summed).any():
        return None
    best = float(np.nanmax(summed))
    if best < params.min_acf:
        return None
    candidates = np.flatnonzero(summed >= max(_HARMONIC_SHARE * best, params.min_acf))
    first_lag = lo + int(candidates[0])
    # The first candidate may sit on the flank of its (jitter-widened) peak: take the
    # strongest sum within reach, then the centroid of the correlation under it.
    w = _half_width(first_lag, params)
    reach = range(first_lag, min(first_lag + w, hi) + 1)
    peak = max(reach, key=lambda lag: summed[lag - lo])
    strength = float(summed[peak - lo])
    w = _half_width(peak, params)
    window = np.arange(max(peak - w, 1), min(peak + w, n_bins - 1) + 1)
    weight = np.maximum(acf[window], 0.0)
    lag = float((window * weight).sum() / weight.sum()) if weight.sum() > 0 else float(peak)
    return _chain(events, lag * ds, strength, params)


def _half_width(lag: int, params: CycleParams) -> int:
    """Bins either side of ``lag`` that schedule jitter can move a repeat to."""
    return max(params.jitter_bins, round(params.tolerance * lag))


def _autocorrelation(series: FloatArray) -> FloatArray:
    """Unbiased autocorrelation r[k] = c[k]/(n−k) ÷ c[0]/n of a mean-removed series."""
    n = len(series)
    x = series - series.mean()
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(x, size)
    cov = np.fft.irfft(spectrum * np.conj(spectrum), size)[:n]
    if cov[0] <= 0:
        return np.zeros(n)
    unbiased = cov / (n - np.arange(n))
    result: FloatArray = unbiased / (cov[0] / n)
    return result


def _chain(
    events: Sequence[DipEvent], period: float, strength: float, params: CycleParams
) -> tuple[Cycle, set[DipEvent]] | None:
    """Events on the comb of ``period`` (walking back from a recent one), refined by a line fit."""
    # Consecutive gaps of a schedule jittered by ±tolerance differ by up to twice that
    # from each other; 1.5x keeps the chain whole without admitting strays.
    tol = max(
        params.min_tolerance_buckets,
        1.5 * params.tolerance * period,
        params.jitter_bins * params.downsample,
    )
    best: list[tuple[DipEvent, int]] = []
    for head in range(len(events) - 1, max(len(events) - 4, -1), -1):
        chain = [(events[head], 0)]
        step = period  # re-estimated from the chain as it grows
        for event in reversed(events[:head]):
            gap = chain[-1][0][0] - event[0]
            m = round(gap / step)
            if 1 <= m <= params.max_ahead and abs(gap - m * step) <= tol * math.sqrt(m):
                chain.append((event, chain[-1][1] - m))
                step = (events[head][0] - event[0]) / -chain[-1][1]
        if len(chain) > len(best):
            best = chain
    if len(best) < params.min_repeats:
        return None
    starts = np.array([e[0] for e, _ in best], dtype=np.float64)
    index = np.array([k for _, k in best], dtype=np.float64)
    slope, intercept = np.polyfit(index, starts, 1)
    resid = starts - (slope * index + intercept)
    spread = _MAD_TO_SIGMA * float(np.median(np.abs(resid - np.median(resid))))
    tolerance = max(params.min_tolerance_buckets, params.tolerance * slope, 3.0 * spread)
    members = {e for e, _ in best}
    anchor = max(e[0] for e in members)
    cycle = Cycle(
        period=float(slope),
        anchor=anchor,
        dip_buckets=max(e[1] for e in members),
        tolerance=float(tolerance),
        strength=strength,
        repeats=len(members),
    )
    return cycle, members
