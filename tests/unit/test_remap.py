"""detectors.remap: report's creep case, critical flags, counter resets, Theil–Sen, state."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.remap import (
    DAY_MS,
    HOUR_MS,
    RemapParams,
    RemapTracker,
    RemapVerdict,
    theil_sen_slope,
)

FIVE_MIN = 300_000
SCRAPE = 30_000
LEAD_TARGET_MS = 72 * HOUR_MS  # DESIGN.md §8: row-remap creep >= 72 h ahead


@dataclass(frozen=True)
class CreepCase:
    """The report's gpu124, synthesised: samples until the GPU vanishes from the host."""

    ts: np.ndarray
    correctable: np.ndarray
    surge_start_ms: int
    vanish_ms: int


def report_creep(seed: int, sample_ms: int = FIVE_MIN, shape: str = "accelerating") -> CreepCase:
    """~7 weeks of slow lumpy creep, then > 200 rows in one week up to 254, then silence.

    Slow phase: Poisson remap events, 3 a week, 1-3 rows each (≈ 40 rows in 49 d,
    the report's "slow for 55 days"). Surge: the rest up to 254 in 7 days, in
    lumps of 1-4 rows at random times; ``accelerating`` grows the daily share
    x1.6 a day (a slow first day or two), ``linear`` spreads it evenly. Events fall
    on a 5-min grid, so 30-s and 5-min sampling see the same hourly values. The GPU
    vanishes right after the 254th row: the earliest plausible moment, so the
    lead measured here is the least the report's case allows.
    """
    rng = np.random.default_rng(seed)
    surge_start = 49 * DAY_MS
    n_slow = rng.poisson(3 * 7)
    times = list(rng.uniform(0, surge_start, n_slow).astype(np.int64))
    rows = list(rng.integers(1, 4, n_slow))
    surge_rows = 254 - sum(rows)
    weights = 1.6 ** np.arange(7) if shape == "accelerating" else np.ones(7)
    daily = np.floor(weights / weights.sum() * surge_rows).astype(int)
    daily[-1] += surge_rows - daily.sum()
    for day, total in enumerate(daily):
        left = int(total)
        while left > 0:
            lump = min(left, int(rng.integers(1, 5)))
            times.append(surge_start + day * DAY_MS + int(rng.uniform(0, DAY_MS - HOUR_MS)))
            rows.append(lump)
            left -= lump
    order = np.argsort(times, kind="stable")
    event_ts = np.asarray(times, dtype=np.int64)[order] // FIVE_MIN * FIVE_MIN
    cumulative = np.concatenate([[0], np.cumsum(np.asarray(rows)[order])])
    ts = np.arange(0, int(event_ts[-1]) + sample_ms, sample_ms, dtype=np.int64)
    counts = cumulative[np.searchsorted(event_ts, ts, side="right")]
    assert counts[-1] == 254
    return CreepCase(ts, counts, surge_start, int(ts[-1]) + sample_ms)  # first missing sample


def feed(tracker: RemapTracker, case: CreepCase) -> Iterator[tuple[int, RemapVerdict | None]]:
    for ts, count in zip(case.ts.tolist(), case.correctable.tolist(), strict=True):
        yield ts, tracker.observe(ts, count, 0, 0, 0)


def first_warning(case: CreepCase, params: RemapParams | None = None) -> RemapVerdict | None:
    tracker = RemapTracker(params)
    for ts, verdict in feed(tracker, case):
        if verdict is not None:
            assert ts >= case.surge_start_ms, f"false warning in the slow phase: {verdict.reason}"
            return verdict
    return None


# -- the report's creep case ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "sample_ms", "shape"),
    [
        (0, SCRAPE, "accelerating"),
        (1, FIVE_MIN, "accelerating"),
        (2, FIVE_MIN, "accelerating"),
        (3, HOUR_MS, "accelerating"),
        (4, FIVE_MIN, "linear"),
    ],
)
def test_report_creep_warns_72h_before_the_gpu_vanishes(seed, sample_ms, shape) -> None:
    """No warning in 7 weeks of slow creep; a creep warning >= 72 h before the GPU vanishes."""
    case = report_creep(seed, sample_ms, shape)
    verdict = first_warning(case)
    assert verdict is not None, "the surge to 254 rows was never flagged"
    assert (verdict.severity, verdict.kind, verdict.action) == (
        "warning",
        "creep",
        "CONTACT_SUPPORT",
    )
    assert verdict.reason.startswith("row-remap creep accelerating")
    assert case.vanish_ms - verdict.ts_ms >= LEAD_TARGET_MS
    assert verdict.recent_slope_per_day is not None and verdict.recent_slope_per_day >= 6.0
    assert verdict.projected_hours_to_limit is not None and verdict.projected_hours_to_limit > 0
    assert "512-row limit in ~" in verdict.reason


