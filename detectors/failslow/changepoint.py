"""Job slowdown: online Bayesian change points in throughput, confirmed by GREYHOUND's rule.

Input: one throughput figure per 30-s bucket for a job (tokens/s, samples/s or
1 / iteration time — higher is better). The detector works on ``log``
throughput, so a shift is relative whatever the unit and a 10 % drop looks the
same on a 1 K tokens/s job as on a 10 M one.

**BOCPD** (Adams & MacKay, 2007). After every bucket the detector holds the
posterior over the *run length* r — how many of the latest buckets belong to
the current regime. Each regime is Normal with unknown mean and variance under
a Normal-Gamma prior (``kappa0``, ``alpha0``, ``beta0 = alpha0 · prior_noise²``,
mean = log of the first bucket), so the predictive of the next bucket given the
last r is a Student-t:

    kappa = kappa0 + r                     mu    = (kappa0·mu0 + Σx) / kappa
    alpha = alpha0 + r/2                   beta  = beta0 + S/2 + kappa0·r·(x̄ − mu0)² / (2·kappa)
    x_next ~ t(2·alpha, mu, beta·(kappa + 1) / (alpha·kappa))

with S the sum of squared deviations of the run. With a constant hazard
H = 1 / ``hazard_buckets``, the run grows (prob ∝ p(r) · (1 − H) · t_r(x)) or a
new run starts with this bucket (∝ H · t_0(x), the prior predictive). The run
length is truncated at ``max_run_length``: a longer run is scored on its last
``max_run_length`` buckets (a sliding window), so the state is bounded. The
most probable run length gives the regime start; a start later than the
current normal regime's start is a *change* (``ChangeVerdict.changed``).

**Confirmation** (GREYHOUND: the shift exceeds 10 % and lasts). A change is
*confirmed* when, against the *reference* — the median of up to
``reference_buckets`` buckets before it (expected dips left out) —

1. the changed segment has lasted ``sustain_buckets`` buckets (default 3 =
   90 s: the onset bucket and two more), or one bucket longer than a periodic
   dip predicted for any of its buckets (``expected_dip``, from
   :mod:`detectors.failslow.cycles`) — a checkpoint or evaluation dip ends
   before it is confirmed;
2. the segment mean is ``min_shift`` (10 %) away from the reference, allowing
   for estimation noise: it may fall short by up to ``shift_sigmas`` standard
   errors of the difference of the two means, but never by more than
   ``max_shortfall`` of ``min_shift`` (so a 5 % step is never confirmed, while a
   true 10 % step is not lost half of the time to noise);
3. each of the last ``sustain_buckets`` buckets is at least
   ``bucket_fraction · min_shift`` away on the same side (a two-bucket dip and
   one normal bucket do not average into a "sustained" shift).

A confirmed *drop* opens an **episode**: it stays confirmed (magnitude = the
current regime's shift from the pre-episode reference) until the mean of the
last ``sustain_buckets`` buckets is back within ``min_shift · (1 −
max_shortfall)`` of the reference. A confirmed *rise* is reported for that
bucket and then adopted as the new normal.

State is a frozen :class:`ChangePointState`; :func:`step_changepoint` returns
a new state and a :class:`ChangeVerdict`. ``to_dict`` is JSON-safe.

>>> import numpy as np
>>> rng = np.random.default_rng(7)
>>> series = 1000.0 * (1 + 0.01 * rng.standard_normal(60))
>>> series[40:] *= 0.8                              # a 20 % drop at bucket 40
>>> state, params = ChangePointState(), ChangePointParams()
>>> for bucket, tput in enumerate(series):
...     state, verdict = step_changepoint(state, float(tput), params, bucket=bucket)
...     if verdict.confirmed:
...         break
>>> verdict.bucket, verdict.since_bucket, verdict.direction, round(verdict.magnitude, 2)
(42, 40, 'down', 0.2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal

import numpy as np

from detectors.arrays import FloatArray
from detectors.checks import Checked, each, int_rule, integer, is_int, maybe, real, real_rule, rule
from detectors.state_codec import JsonState

__all__ = [
    "ChangePointParams",
    "ChangePointState",
    "ChangeVerdict",
    "Direction",
    "Episode",
    "step_changepoint",
]

Direction = Literal["down", "up"]

_MAD_TO_SIGMA = 1.4826
_MEDIAN_VARIANCE = math.pi / 2.0  # variance of a normal sample's median / that of its mean


@dataclass(frozen=True)
class ChangePointParams(Checked):
    """Prior, hazard and confirmation rule of :func:`step_changepoint`.

    ``hazard_buckets``: prior mean run length λ (hazard 1/λ; 240 = 2 h).
    ``max_run_length``: run-length truncation and history kept (bounded state).
    ``prior_noise``: prior guess of the bucket-to-bucket relative noise (σ0);
    ``alpha0`` its weight in pseudo-observations × 2, ``kappa0`` the weight of
    the prior mean (small: a new regime may sit anywhere). ``min_shift``:
    GREYHOUND's 10 %. ``sustain_buckets``: buckets a shift must last (3 → the
    change is confirmed on the third bucket after onset, 90 s). ``shift_sigmas``
    / ``max_shortfall`` / ``bucket_fraction``: see the module docstring.
    ``reference_buckets``: buckets before the change whose median is the
    reference; at least ``min_reference_buckets`` are needed (else the previous
    regime's reference is used, and before any, nothing is confirmed).
    ``noise_buckets``: buckets before the change the noise is estimated from;
    ``min_noise``: floor of that estimate (relative).
    """

    hazard_buckets: float = real(240.0, above=1)
    max_run_length: int = integer(240)
    prior_noise: float = real(0.02, above=0)
    alpha0: float = real(1.0, above=0)
    kappa0: float = real(0.01, above=0)
    min_shift: float = real(0.10, above=0, below=1)
    sustain_buckets: int = integer(3)
    shift_sigmas: float = real(3.0, at_least=0)
    max_shortfall: float = real(0.3, at_least=0, below=1)
    bucket_fraction: float = real(0.5, at_least=0, at_most=1)
    reference_buckets: int = integer(20)
    min_reference_buckets: int = integer(5, minimum=2)
    noise_buckets: int = integer(120)
    min_noise: float = real(0.002, above=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_reference_buckets > self.reference_buckets:
            raise ValueError("min_reference_buckets must be <= reference_buckets")
        if self.noise_buckets < self.reference_buckets:
            raise ValueError("noise_buckets must be >= reference_buckets")
        if self.max_run_length < self.sustain_buckets + self.noise_buckets:
            raise ValueError(
                "max_run_length must cover sustain_buckets + noise_buckets "
                f"({self.sustain_buckets + self.noise_buckets}), got {self.max_run_length}"
            )

    @property
    def hazard(self) -> float:
        return 1.0 / self.hazard_buckets

    @property
    def band(self) -> float:
        """Relative shift below which a level counts as back to normal (episode end)."""
        return self.min_shift * (1.0 - self.max_shortfall)


_EXPECTED_DIP = int_rule(minimum=0, numpy=False)  # kept in the state: a JSON int


@dataclass(frozen=True)
class Episode(JsonState):
    """A confirmed drop: ``reference`` and ``noise`` are in log units (centred on the origin)."""

    since_bucket: int
    confirmed_bucket: int
    reference: float = field(metadata=rule(real_rule()))
    noise: float = field(metadata=rule(real_rule()))


@dataclass(frozen=True)
class ChangePointState(JsonState):
    """Detector state of one job.

    ``origin``: log throughput of the first bucket (all levels are centred on
    it). ``run_probs``: run-length posterior, index i ↔ run length i + 1.
    ``history`` / ``history_buckets`` / ``history_dips``: the last
    ``max_run_length`` observed buckets (centred log value, bucket index,
    expected-dip length), oldest first. ``regime_start``: first bucket of the
    current normal regime. ``settled_since``: start of the latest BOCPD run that
    lasted and stayed at the regime's level (an outlier or a dip broke the run,
    not the level); runs starting no later are not changes. ``baseline``:
    (reference, noise) of the latest normal regime, the fallback when the
    regime is too young for its own reference.
    ``episode``: the open confirmed drop, if any.
    """

    last_bucket: int | None = None
    origin: float | None = field(default=None, metadata=rule(maybe(real_rule())))
    run_probs: tuple[float, ...] = field(default=(), metadata=rule(each(real_rule(at_least=0))))
    history: tuple[float, ...] = field(default=(), metadata=rule(each(real_rule())))
    history_buckets: tuple[int, ...] = ()
    history_dips: tuple[int, ...] = ()
    regime_start: int | None = None
    settled_since: int | None = None
    baseline: tuple[float, float] | None = field(
        default=None, metadata=rule(maybe(each(real_rule())))
    )
    episode: Episode | None = None

    def __post_init__(self) -> None:
        n = len(self.history)
        if len(self.history_buckets) != n or len(self.history_dips) != n:
            raise ValueError("history, history_buckets and history_dips must align")
        if len(self.run_probs) > n:
            raise ValueError("run_probs cannot be longer than the history")


@dataclass(frozen=True)
class ChangeVerdict(JsonState):
    """One bucket's verdict.

    ``changed``: BOCPD places the start of the current regime after the normal
    regime began (a candidate change, or an open episode). ``confirmed``: the
    GREYHOUND rule holds (a new rise, or an open drop episode). ``direction``
    and ``magnitude`` (relative, 0.2 = 20 %) describe the shift of the changed
    segment from the reference (None / 0.0 when nothing changed).
    ``run_length``: most probable run length in observed buckets.
    ``since_bucket``: first bucket of the changed segment (the episode's start
    while one is open), else of the normal regime. ``reason``: one line.
    """

    bucket: int
    changed: bool
    confirmed: bool
    direction: Direction | None
    magnitude: float
    run_length: int
    since_bucket: int | None
    reason: str = ""


def step_changepoint(
    state: ChangePointState,
    throughput: float,
    params: ChangePointParams,
    *,
    bucket: int,
    expected_dip: int = 0,
) -> tuple[ChangePointState, ChangeVerdict]:
    """Fold one bucket into ``state``; return the new state and the bucket's verdict.

    ``bucket`` must increase from call to call (gaps are allowed: missing
    buckets are simply not observed). A throughput that is not a finite
    positive number is *missing*: the state only records the bucket, and an
    open episode stays confirmed. ``expected_dip``: length in buckets of a
    periodic dip predicted to cover this bucket (0: none predicted).
    """
    if not is_int(bucket):
        raise ValueError(f"bucket must be an int, got {bucket!r}")
    bucket = int(bucket)
    if state.last_bucket is not None and bucket <= state.last_bucket:
        raise ValueError(f"bucket {bucket} is not after the last one ({state.last_bucket})")
    _EXPECTED_DIP("expected_dip", expected_dip)

    try:
        value = float(throughput)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        return _missing(state, bucket)

    log_value = math.log(value)
    origin = log_value if state.origin is None else state.origin
    y = log_value - origin
    probs = _update_run_probs(state, y, params)

    R = params.max_run_length
    history = (*state.history, y)[-R:]
    buckets = (*state.history_buckets, bucket)[-R:]
    dips = (*state.history_dips, expected_dip)[-R:]
    regime_start = bucket if state.regime_start is None else state.regime_start
    new = replace(
        state,
        last_bucket=bucket,
        origin=origin,
        run_probs=tuple(probs.tolist()),
        history=history,
        history_buckets=buckets,
        history_dips=dips,
        regime_start=regime_start,
    )
    run_length = int(np.argmax(probs)) + 1
    view = _View(np.asarray(history), buckets, dips, run_length)
    if state.episode is not None:
        return _step_episode(new, state.episode, view, params, bucket)
    return _step_normal(new, view, params, bucket, regime_start)


# -- internals -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _View:
    """The history as arrays plus the MAP run: ``since`` is a position in the history."""

    values: FloatArray
    buckets: Sequence[int]
    dips: Sequence[int]
    run_length: int
    since: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "since", len(self.values) - self.run_length)

    def position(self, bucket: int) -> int:
        """Position of the first history entry at or after ``bucket`` (0 if older)."""
        return int(np.searchsorted(np.asarray(self.buckets), bucket, side="left"))


def _missing(state: ChangePointState, bucket: int) -> tuple[ChangePointState, ChangeVerdict]:
    new = replace(state, last_bucket=bucket)
    run_length = int(np.argmax(state.run_probs)) + 1 if state.run_probs else 0
    ep = state.episode
    verdict = ChangeVerdict(
        bucket=bucket,
        changed=ep is not None,
        confirmed=ep is not None,
        direction="down" if ep is not None else None,
        magnitude=0.0,
        run_length=run_length,
        since_bucket=ep.since_bucket if ep is not None else state.regime_start,
        reason="no throughput this bucket" + ("; episode held open" if ep else ""),
    )
    return new, verdict


def _update_run_probs(state: ChangePointState, y: float, params: ChangePointParams) -> FloatArray:
    """One BOCPD step: the run-length posterior after observing ``y``."""
    if not state.run_probs:
        return np.ones(1)
    prev = np.asarray(state.run_probs)
    hist = np.asarray(state.history)
    # Run length n (0..len(prev)) of the *previous* run uses its last n observations.
    log_pred = _log_predictive(y, hist[::-1][: len(prev)], params)
    with np.errstate(divide="ignore"):
        log_prev = np.log(prev)
    h = params.hazard
    growth = log_prev + math.log1p(-h) + log_pred[1:]
    start = math.log(h) + log_pred[0]
    log_post = np.concatenate(([start], growth))
    if len(log_post) > params.max_run_length:  # fold run lengths beyond R into R
        keep = params.max_run_length
        log_post[keep - 1] = np.logaddexp(log_post[keep - 1], log_post[keep:].max())
        log_post = log_post[:keep]
    log_post -= log_post.max()
    post = np.exp(log_post)  # a run length of probability 0 stays 0.0 (JSON-safe)
    result: FloatArray = post / post.sum()
    return result


def _log_predictive(y: float, recent_first: FloatArray, params: ChangePointParams) -> FloatArray:
    """Student-t log predictive of ``y`` under run lengths 0..len(recent_first)."""
    n = np.arange(len(recent_first) + 1, dtype=np.float64)
    s1 = np.concatenate(([0.0], np.cumsum(recent_first)))
    s2 = np.concatenate(([0.0], np.cumsum(recent_first * recent_first)))
    mean = np.divide(s1, n, out=np.zeros_like(s1), where=n > 0)
    ss = np.maximum(s2 - s1 * mean, 0.0)
    k0, a0 = params.kappa0, params.alpha0
    b0 = a0 * params.prior_noise**2
    kappa = k0 + n
    mu = s1 / kappa  # prior mean 0: the origin
    alpha = a0 + n / 2.0
    beta = b0 + ss / 2.0 + k0 * n * mean * mean / (2.0 * kappa)
    nu = 2.0 * alpha
    scale2 = beta * (kappa + 1.0) / (alpha * kappa)
    norm = _t_log_norm(a0, params.max_run_length)[: len(n)]
    out: FloatArray = (
        norm
        - 0.5 * np.log(nu * math.pi * scale2)
        - (nu + 1.0) / 2.0 * np.log1p((y - mu) ** 2 / (nu * scale2))
    )
    return out


@lru_cache(maxsize=16)
def _t_log_norm(alpha0: float, n_max: int) -> FloatArray:
    """lgamma((ν+1)/2) − lgamma(ν/2) for ν = 2·alpha0 + n, n = 0..n_max (memoised, read-only)."""
    table = np.array(
        [
            math.lgamma(alpha0 + n / 2.0 + 0.5) - math.lgamma(alpha0 + n / 2.0)
            for n in range(n_max + 1)
        ]
    )
    table.flags.writeable = False
    return table


def _reference(
    view: _View, end: int, start: int, params: ChangePointParams
) -> tuple[float, float, int] | None:
    """(median, noise, count) of the regime's non-dip buckets in [start, end).

    The level is the median of the last ``reference_buckets`` of them; the
    noise comes from the last ``noise_buckets`` (a longer window: a noise
    estimate from 20 buckets is itself too noisy to size a margin with).
    """
    lo = max(start, end - params.noise_buckets)
    if end - lo < params.min_reference_buckets:
        return None
    window = view.values[lo:end][np.asarray(view.dips[lo:end]) == 0]
    recent = window[-params.reference_buckets :]
    if len(recent) < params.min_reference_buckets:
        return None
    return _median(recent), _noise(window, params), len(recent)


def _noise(window: FloatArray, params: ChangePointParams) -> float:
    """Robust bucket noise (log units): MAD of first differences / √2 (drift-proof)."""
    diffs = np.diff(window)
    if len(diffs) < 2:
        return params.prior_noise
    mad = _median(np.abs(diffs - _median(diffs)))
    return max(_MAD_TO_SIGMA * mad / math.sqrt(2.0), params.min_noise)


def _median(values: FloatArray) -> float:
    """Median of a short non-empty array (np.median's overhead dominates at this size)."""
    ordered = np.sort(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return float(0.5 * (ordered[mid - 1] + ordered[mid]))


def _step_normal(
    state: ChangePointState,
    view: _View,
    params: ChangePointParams,
    bucket: int,
    regime_start: int,
) -> tuple[ChangePointState, ChangeVerdict]:
    regime_pos = view.position(regime_start)
    since_bucket = view.buckets[view.since]
    settled = regime_start if state.settled_since is None else state.settled_since
    capped = view.run_length >= params.max_run_length  # the run reaches past the history
    if capped or since_bucket <= max(regime_start, settled):
        return state, ChangeVerdict(
            bucket, False, False, None, 0.0, view.run_length, regime_start, "no change"
        )

    ref = _reference(view, view.since, regime_pos, params)
    if ref is None and state.baseline is not None:
        ref = (state.baseline[0], state.baseline[1], params.min_reference_buckets)
    if ref is None:
        return state, ChangeVerdict(
            bucket,
            True,
            False,
            None,
            0.0,
            view.run_length,
            since_bucket,
            "change, but no reference yet (warming up)",
        )
    level, noise, n_ref = ref
    segment = view.values[view.since :]
    delta = float(segment.mean()) - level
    rel = math.expm1(delta)
    direction: Direction = "down" if rel < 0 else "up"
    needed = max(params.sustain_buckets, 1 + max(view.dips[view.since :]))
    ok, why = _confirms(segment, level, noise, n_ref, needed, params)
    if not ok and needed < len(segment) <= needed + 2:
        # The run may have begun at a stray bucket just before the real onset (the
        # posterior's start is one bucket early); the latest `needed` buckets alone
        # may then carry the shift.
        tail = segment[-needed:]
        if _confirms(tail, level, noise, n_ref, needed, params)[0]:
            ok, segment, since_bucket = True, tail, view.buckets[-needed]
            rel = math.expm1(float(tail.mean()) - level)
    if not ok:
        if len(segment) >= needed and abs(rel) < params.band:
            # The run lasted and sits at the regime's level: an outlier or a dip
            # broke the previous run, not the level.
            settled_state = replace(state, settled_since=since_bucket)
            return settled_state, ChangeVerdict(
                bucket,
                False,
                False,
                None,
                0.0,
                view.run_length,
                regime_start,
                f"run since bucket {since_bucket} is at the usual level ({rel * 100:+.1f} %)",
            )
        return state, ChangeVerdict(
            bucket,
            True,
            False,
            direction,
            abs(rel),
            view.run_length,
            since_bucket,
            f"change of {rel * 100:+.1f} % since bucket {since_bucket}, not confirmed: {why}",
        )
    reason = (
        f"{'drop' if rel < 0 else 'rise'} of {abs(rel) * 100:.1f} % since bucket "
        f"{since_bucket}, sustained {len(segment)} buckets"
    )
    if direction == "down":
        episode = Episode(since_bucket, bucket, level, noise)
        new = replace(state, episode=episode)
    else:  # a rise is the new normal
        new = replace(
            state,
            regime_start=since_bucket,
            settled_since=None,
            baseline=(float(segment.mean()), noise),
        )
    return new, ChangeVerdict(
        bucket, True, True, direction, abs(rel), view.run_length, since_bucket, reason
    )


def _confirms(
    segment: FloatArray,
    level: float,
    noise: float,
    n_ref: int,
    needed: int,
    params: ChangePointParams,
) -> tuple[bool, str]:
    m = len(segment)
    if m < needed:
        return False, f"lasted {m} of {needed} buckets"
    delta = float(segment.mean()) - level
    rel = math.expm1(delta)
    # The reference is a median: its variance is π/2 that of a mean of n_ref.
    se_rel = math.exp(delta) * noise * math.sqrt(1.0 / m + _MEDIAN_VARIANCE / n_ref)
    shift = abs(rel)
    if shift < params.band:
        return False, f"shift {shift * 100:.1f} % below {params.band * 100:.1f} %"
    if shift + params.shift_sigmas * se_rel < params.min_shift:
        return False, (
            f"shift {shift * 100:.1f} % ± {se_rel * 100:.1f} % short of "
            f"{params.min_shift * 100:.0f} %"
        )
    last = np.expm1(segment[-params.sustain_buckets :] - level)
    floor = params.bucket_fraction * params.min_shift
    same_side = last * math.copysign(1.0, rel)
    if (same_side < floor).any():
        return False, "not sustained in every recent bucket"
    return True, ""


def _step_episode(
    state: ChangePointState, ep: Episode, view: _View, params: ChangePointParams, bucket: int
) -> tuple[ChangePointState, ChangeVerdict]:
    start = max(view.since, view.position(ep.since_bucket))
    level = float(view.values[start:].mean())
    rel = math.expm1(level - ep.reference)
    k = params.sustain_buckets
    recent = view.values[-k:]
    recent_rel = math.expm1(float(recent.mean()) - ep.reference)
    recovered = len(view.values) >= k and recent_rel > -params.band
    if view.buckets[-k] <= ep.since_bucket:
        recovered = False  # the episode's own first buckets cannot end it
    if recovered:
        regime_start = view.buckets[-k]
        new = replace(
            state,
            episode=None,
            regime_start=regime_start,
            settled_since=None,
            baseline=(ep.reference, ep.noise),
        )
        return new, ChangeVerdict(
            bucket,
            True,
            False,
            "up",
            abs(recent_rel),
            view.run_length,
            regime_start,
            f"recovered to {recent_rel * 100:+.1f} % of the reference since bucket "
            f"{regime_start}; episode from bucket {ep.since_bucket} closed",
        )
    return state, ChangeVerdict(
        bucket,
        True,
        True,
        "down",
        max(-rel, 0.0),
        view.run_length,
        ep.since_bucket,
        f"slow since bucket {ep.since_bucket}: {rel * 100:+.1f} % vs the reference",
    )
