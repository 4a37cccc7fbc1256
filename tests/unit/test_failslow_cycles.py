"""detectors.failslow.cycles: learning a job's dip schedule; keeping dips out of change points."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from detectors.failslow.changepoint import ChangePointParams, ChangePointState, step_changepoint
from detectors.failslow.cycles import (
    CycleParams,
    CycleState,
    expected_dip,
    fit_cycles,
    is_expected_dip,
    step_cycles,
)

PARAMS = CycleParams()
CHECKPOINT = 2.23 * 120  # the report's median checkpoint interval, in 30-s buckets (267.6)


def dipping_series(
    seed: int,
    n: int,
    period: float,
    dip_buckets: int,
    *,
    jitter: float = 0.02,
    depth: float = 0.6,
    first: int = 100,
) -> tuple[np.ndarray, list[int]]:
    """1 % noisy throughput with ``dip_buckets``-long dips every ``period`` (± uniform jitter)."""
    rng = np.random.default_rng(seed)
    x = 1_000.0 * np.exp(0.01 * rng.standard_normal(n))
    starts, t = [], float(first)
    while t < n - dip_buckets:
        start = round(t)
        starts.append(start)
        x[start : start + dip_buckets] *= 1.0 - depth
        t += period * (1.0 + jitter * rng.uniform(-1.0, 1.0))
    return x, starts


def learn(x: np.ndarray, params: CycleParams = PARAMS) -> CycleState:
    state = CycleState()
    for bucket, value in enumerate(x):
        state = step_cycles(state, float(value), params, bucket=bucket)
    return state


@pytest.mark.parametrize("jitter", [0.0, 0.02, 0.04])
@pytest.mark.parametrize("seed", range(5))
def test_checkpoint_period_of_2_23_h_is_found_within_3_percent(jitter: float, seed: int) -> None:
    """Single-bucket dips every 2.23 h (± uniform jitter up to 4 %) for 20 h: one cycle,
    period within 3 %, anchored on the latest dip."""
    x, starts = dipping_series(seed, 2_400, CHECKPOINT, 1, jitter=jitter)
    state = learn(x)
    assert len(state.cycles) == 1
    cycle = state.cycles[0]
    assert cycle.period == pytest.approx(CHECKPOINT, rel=0.03)
    assert cycle.dip_buckets == 1
    assert cycle.anchor == starts[-1]
    assert cycle.repeats >= len(starts) - 1


def test_period_is_learned_after_four_dips() -> None:
    """No schedule before the fourth dip (three intervals); the fifth is predicted."""
    x, starts = dipping_series(0, 1_300, CHECKPOINT, 2, jitter=0.01)
    state = CycleState()
    for bucket, value in enumerate(x):
        if bucket == starts[3]:
            assert state.cycles == ()
        if bucket == starts[4]:
            assert len(state.cycles) == 1
            assert is_expected_dip(state, bucket, PARAMS)
            assert expected_dip(state, bucket, PARAMS) == 2
            assert not is_expected_dip(state, bucket - 100, PARAMS)
        state = step_cycles(state, float(value), PARAMS, bucket=bucket)


@pytest.mark.parametrize("seed", range(3))
def test_every_later_dip_falls_inside_a_predicted_window(seed: int) -> None:
    """After learning, each real dip start lies in the predicted window (2 % jitter)."""
    x, starts = dipping_series(seed, 3_000, CHECKPOINT, 1, jitter=0.02)
    state, hits = CycleState(), []
    for bucket, value in enumerate(x):
        if bucket in starts and state.cycles:
            hits.append(is_expected_dip(state, bucket, PARAMS))
        state = step_cycles(state, float(value), PARAMS, bucket=bucket)
    assert len(hits) >= len(starts) - 4
    assert all(hits)


def test_predicted_windows_cover_a_small_share_of_time() -> None:
    """A 2.23 h cycle flags < 15 % of buckets (a real drop outside them is not delayed)."""
    x, _ = dipping_series(1, 2_400, CHECKPOINT, 1, jitter=0.02)
    state = learn(x)
    future = range(2_400, 2_400 + 800)
    share = sum(is_expected_dip(state, b, PARAMS) for b in future) / len(future)
    assert 0.0 < share < 0.15


def test_evaluation_and_checkpoint_schedules_are_both_found() -> None:
    """3-bucket eval dips every 40 min and 1-bucket checkpoint dips every 2.23 h → two cycles."""
    x, _ = dipping_series(3, 3_000, 80.0, 3, jitter=0.01, depth=0.4, first=50)
    y, _ = dipping_series(4, 3_000, CHECKPOINT, 1, jitter=0.01, first=130)
    state = learn(np.minimum(x, y))
    periods = sorted(c.period for c in state.cycles)
    assert len(periods) == 2
    assert periods[0] == pytest.approx(80.0, rel=0.03)
    assert periods[1] == pytest.approx(CHECKPOINT, rel=0.03)


def test_no_cycle_in_random_dips() -> None:
    """Dips at random times (the rate of a 2.23 h schedule): a cycle in <= 2 % of 100 seeds."""
    found = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        x = 1_000.0 * np.exp(0.01 * rng.standard_normal(3_000))
        for start in rng.choice(3_000, size=11, replace=False):
            x[start] *= 0.4
        found += bool(learn(x).cycles)
    assert found <= 2


def test_a_sustained_drop_is_not_a_dip_and_moves_the_level() -> None:
    """A 30-bucket slowdown is longer than max_dip_buckets: no event, level relearned."""
    x = np.full(200, 1_000.0)
    x[50:80] = 700.0
    state = learn(x)
    assert state.events == ()
    assert state.dip_start is None


def test_dips_are_not_confirmed_as_change_points_once_learned_but_a_real_drop_is() -> None:
    """4-bucket eval dips every 2.23 h: confirmed before the schedule is learned, never after;
    a sustained 20 % drop later in the series is still confirmed within 3 buckets."""
    cp_params = ChangePointParams()
    x, starts = dipping_series(5, 2_400, CHECKPOINT, 4, depth=0.4)
    drop = 1_900  # outside any dip window
    x[drop:] *= 0.8
    cycles, change = CycleState(), ChangePointState()
    confirmed_in_dips: list[int] = []
    first_confirmed_drop = None
    for bucket, value in enumerate(x):
        dip = expected_dip(cycles, bucket, PARAMS)
        change, verdict = step_changepoint(
            change, float(value), cp_params, bucket=bucket, expected_dip=dip
        )
        cycles = step_cycles(cycles, float(value), PARAMS, bucket=bucket)
        if verdict.confirmed and bucket < drop:
            confirmed_in_dips.append(bucket)
        if verdict.confirmed and bucket >= drop and first_confirmed_drop is None:
            first_confirmed_drop = bucket
    learned_from = starts[4]  # four dips seen, the fifth is predicted
    assert confirmed_in_dips, "without a schedule a 4-bucket dip is a (false) change"
    assert all(b < learned_from for b in confirmed_in_dips)
    assert first_confirmed_drop is not None and first_confirmed_drop - drop + 1 <= 3


def test_missing_values_only_move_the_clock() -> None:
    state = learn(np.full(10, 1_000.0))
    after = step_cycles(state, math.nan, PARAMS, bucket=10)
    assert after.level_window == state.level_window and after.last_bucket == 10
    with pytest.raises(ValueError, match="not after"):
        step_cycles(after, 1_000.0, PARAMS, bucket=10)


def test_state_round_trips_through_json() -> None:
    """A learned state survives JSON and predicts the same windows."""
    x, _ = dipping_series(2, 1_500, CHECKPOINT, 2)
    state = learn(x)
    again = CycleState.from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
    assert again == state
    assert [expected_dip(again, b, PARAMS) for b in range(1_500, 2_100)] == [
        expected_dip(state, b, PARAMS) for b in range(1_500, 2_100)
    ]


def test_fit_cycles_on_hand_made_events() -> None:
    """Events every 100 buckets (one missing): period 100, anchor = the latest event."""
    events = [(s, 1) for s in (50, 150, 250, 450, 550, 650)]
    (cycle,) = fit_cycles(events, now=700, params=PARAMS)
    assert cycle.period == pytest.approx(100.0, abs=0.5)
    assert cycle.anchor == 650
    assert cycle.repeats == 6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dip_depth": 0.0},
        {"max_dip_buckets": 0},
        {"min_period_buckets": 10},
        {"max_period_buckets": 30},
        {"min_acf": 0.0},
        {"tolerance": 0.5},
        {"min_repeats": 1},
    ],
)
def test_params_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CycleParams(**kwargs)  # type: ignore[arg-type]