def test_report_creep_keeps_warning_until_the_gpu_vanishes_and_never_goes_critical() -> None:
    """Once raised, the warning stands on every later sample; no XID-like critical appears."""
    case = report_creep(5)
    tracker = RemapTracker()
    verdicts = [v for _, v in feed(tracker, case)]
    raised = next(i for i, v in enumerate(verdicts) if v is not None)
    assert all(v is not None and v.kind == "creep" for v in verdicts[raised:])


def test_sampling_rate_below_the_step_does_not_change_the_warning() -> None:
    """30-s and 5-min sampling of the same history give the same first warning."""
    at_scrape = first_warning(report_creep(6, SCRAPE))
    at_five = first_warning(report_creep(6, FIVE_MIN))
    assert at_scrape is not None
    assert at_scrape == at_five


def test_steady_slow_creep_for_months_never_warns() -> None:
    """A GPU creeping ~1 row/day (lumps of 1-3 rows) for 90 days stays quiet."""
    rng = np.random.default_rng(11)
    tracker = RemapTracker()
    count = 0
    for ts in range(0, 90 * DAY_MS, FIVE_MIN):
        if rng.random() < FIVE_MIN / DAY_MS * 0.5:  # ~0.5 events/day x 2 rows
            count += int(rng.integers(1, 4))
        assert tracker.observe(ts, count, 0, 0, 0) is None
    assert 30 <= count <= 140


def test_single_burst_in_slow_creep_does_not_warn() -> None:
    """One lump of 12 rows after weeks of slow creep is not a trend (median of pairwise slopes)."""
    tracker = RemapTracker()
    for hour in range(21 * 24):
        count = hour // 48 + (12 if hour >= 15 * 24 else 0)
        assert tracker.observe(hour * HOUR_MS, count, 0, 0, 0) is None


def test_a_few_big_lumps_are_not_a_surge() -> None:
    """3 lumps of 8 rows in 2 d: Theil–Sen reads > 6 rows/day, but 3 rising hours do not warn."""
    tracker = RemapTracker()
    fastest = 0.0
    for hour in range(20 * 24):
        lumps = sum(hour >= at for at in (15 * 24, 15 * 24 + 19, 16 * 24 + 14))
        assert tracker.observe(hour * HOUR_MS, 5 + 8 * lumps, 0, 0, 0) is None
        trend = tracker.trend()
        if trend is not None:
            fastest = max(fastest, trend.recent_slope_per_day)
            assert trend.recent_rising_steps <= 3
    assert fastest >= tracker.params.min_rate_per_day


