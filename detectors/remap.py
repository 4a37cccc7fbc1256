"""Row remapping per GPU: the hard flags at once, correctable-row creep by robust trend.

A GPU memory bank has 8 spare rows; the driver remaps a row that shows ECC
errors onto a spare. dcgm-exporter reports per GPU
``DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS``, ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``,
``DCGM_FI_DEV_ROW_REMAP_FAILURE`` and (where exported) the pending flag. The
source report shows the two faces of the same metric:

* **Critical at once.** Uncorrectable remapped rows rising was followed by XID 94
  (contained ECC error) immediately; ROW_REMAP_FAILURE (a bank needs a ninth
  remap, a remapped row failed again, or all 512 spares are used) means the GPU
  must be replaced; a pending remap takes effect only at the next GPU reset.
  These are judged on every sample, no trend needed:

  ======================  ==================================  ===============
  kind                    condition                           action
  ======================  ==================================  ===============
  ``failure``             ROW_REMAP_FAILURE set               CONTACT_SUPPORT
  ``uncorrectable``       uncorrectable count went up         CONTACT_SUPPORT
  ``pending``             remap pending set                   RESET_GPU
  ======================  ==================================  ===============

* **Warning days ahead.** One GPU's *correctable* remaps crept for ~7 weeks, then
  passed 200 rows in one week (254 in all) with no XID, and the GPU fell off the
  host. NVIDIA calls correctable remaps harmless one by one; the *acceleration*
  is the signal. ``creep`` is a warning (action CONTACT_SUPPORT: swap the GPU
  before it drops) when the recent rate is at least ``min_rate_per_day``, the
  count rose in at least ``min_rising_steps`` of the recent steps, and

  - it is ``accel_ratio`` times the older rate (the older rate floored at
    ``baseline_floor_per_day``, so a quiet history does not make any uptick an
    infinite ratio) — "accelerating", which needs an older rate to compare, or
  - at that rate the ``concerning_rows`` count (already passed counts as 0 h) or
    the ``limit_rows`` hard limit is reached within ``horizon_ms`` — "fast".

How the trend is measured. Every sample updates the open *step* (1 h by
default) in O(1); the value of a step is its last valid correctable count.
When a sample opens a later step, the closed step becomes one point of a
``window_ms`` series (14 d = 336 points at most, kept run-length encoded since
a counter is flat most of the time) and the trend runs once:

* rates are Theil–Sen slopes (median of all pairwise slopes, rows/day). A
  counter of rare, lumpy jumps is a staircase: least squares chases each jump,
  while the pairwise median needs the rise to be spread over most of the pairs
  — a single burst of J rows moves a window of D days by about J/D rows/day at
  most, and up to ~29 % of the points can be arbitrary without moving it off
  the true line;
* acceleration compares the Theil–Sen slope of the last ``recent_ms`` (3 d)
  with that of the rest of the window (11 d before it). A second difference of
  a staircase is just its jumps (+J, then −J) and needs heavy smoothing before
  it says anything; two robust slopes are directly readable as rows/day. The
  recent part is 3 d rather than 7 d because the report's surge lasted one week
  and a warning is wanted >= 72 h before the end, while a pairwise median only
  follows a change once the change holds a good share of its span. On the
  synthetic report case (tests/unit/test_remap.py, 60 seeds, surge growing
  x1.6 a day) a 3-d part warns 88-120 h before the GPU vanishes, a 7-d part
  only 52-70 h;
* the rate of a few lumps is noise whatever the estimator: a slow phase of
  ~3 remap events a week sometimes puts 3 lumps into 3 days and a 3-d
  Theil–Sen near 6 rows/day. What a surge has and a lucky cluster has not is
  *many separate rising steps*: the slow phase showed at most 7 rising hours in
  any 3 d (80 seeds), the surge at least 11 by 72 h before the end. Hence
  ``min_rising_steps`` (8) next to ``min_rate_per_day`` (6);
* the maths only runs when the recent span is covered (>= ``min_coverage`` of
  its steps have a point); the O(n²) slopes only when the recent part rose in
  enough steps, so a healthy GPU (flat counter) costs an O(n) check per step.

Verdicts are *level* findings: ``observe`` returns the most severe finding that
stands after the sample (None when healthy), on every sample, so a caller can
map it to per-bucket alert evidence. Flags stand while set; an uncorrectable
rise and a creep warning stand for ``hold_ms`` after they were last seen.
All standing findings are in :attr:`RemapTracker.findings`.

A count that goes *down* means the GPU was replaced (new board, zero counts)
or the exporter was reset: the series restarts from that value, the creep and
uncorrectable findings of the old board are dropped, and nothing alerts.
Missing or non-finite values (NaN, None) are skipped field by field; samples
older than the last one are ignored.

>>> t = RemapTracker()
>>> t.observe(0, correctable=3, uncorrectable=0, failure_flag=0, pending=0) is None
True
>>> v = t.observe(30_000, correctable=3, uncorrectable=1, failure_flag=0, pending=1)
>>> (v.severity, v.kind, v.action, v.ts_ms)
('critical', 'uncorrectable', 'CONTACT_SUPPORT', 30000)
>>> [f.kind for f in t.findings]
['uncorrectable', 'pending']
>>> round(theil_sen_slope([0, 1, 2, 3, 4], [0, 2, 4, 100, 8]), 6)
2.0
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from detectors.arrays import FloatArray
from detectors.checks import Checked, integer, is_finite, real
from detectors.state_codec import JsonState, decode, from_data, hook, row_encoder
from detectors.vocabulary import AlertSeverity

__all__ = [
    "DAY_MS",
    "HOUR_MS",
    "MAX_WINDOW_STEPS",
    "RemapParams",
    "RemapTracker",
    "RemapTrend",
    "RemapVerdict",
    "theil_sen_slope",
]

Kind = Literal["creep", "uncorrectable", "pending", "failure"]
Action = Literal["RESET_GPU", "CONTACT_SUPPORT"]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
MAX_WINDOW_STEPS = 1024  # bounds the state (a few KB) and the O(n²) slope per step
STATE_SCHEMA = 1

# Most severe first: a failed bank needs a new board whatever else is true; an
# uncorrectable rise comes with a pending remap, and the rise is the stronger word.
_PRIORITY: tuple[Kind, ...] = ("failure", "uncorrectable", "pending", "creep")
_SEVERITY: Mapping[Kind, AlertSeverity] = {
    "failure": "critical",
    "uncorrectable": "critical",
    "pending": "critical",
    "creep": "warning",
}
_ACTION: Mapping[Kind, Action] = {
    "failure": "CONTACT_SUPPORT",
    "uncorrectable": "CONTACT_SUPPORT",
    "pending": "RESET_GPU",
    "creep": "CONTACT_SUPPORT",
}


@dataclass(frozen=True)
class RemapParams(Checked):
    """Knobs of one GPU's row-remap tracker (times in ms, rates in rows/day).

    ``step_ms``: downsampling step; one series point per step (its last valid
    count). ``window_ms``: history the trend sees (a multiple of the step, at
    most :data:`MAX_WINDOW_STEPS` steps). ``recent_ms``: the latest part of the
    window whose rate is compared with the part before it. ``min_coverage``:
    share of the recent steps that must have a point before the trend is judged.
    ``min_rate_per_day``: recent rate below which creep never warns (the
    report's slow phase was under 1 row/day, its surge ~30). ``min_rising_steps``:
    steps of the recent part in which the count must have risen before creep
    warns — a rate read off two or three lumps is noise, a surge rises hour
    after hour. ``accel_ratio``: how many
    times the older rate the recent one must be to count as accelerating;
    ``baseline_floor_per_day``: the older rate is taken as at least this.
    ``horizon_ms``: warn when the concerning count or the limit is projected
    within it. ``concerning_rows``: a count worth a look (64 = 1/8 of the
    spares); ``limit_rows``: every spare used (8 per bank, 512 per GPU).
    ``hold_ms``: how long an uncorrectable rise or a creep warning keeps standing
    after it was last seen (flags stand exactly while set).
    """

    step_ms: int = integer(HOUR_MS)
    window_ms: int = integer(14 * DAY_MS)
    recent_ms: int = integer(3 * DAY_MS)
    min_coverage: float = real(0.5, above=0, at_most=1)
    min_rate_per_day: float = real(6.0, above=0)
    min_rising_steps: int = integer(8)
    accel_ratio: float = real(3.0, above=1)
    baseline_floor_per_day: float = real(1.0, above=0)
    horizon_ms: int = integer(7 * DAY_MS, minimum=0)
    concerning_rows: int = integer(64)
    limit_rows: int = integer(512)
    hold_ms: int = integer(DAY_MS, minimum=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("window_ms", "recent_ms"):
            value = getattr(self, name)
            if value % self.step_ms:
                raise ValueError(
                    f"{name} must be a positive multiple of step_ms ({self.step_ms}), got {value}"
                )
        if self.recent_ms // self.step_ms < 2:
            raise ValueError(f"recent_ms must span >= 2 steps, got {self.recent_ms}")
        if self.window_ms // self.step_ms - self.recent_ms // self.step_ms < 2:
            raise ValueError(
                f"window_ms ({self.window_ms}) must exceed recent_ms ({self.recent_ms}) "
                "by >= 2 steps: the older rate needs points of its own"
            )
        if self.window_ms // self.step_ms > MAX_WINDOW_STEPS:
            raise ValueError(
                f"window_ms / step_ms must be <= {MAX_WINDOW_STEPS} (state size, O(n²) slope), "
                f"got {self.window_ms // self.step_ms}"
            )
        if self.min_rising_steps > self.recent_steps:
            raise ValueError(
                f"min_rising_steps must be <= recent steps ({self.recent_steps}), "
                f"got {self.min_rising_steps}"
            )
        if self.concerning_rows >= self.limit_rows:
            raise ValueError(
                f"concerning_rows must be < limit_rows ({self.limit_rows}), "
                f"got {self.concerning_rows}"
            )

    @property
    def window_steps(self) -> int:
        return self.window_ms // self.step_ms

    @property
    def recent_steps(self) -> int:
        return self.recent_ms // self.step_ms

    @property
    def min_recent_points(self) -> int:
        return max(2, math.ceil(self.min_coverage * self.recent_steps))


def theil_sen_slope(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Median of the slopes (y_j - y_i) / (x_j - x_i) over all pairs with x_i != x_j.

    O(n²) in time and memory: meant for a few hundred points (336: ~1 ms). Raises
    ``ValueError`` on non-finite or mismatched input or fewer than two distinct x.
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape:
        raise ValueError(f"x and y must be 1-D of one length, got {xs.shape} and {ys.shape}")
    if not (is_finite(xs) and is_finite(ys)):
        raise ValueError("x and y must be finite")
    # Every unordered pair with distinct x appears exactly once with dx > 0, sorted or not.
    dx = xs[None, :] - xs[:, None]
    forward = dx > 0
    if not forward.any():
        raise ValueError("Theil–Sen needs at least two distinct x values")
    dy = ys[None, :] - ys[:, None]
    return float(np.median(dy[forward] / dx[forward]))


def _slope_per_day(steps: FloatArray, values: FloatArray, step_ms: int) -> float:
    if values[0] == values[-1] and (values == values[0]).all():
        return 0.0  # the common case (healthy GPU): no pairs to sort
    return theil_sen_slope(steps * (step_ms / DAY_MS), values)


def _hours_to(target: int, value: int, rate_per_day: float) -> float | None:
    """Hours until ``value`` reaches ``target`` at ``rate_per_day``; 0 if reached, None if never."""
    if value >= target:
        return 0.0
    if rate_per_day <= 0:
        return None
    return (target - value) / rate_per_day * 24.0


def _fmt_hours(hours: float | None) -> str:
    if hours is None:
        return "never at this rate"
    if hours <= 0:
        return "already reached"
    if hours < 48:
        return f"in ~{hours:.0f} h"
    return f"in ~{hours / 24:.1f} d"


def _fmt_span(ms: int) -> str:
    return f"{ms / DAY_MS:g} d" if ms % DAY_MS == 0 else f"{ms / HOUR_MS:g} h"


@dataclass(frozen=True)
class RemapTrend:
    """The correctable-row trend at the last closed step.

    ``correctable``: the count at that step. Rates are Theil–Sen slopes in
    rows/day over the whole window, the recent part and the part before it
    (``older_slope_per_day`` None when that part has too few points);
    ``recent_rising_steps``: steps of the recent part in which the count rose. Projections
    use the recent rate (0 = already reached, None = not rising).
    ``accelerating``/``approaching``: the two warning conditions (see module doc).
    """

    ts_ms: int
    correctable: int
    slope_per_day: float
    recent_slope_per_day: float
    older_slope_per_day: float | None
    recent_rising_steps: int
    projected_hours_to_concerning: float | None
    projected_hours_to_limit: float | None
    accelerating: bool
    approaching: bool

    @property
    def warns(self) -> bool:
        return self.accelerating or self.approaching


@dataclass(frozen=True)
class RemapVerdict(JsonState):
    """One standing finding about one GPU.

    ``kind``: ``creep`` (warning) or ``uncorrectable`` / ``pending`` / ``failure``
    (critical). ``action``: RESET_GPU (pending: the remap takes effect at the
    next reset) or CONTACT_SUPPORT (replace the GPU). Slopes are rows/day of
    correctable remaps and ``projected_hours_to_limit`` the hours to
    ``limit_rows`` at the recent rate (None when unknown or not rising).
    ``correctable``/``uncorrectable``: the counts the finding was made on.
    ``ts_ms``: the sample that raised or last refreshed the finding (for
    creep, the sample that closed the step judged).
    """

    severity: AlertSeverity
    kind: Kind
    action: Action
    slope_per_day: float | None
    recent_slope_per_day: float | None
    projected_hours_to_limit: float | None
    reason: str
    ts_ms: int
    older_slope_per_day: float | None = None
    projected_hours_to_concerning: float | None = None
    correctable: int | None = None
    uncorrectable: int | None = None

    KEY_ORDER = (
        "severity",
        "kind",
        "action",
        "slope_per_day",
        "recent_slope_per_day",
        "older_slope_per_day",
        "projected_hours_to_limit",
        "projected_hours_to_concerning",
        "correctable",
        "uncorrectable",
        "reason",
        "ts_ms",
    )

    def restored(self) -> RemapVerdict:
        """Severity and action follow from the kind (as when the finding was made)."""
        return replace(self, severity=_SEVERITY[self.kind], action=_ACTION[self.kind])


@dataclass
class _Finding:
    verdict: RemapVerdict
    until_ms: int | None  # None: stands while its flag is set


def _finding_rows(findings: tuple[_Finding, ...]) -> list[dict[str, Any]]:
    """A finding persists as its verdict's keys after ``until_ms``."""
    return [{"until_ms": f.until_ms, **f.verdict.to_dict()} for f in findings] if findings else []


def _read_findings(data: Any, where: str) -> tuple[_Finding, ...]:
    if not isinstance(data, list):
        raise ValueError(f"{where} must be a list, got {type(data).__name__}")
    return tuple(
        _Finding(
            from_data(RemapVerdict, item, f"{where}[{i}]"),
            decode(int | None, item.get("until_ms"), f"{where}[{i}].until_ms"),
        )
        for i, item in enumerate(data)
    )


@dataclass(frozen=True)
class _RemapState(JsonState):
    """What a :class:`RemapTracker` persists (not its params: they come with ``from_dict``).

    ``open``: the open step and its value; ``runs``: the series' flat delta encoding
    (:meth:`_Series.to_list`); ``findings`` in priority order."""

    step_ms: int
    last_ts: int | None = None
    correctable: int | None = None
    uncorrectable: int | None = None
    open: tuple[int, int] | None = None
    runs: tuple[int, ...] = ()
    findings: tuple[_Finding, ...] = field(default=(), metadata=hook(_finding_rows, _read_findings))

    VERSION = ("schema", STATE_SCHEMA)
    LABEL = "RemapTracker"


# Written for every GPU each bucket: from the tracker's values, no _RemapState built.
_write_state = row_encoder(_RemapState)


def _non_negative(value: object) -> float | None:
    """``value`` as a finite non-negative number, or None when missing or junk."""
    if value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return number


def _count(value: object) -> int | None:
    """A remapped-row count, or None when missing / not a finite non-negative number."""
    if isinstance(value, bool):
        return None
    number = _non_negative(value)
    return None if number is None else round(number)


def _flag(value: object) -> bool | None:
    """A 0/1 flag (any positive number is set), or None when missing or junk."""
    if isinstance(value, bool):
        return value
    number = _non_negative(value)
    return None if number is None else number > 0


@dataclass
class _Series:
    """Downsampled correctable counts: runs of consecutive steps with one value."""

    runs: deque[list[int]] = field(default_factory=deque)  # [first_step, n_steps, value]
    open_step: int | None = None
    open_value: int = 0

    def append(self, step: int, value: int) -> None:
        if self.runs:
            last = self.runs[-1]
            if last[0] + last[1] == step and last[2] == value:
                last[1] += 1
                return
        self.runs.append([step, 1, value])

    def evict_before(self, first_kept: int) -> None:
        while self.runs and self.runs[0][0] + self.runs[0][1] <= first_kept:
            self.runs.popleft()
        if self.runs and self.runs[0][0] < first_kept:
            head = self.runs[0]
            head[1] -= first_kept - head[0]
            head[0] = first_kept

    def points(self, first_step: int) -> tuple[FloatArray, FloatArray]:
        """Steps and values of the points at or after ``first_step``."""
        steps: list[int] = []
        values: list[int] = []
        for start, n, value in self.runs:
            end = start + n
            if end <= first_step:
                continue
            lo = max(start, first_step)
            steps.extend(range(lo, end))
            values.extend([value] * (end - lo))
        return np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)

    def to_list(self) -> list[int]:
        """Flat delta encoding: first step, then per run ``n, rise`` (the first run's rise
        from 0), with ``-gap`` before a run that does not follow the previous one directly.
        A busy hour costs ~6 characters of JSON, a flat day nothing."""
        if not self.runs:
            return []
        flat = [self.runs[0][0]]
        prev_end, prev_value = self.runs[0][0], 0
        for start, n, value in self.runs:
            if start > prev_end:
                flat.append(prev_end - start)
            flat += [n, value - prev_value]
            prev_end, prev_value = start + n, value
        return flat

    @classmethod
    def from_list(cls, flat: Sequence[int]) -> _Series:
        series = cls()
        if not flat:
            return series
        items = [int(x) for x in flat]
        prev_end, prev_value, i = items[0], 0, 1
        while i < len(items):
            if items[i] < 0:
                prev_end -= items[i]
                i += 1
            if i + 1 >= len(items) or items[i] < 1:
                raise ValueError("malformed series runs")
            n, value = items[i], prev_value + items[i + 1]
            series.runs.append([prev_end, n, value])
            prev_end, prev_value, i = prev_end + n, value, i + 2
        return series