def test_steady_fast_creep_toward_the_concerning_count_warns_as_fast() -> None:
    """7 rows/day from zero, no acceleration: warned once 64 rows are within the 7-d horizon."""
    params = RemapParams()
    tracker = RemapTracker(params)
    verdict = None
    for ts in range(0, 20 * DAY_MS, FIVE_MIN):
        verdict = tracker.observe(ts, 7 * ts // DAY_MS, 0, 0, 0) or verdict
        if verdict is not None:
            break
    assert verdict is not None and verdict.kind == "creep"
    assert verdict.projected_hours_to_concerning is not None
    assert 0 < verdict.projected_hours_to_concerning <= params.horizon_ms / HOUR_MS


def test_creep_warning_lapses_after_hold_once_the_rate_falls() -> None:
    """A surge that stops: the warning stands for hold_ms after the last confirming step."""
    params = RemapParams()
    tracker = RemapTracker(params)
    for hour in range(30 * 24):
        surge_hours = min(max(hour - 14 * 24, 0), 4 * 24)  # 12 rows/day from day 14 to day 18
        verdict = tracker.observe(hour * HOUR_MS, surge_hours // 2, 0, 0, 0)
        if 17 * 24 <= hour < 18 * 24:
            assert verdict is not None and verdict.kind == "creep"
    assert tracker.verdict is None


# -- critical at once -------------------------------------------------------------------------


def steady(tracker: RemapTracker, hours: int, correctable: int = 5, uncorrectable: int = 0) -> int:
    ts = 0
    for ts in range(0, hours * HOUR_MS, SCRAPE):
        assert tracker.observe(ts, correctable, uncorrectable, 0, 0) is None
    return ts + SCRAPE


def test_uncorrectable_rise_is_critical_at_that_very_sample() -> None:
    """0 → 1 uncorrectable: critical CONTACT_SUPPORT on that sample, XID 94 expected next."""
    tracker = RemapTracker()
    ts = steady(tracker, 6)
    verdict = tracker.observe(ts, 5, 1, 0, 0)
    assert verdict is not None
    assert (verdict.severity, verdict.kind, verdict.action, verdict.ts_ms) == (
        "critical",
        "uncorrectable",
        "CONTACT_SUPPORT",
        ts,
    )
    assert "XID 94" in verdict.reason and "0 → 1" in verdict.reason
    assert (verdict.correctable, verdict.uncorrectable) == (5, 1)


def test_existing_uncorrectable_rows_at_start_are_a_baseline_not_a_rise() -> None:
    """A tracker that starts on a GPU with 3 old uncorrectable rows stays quiet."""
    tracker = RemapTracker()
    steady(tracker, 2, uncorrectable=3)


def test_uncorrectable_finding_stands_for_hold_then_lapses() -> None:
    params = RemapParams(hold_ms=2 * HOUR_MS)
    tracker = RemapTracker(params)
    ts = steady(tracker, 1)
    raised = tracker.observe(ts, 5, 2, 0, 0)
    assert raised is not None
    assert tracker.observe(ts + 2 * HOUR_MS, 5, 2, 0, 0) == raised
    assert tracker.observe(ts + 2 * HOUR_MS + SCRAPE, 5, 2, 0, 0) is None


def test_pending_remap_is_critical_reset_gpu_while_set() -> None:
    """Pending: critical RESET_GPU from its first sample until the flag clears (after a reset)."""
    tracker = RemapTracker()
    ts = steady(tracker, 1)
    first = tracker.observe(ts, 5, 0, 0, 1)
    assert first is not None
    assert (first.severity, first.kind, first.action, first.ts_ms) == (
        "critical",
        "pending",
        "RESET_GPU",
        ts,
    )
    assert "next GPU reset" in first.reason
    assert tracker.observe(ts + SCRAPE, 5, 0, 0, 1) == first
    assert tracker.observe(ts + 2 * SCRAPE, 5, 0, 0, math.nan) == first  # unknown: unchanged
    assert tracker.observe(ts + 3 * SCRAPE, 5, 0, 0, 0) is None


def test_row_remap_failure_is_critical_contact_support() -> None:
    tracker = RemapTracker()
    ts = steady(tracker, 1)
    verdict = tracker.observe(ts, 5, 8, True, None)
    assert verdict is not None
    assert (verdict.severity, verdict.kind, verdict.action) == (
        "critical",
        "failure",
        "CONTACT_SUPPORT",
    )
    assert "ROW_REMAP_FAILURE" in verdict.reason and "uncorrectable 8" in verdict.reason


def test_findings_are_ordered_by_severity() -> None:
    """Failure > uncorrectable rise > pending > creep; observe returns the first."""
    tracker = RemapTracker()
    ts = steady(tracker, 1)
    verdict = tracker.observe(ts, 5, 1, 1, 1)
    assert [f.kind for f in tracker.findings] == ["failure", "uncorrectable", "pending"]
    assert verdict == tracker.findings[0]


# -- resets, gaps, junk ---------------------------------------------------------------------


def test_counter_reset_restarts_the_series_without_alert() -> None:
    """Mid-surge the board is swapped (counts → 0): no crash, no alert, old warning dropped."""
    case = report_creep(7)
    tracker = RemapTracker()
    stop = int(np.searchsorted(case.ts, case.vanish_ms - 24 * HOUR_MS))
    for ts, count in zip(case.ts[:stop].tolist(), case.correctable[:stop].tolist(), strict=True):
        tracker.observe(ts, count, 2, 0, 0)
    assert tracker.verdict is not None and tracker.verdict.kind == "creep"
    start = int(case.ts[stop])
    for ts in range(start, start + 20 * DAY_MS, FIVE_MIN):
        assert tracker.observe(ts, 0, 0, 0, 0) is None
    state = tracker.to_dict()
    assert state["correctable"] == 0 and state["uncorrectable"] == 0


def test_uncorrectable_going_down_is_a_reset_not_a_rise() -> None:
    tracker = RemapTracker()
    ts = steady(tracker, 1, uncorrectable=3)
    assert tracker.observe(ts, 5, 0, 0, 0) is None
    assert tracker.observe(ts + SCRAPE, 5, 0, 0, 0) is None
    assert tracker.observe(ts + 2 * SCRAPE, 5, 1, 0, 0) is not None  # the new board's first


@pytest.mark.parametrize("junk", [None, math.nan, math.inf, -1.0, "n/a"])
def test_missing_or_junk_values_are_skipped(junk) -> None:
    """A junk value in any field changes nothing: verdicts match the clean stream's."""
    case = report_creep(8, HOUR_MS)
    clean, noisy = RemapTracker(), RemapTracker()
    for i, (ts, count) in enumerate(zip(case.ts.tolist(), case.correctable.tolist(), strict=True)):
        expected = clean.observe(ts, count, 0, 0, 0)
        if i % 7 == 3:
            got = noisy.observe(ts, junk, junk, junk, junk)
            assert got == noisy.verdict
            got = noisy.observe(ts + 1, count, 0, 0, 0)
        else:
            got = noisy.observe(ts, count, 0, 0, 0)
        assert (got is None) == (expected is None)
        if got is not None and expected is not None:
            assert got.kind == expected.kind
            assert got.recent_slope_per_day == expected.recent_slope_per_day


def test_stale_and_duplicate_samples_are_ignored() -> None:
    tracker = RemapTracker()
    ts = steady(tracker, 1, uncorrectable=1)
    assert tracker.observe(ts - SCRAPE, 5, 9, 1, 1) is None
    assert tracker.observe(ts - SCRAPE, 5, 9, 1, 1) is None
    assert tracker.to_dict()["uncorrectable"] == 1


# -- Theil–Sen ------------------------------------------------------------------------------

slopes = st.floats(-100, 100, allow_nan=False, allow_subnormal=False)
intercepts = st.floats(-1e4, 1e4, allow_nan=False, allow_subnormal=False)


@st.composite
def distinct_xs(draw: st.DrawFn, min_size: int = 2, max_size: int = 60) -> np.ndarray:
    ints = draw(st.lists(st.integers(-500, 500), min_size=min_size, max_size=max_size, unique=True))
    return np.asarray(ints, dtype=np.float64) * 0.25  # unsorted, distinct, exact in binary


@settings(max_examples=200, deadline=None)
@given(distinct_xs(), slopes, intercepts)
def test_theil_sen_of_a_perfect_line_is_its_slope(x, b, a) -> None:
    assert theil_sen_slope(x, a + b * x) == pytest.approx(b, rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(distinct_xs(), st.lists(intercepts, min_size=60, max_size=60), intercepts)
def test_theil_sen_is_invariant_to_adding_a_constant(x, ys, c) -> None:
    y = np.asarray(ys[: x.size])
    assert theil_sen_slope(x, y + c) == pytest.approx(theil_sen_slope(x, y), rel=1e-6, abs=1e-6)


def clean_pairs_are_a_majority(n: int, k: int) -> bool:
    return (n - k) * (n - k - 1) > n * (n - 1) / 2


@settings(max_examples=300, deadline=None)
@given(
    st.integers(5, 80).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.permutations(range(n)),
            st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n),
        )
    ),
    slopes,
    intercepts,
    st.data(),
)
def test_theil_sen_shrugs_off_fewer_than_29_percent_outliers(drawn, b, a, data) -> None:
    """k < 0.29 n arbitrary points (clean pairs still a majority): exactly the line's slope."""
    n, order, junk = drawn
    k_max = max(k for k in range(n) if k < 0.29 * n and clean_pairs_are_a_majority(n, k))
    k = data.draw(st.integers(0, k_max))
    x = np.arange(n, dtype=np.float64)
    y = a + b * x
    bad = list(order[:k])
    y[bad] = np.asarray(junk)[bad]
    assert theil_sen_slope(x, y) == pytest.approx(b, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(
    ("x", "y"),
    [([1.0], [1.0]), ([1.0, 1.0], [1.0, 2.0]), ([0.0, math.nan], [1.0, 2.0]), ([0, 1], [1])],
)
def test_theil_sen_rejects_degenerate_input(x, y) -> None:
    with pytest.raises(ValueError):
        theil_sen_slope(x, y)


# -- state ----------------------------------------------------------------------------------


def round_trip(tracker: RemapTracker) -> RemapTracker:
    return RemapTracker.from_dict(json.loads(json.dumps(tracker.to_dict())), tracker.params)


@pytest.mark.parametrize("cut_hours", [30, 49 * 24 + 7, 54 * 24])
def test_state_round_trip_mid_stream_gives_identical_later_verdicts(cut_hours) -> None:
    """Save/restore through JSON mid-stream (open step, standing warning): same verdicts after."""
    case = report_creep(9)
    original = RemapTracker()
    cut = int(np.searchsorted(case.ts, cut_hours * HOUR_MS + 17 * 60_000))
    pairs = list(zip(case.ts.tolist(), case.correctable.tolist(), strict=True))
    for ts, count in pairs[:cut]:
        original.observe(ts, count, 1, 0, 0)
    restored = round_trip(original)
    assert restored.to_dict() == original.to_dict()
    for i, (ts, count) in enumerate(pairs[cut:]):
        unc = 2 if i >= 500 else 1  # a rise after the cut
        assert restored.observe(ts, count, unc, 0, 0) == original.observe(ts, count, unc, 0, 0)
    assert original.verdict is not None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4 * HOUR_MS), st.integers(0, 5), st.integers(0, 1)),
        min_size=2,
        max_size=200,
    ),
    st.data(),
)
def test_round_trip_at_any_point_matches_on_random_streams(steps, data) -> None:
    """Random gaps, rises, resets and flags: a restored tracker tracks the original exactly."""
    params = RemapParams(
        recent_ms=6 * HOUR_MS, window_ms=12 * HOUR_MS, min_rate_per_day=1.0, min_rising_steps=2
    )
    cut = data.draw(st.integers(0, len(steps)))
    original = RemapTracker(params)
    ts, count = 0, 0
    stream = []
    for gap, rise, flag in steps:
        ts += gap
        count = 0 if rise == 5 else count + rise  # rise 5: a board swap
        stream.append((ts, count, flag))
    for ts, count, flag in stream[:cut]:
        original.observe(ts, count, count // 7, 0, flag)
    restored = round_trip(original)
    assert restored.to_dict() == original.to_dict()
    for ts, count, flag in stream[cut:]:
        assert restored.observe(ts, count, count // 7, 0, flag) == original.observe(
            ts, count, count // 7, 0, flag
        )


_SAMPLE_VALUES = (None, 0.0, 1.0, 1, True, False, 2.0, math.nan, -1.0, math.inf)
_EQUALS = {0.0: (0.0, 0, False), 1.0: (1.0, 1, True), 2.0: (2.0, 2), -1.0: (-1.0, -1)}


def _retyped(sample: tuple, k: int) -> tuple:
    """``sample`` with each value swapped for an equal one of another type (1.0, 1, True)."""
    out = []
    for i, v in enumerate(sample):
        equals = _EQUALS.get(v) if v is not None and v == v else None  # (True hashes as 1.0)
        out.append(equals[(k + i) % len(equals)] if equals else v)
    return tuple(out)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from((SCRAPE, SCRAPE, SCRAPE, HOUR_MS // 2, 0)),
            st.tuples(*[st.sampled_from(_SAMPLE_VALUES)] * 4),
            st.integers(0, 3),
            st.integers(0, 5),
        ),
        min_size=1,
        max_size=80,
    )
)
def test_a_tracker_fed_straight_through_matches_one_restored_before_every_sample(steps) -> None:
    """A repeated sample takes a shortcut in ``observe``; a restored tracker never does (it
    has no last sample in memory): both must agree on every verdict and all state, with
    ints, bools, NaN and junk among the repeats."""
    params = RemapParams(
        recent_ms=6 * HOUR_MS, window_ms=12 * HOUR_MS, min_rate_per_day=1.0, min_rising_steps=2
    )
    stream = []
    ts, sample = 0, (0.0, 0.0, 0.0, 0.0)
    for gap, fresh, repeats, retype in steps:
        ts += gap
        sample = fresh if repeats == 0 else sample  # mostly the sample before, again
        for i in range(repeats + 1):
            sample = _retyped(sample, retype * i)
            stream.append((ts, sample))
            ts += SCRAPE
    _straight_matches_restored(params, stream)