class RemapTracker:
    """Row-remap state of one GPU; feed it every sample with :meth:`observe`.

    Cheap per sample (O(1) amortised); the trend runs once per closed step.
    ``to_dict`` is JSON-safe and small (the series is run-length and delta
    encoded: tens of bytes for a flat counter, ~2 KB at most for 14 hourly
    days that all differ); ``from_dict`` rebuilds a tracker that gives the same
    later verdicts.
    """

    def __init__(self, params: RemapParams | None = None) -> None:
        self._params = params if params is not None else RemapParams()
        self._last_ts: int | None = None
        self._correctable: int | None = None
        self._uncorrectable: int | None = None
        self._series = _Series()
        self._findings: dict[Kind, _Finding] = {}
        self._quiet: tuple[object, ...] | None = None  # the last sample taken (not state)

    @property
    def params(self) -> RemapParams:
        return self._params

    @property
    def findings(self) -> tuple[RemapVerdict, ...]:
        """Every standing finding, most severe first."""
        return tuple(self._findings[k].verdict for k in _PRIORITY if k in self._findings)

    @property
    def verdict(self) -> RemapVerdict | None:
        """The most severe standing finding, or None."""
        for kind in _PRIORITY:
            if kind in self._findings:
                return self._findings[kind].verdict
        return None

    def observe(
        self,
        ts_ms: int,
        correctable: float | None,
        uncorrectable: float | None,
        failure_flag: float | bool | None,
        pending: float | bool | None,
    ) -> RemapVerdict | None:
        """Take one sample; return the most severe finding standing after it (None if healthy).

        Any field may be None or NaN (skipped). A sample not newer than the
        last one changes nothing.
        """
        # (an int is always finite: the type test first spares the usual case is_finite's
        # isinstance tests)
        finite = type(ts_ms) is int or is_finite(ts_ms)
        if not finite or (self._last_ts is not None and ts_ms <= self._last_ts):
            return self.verdict
        ts = int(ts_ms)
        sample = (correctable, uncorrectable, failure_flag, pending)
        if (
            sample == self._quiet
            and not self._findings
            and ts // self._params.step_ms == self._series.open_step
        ):
            # The sample before said the same, nothing stands and the step is still open:
            # the full path below would change nothing but the time (nearly every sample
            # of a healthy GPU, on every node, every bucket).
            self._last_ts = ts
            return None
        self._last_ts = ts
        # plain floats only: 1.0 == True, but True is a flag and not a count
        plain = all(v is None or type(v) is float for v in sample)
        self._quiet = sample if plain else None
        self._expire(ts)
        c, u = _count(correctable), _count(uncorrectable)
        failed, pend = _flag(failure_flag), _flag(pending)

        went_down = (c is not None and self._correctable is not None and c < self._correctable) or (
            u is not None and self._uncorrectable is not None and u < self._uncorrectable
        )
        if went_down:
            self._restart()
        if c is not None:
            self._correctable = c
        if u is not None:
            previous = self._uncorrectable
            self._uncorrectable = u
            if previous is not None and u > previous:
                self._raise_uncorrectable(ts, previous, u)
        if c is not None:
            self._feed(ts, c)
        if failed is not None:
            self._set_flag("failure", failed, ts)
        if pend is not None:
            self._set_flag("pending", pend, ts)
        return self.verdict

    def trend(self) -> RemapTrend | None:
        """The full trend at the last closed step, or None while the recent span is not covered."""
        return self._trend(full=True)

    # -- internals --------------------------------------------------------------------------

    def _expire(self, ts: int) -> None:
        for kind in [k for k, f in self._findings.items() if f.until_ms is not None]:
            until = self._findings[kind].until_ms
            if until is not None and ts > until:
                del self._findings[kind]

    def _restart(self) -> None:
        """A count went down: a new board (or a reset exporter). Forget the old board's story."""
        self._series = _Series()
        self._correctable = None
        self._uncorrectable = None
        self._findings.pop("creep", None)
        self._findings.pop("uncorrectable", None)

    def _feed(self, ts: int, value: int) -> None:
        series, step = self._series, ts // self._params.step_ms
        if series.open_step is not None and step > series.open_step:
            series.append(series.open_step, series.open_value)
            series.evict_before(series.open_step - self._params.window_steps + 1)
            self._judge_creep(ts)
            series.open_step = None
        if series.open_step is None:
            series.open_step = step
        series.open_value = value  # counts only rise within a series: the last is the max

    def _judge_creep(self, ts: int) -> None:
        trend = self._trend(full=False)
        if trend is None or not trend.warns:
            return
        p = self._params
        recent_span, older_span = _fmt_span(p.recent_ms), _fmt_span(p.window_ms - p.recent_ms)
        older = (
            f"{trend.older_slope_per_day:+.1f} rows/day in the {older_span} before"
            if trend.older_slope_per_day is not None
            else "no earlier history to compare"
        )
        headline = "accelerating" if trend.accelerating else "fast"
        reason = (
            f"row-remap creep {headline}: {trend.correctable} correctable remapped rows, "
            f"{trend.recent_slope_per_day:+.1f} rows/day over the last {recent_span} "
            f"(rising in {trend.recent_rising_steps} of its {p.recent_steps} steps) vs {older}; "
            f"at this rate {p.concerning_rows} rows "
            f"{_fmt_hours(trend.projected_hours_to_concerning)}, the {p.limit_rows}-row limit "
            f"{_fmt_hours(trend.projected_hours_to_limit)}; plan a GPU swap before it drops "
            "off the bus (no XID warns first)"
        )
        verdict = RemapVerdict(
            severity="warning",
            kind="creep",
            action=_ACTION["creep"],
            slope_per_day=trend.slope_per_day,
            recent_slope_per_day=trend.recent_slope_per_day,
            projected_hours_to_limit=trend.projected_hours_to_limit,
            reason=reason,
            ts_ms=ts,
            older_slope_per_day=trend.older_slope_per_day,
            projected_hours_to_concerning=trend.projected_hours_to_concerning,
            correctable=trend.correctable,
            uncorrectable=self._uncorrectable,
        )
        self._findings["creep"] = _Finding(verdict, ts + p.hold_ms)

    def _trend(self, full: bool) -> RemapTrend | None:
        """Trend over the closed steps; with ``full=False`` stop early when it cannot warn."""
        p, runs = self._params, self._series.runs
        if not runs:
            return None
        last_step = runs[-1][0] + runs[-1][1] - 1
        recent_first = last_step - p.recent_steps + 1
        if runs[0][0] > recent_first:
            return None  # the recent span is not covered yet
        steps, values = self._series.points(last_step - p.window_steps + 1)
        in_recent = steps >= recent_first
        if int(in_recent.sum()) < p.min_recent_points:
            return None
        # Steps whose count rose, from the point before the recent span on (O(n), so first).
        rises = int(np.count_nonzero(np.diff(values)[in_recent[1:]] > 0))
        if not full and rises < p.min_rising_steps:
            return None
        recent = _slope_per_day(steps[in_recent], values[in_recent], p.step_ms)
        if not full and recent < p.min_rate_per_day:
            return None
        older_steps, older_values = steps[~in_recent], values[~in_recent]
        older = (
            _slope_per_day(older_steps, older_values, p.step_ms)
            if older_steps.size >= p.min_recent_points
            else None
        )
        overall = _slope_per_day(steps, values, p.step_ms)
        count = int(values[-1])
        to_concerning = _hours_to(p.concerning_rows, count, recent)
        to_limit = _hours_to(p.limit_rows, count, recent)
        horizon_h = p.horizon_ms / HOUR_MS
        fast_enough = recent >= p.min_rate_per_day and rises >= p.min_rising_steps
        baseline = max(older if older is not None else 0.0, p.baseline_floor_per_day)
        return RemapTrend(
            ts_ms=last_step * p.step_ms,
            correctable=count,
            slope_per_day=overall,
            recent_slope_per_day=recent,
            older_slope_per_day=older,
            recent_rising_steps=rises,
            projected_hours_to_concerning=to_concerning,
            projected_hours_to_limit=to_limit,
            accelerating=fast_enough and older is not None and recent >= p.accel_ratio * baseline,
            approaching=fast_enough
            and any(h is not None and h <= horizon_h for h in (to_concerning, to_limit)),
        )

    def _critical(self, kind: Kind, ts: int, reason: str) -> RemapVerdict:
        trend = self._trend(full=True)
        return RemapVerdict(
            severity="critical",
            kind=kind,
            action=_ACTION[kind],
            slope_per_day=None if trend is None else trend.slope_per_day,
            recent_slope_per_day=None if trend is None else trend.recent_slope_per_day,
            projected_hours_to_limit=None if trend is None else trend.projected_hours_to_limit,
            reason=reason,
            ts_ms=ts,
            older_slope_per_day=None if trend is None else trend.older_slope_per_day,
            projected_hours_to_concerning=(
                None if trend is None else trend.projected_hours_to_concerning
            ),
            correctable=self._correctable,
            uncorrectable=self._uncorrectable,
        )

    def _counts(self) -> str:
        def show(n: int | None) -> str:
            return "?" if n is None else str(n)

        return f"correctable {show(self._correctable)}, uncorrectable {show(self._uncorrectable)}"

    def _raise_uncorrectable(self, ts: int, previous: int, now: int) -> None:
        reason = (
            f"uncorrectable remapped rows rose {previous} → {now} ({self._counts()}): "
            "XID 94 (contained ECC error) expected next; replace the GPU"
        )
        verdict = self._critical("uncorrectable", ts, reason)
        self._findings["uncorrectable"] = _Finding(verdict, ts + self._params.hold_ms)

    def _set_flag(self, kind: Kind, is_set: bool, ts: int) -> None:
        if not is_set:
            self._findings.pop(kind, None)
            return
        if kind in self._findings:
            return  # standing since the sample that first showed it
        if kind == "failure":
            reason = (
                f"ROW_REMAP_FAILURE set ({self._counts()}): a bank is out of its 8 spare "
                f"rows, a remapped row failed again, or all {self._params.limit_rows} are "
                "used; replace the GPU"
            )
        else:
            reason = (
                f"row remap pending ({self._counts()}): it takes effect at the next GPU "
                "reset; reset the GPU, then retry the job"
            )
        self._findings[kind] = _Finding(self._critical(kind, ts, reason), None)

    # -- state ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state (the params are not included: pass them to :meth:`from_dict`)."""
        series, findings = self._series, self._findings
        return _write_state(
            (
                self._params.step_ms,
                self._last_ts,
                self._correctable,
                self._uncorrectable,
                None if series.open_step is None else (series.open_step, series.open_value),
                series.to_list(),
                [findings[k] for k in _PRIORITY if k in findings] if findings else (),
            )
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], params: RemapParams | None = None) -> RemapTracker:
        """Rebuild a tracker. A state saved with another ``step_ms`` keeps its counts and
        findings but restarts the series (its points cannot be re-binned)."""
        state = from_data(_RemapState, data, "RemapTracker")
        tracker = cls(params)
        tracker._last_ts = state.last_ts
        tracker._correctable = state.correctable
        tracker._uncorrectable = state.uncorrectable
        if state.step_ms == tracker._params.step_ms:
            tracker._series = _Series.from_list(state.runs)
            if state.open is not None:
                tracker._series.open_step, tracker._series.open_value = state.open
        tracker._findings = {f.verdict.kind: f for f in state.findings}
        return tracker