def test_an_equal_sample_of_another_type_is_judged_afresh() -> None:
    """True == 1.0, but True is no count: after it, 1.0 is a drop from 2 (a board swap)."""
    samples = [(2.0, 0.0, 0.0, 0.0), (True, 0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)]
    _straight_matches_restored(RemapParams(), [(i * SCRAPE, s) for i, s in enumerate(samples)])


def _straight_matches_restored(params: RemapParams, stream: list) -> None:
    straight, restored = RemapTracker(params), RemapTracker(params)
    for ts, sample in stream:
        restored = round_trip(restored)
        assert straight.observe(ts, *sample) == restored.observe(ts, *sample)
        assert straight.to_dict() == restored.to_dict()


def test_state_of_a_flat_gpu_is_tiny() -> None:
    tracker = RemapTracker()
    steady(tracker, 14 * 24 + 5)
    assert len(json.dumps(tracker.to_dict())) < 200


def test_state_stays_a_few_kb_when_every_hour_differs_for_weeks() -> None:
    """Worst case for run-length encoding: a new count every hour for 20 days."""
    params = RemapParams()
    tracker = RemapTracker(params)
    for ts in range(0, 20 * DAY_MS, FIVE_MIN):
        tracker.observe(ts, ts // HOUR_MS, 0, 0, 0)  # 24 rows/day: a warning stands too
    state = tracker.to_dict()
    assert len(state["runs"]) <= 1 + 2 * params.window_steps
    assert tracker.verdict is not None
    assert len(json.dumps(state)) < 3 * 1024


def test_state_from_another_step_keeps_counts_and_restarts_the_series() -> None:
    tracker = RemapTracker()
    ts = steady(tracker, 3, uncorrectable=2)
    restored = RemapTracker.from_dict(tracker.to_dict(), RemapParams(step_ms=30 * 60_000))
    assert restored.to_dict()["runs"] == [] and restored.to_dict()["uncorrectable"] == 2
    assert restored.observe(ts, 5, 3, 0, 0) is not None


def test_unknown_state_schema_is_rejected() -> None:
    with pytest.raises(ValueError, match="schema"):
        RemapTracker.from_dict({"schema": 99, "step_ms": HOUR_MS})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"findings": [5]}, r"RemapTracker.findings\[0\] must be a JSON object"),
        ({"findings": {}}, "RemapTracker.findings must be a list"),
        ({"open": [1]}, "RemapTracker.open must have 2 items"),
        ({"last_ts": "soon"}, "RemapTracker.last_ts must be an int"),
        ({"step_ms": None}, "RemapTracker.step_ms must not be null"),
    ],
)
def test_malformed_state_is_a_value_error_naming_the_field(
    change: dict[str, object], message: str
) -> None:
    tracker = RemapTracker()
    steady(tracker, 3, uncorrectable=2)
    with pytest.raises(ValueError, match=message):
        RemapTracker.from_dict({**tracker.to_dict(), **change})


def test_verdict_round_trips_through_json() -> None:
    tracker = RemapTracker()
    ts = steady(tracker, 1)
    verdict = tracker.observe(ts, 5, 1, 0, 0)
    assert verdict is not None
    assert RemapVerdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict


# -- params ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"step_ms": 0},
        {"step_ms": 1.5},
        {"window_ms": 14 * DAY_MS + 1},
        {"recent_ms": HOUR_MS},
        {"recent_ms": 14 * DAY_MS},
        {"window_ms": 60 * DAY_MS},
        {"min_coverage": 0.0},
        {"min_rising_steps": 0},
        {"min_rising_steps": 73},
        {"min_rate_per_day": math.nan},
        {"accel_ratio": 1.0},
        {"baseline_floor_per_day": 0.0},
        {"horizon_ms": -1},
        {"concerning_rows": 600},
        {"limit_rows": True},
    ],
)
def test_invalid_params_raise_value_error(bad) -> None:
    with pytest.raises(ValueError):
        RemapParams(**bad)
