"""detectors.advisors.checkpoint_interval: Young/Daly, the overhead formula and the MTBF with
its prior against hand-computed figures (the source's among them), failures counted once,
advice when the interval is off."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from detectors.advisors.checkpoint_interval import (
    CheckpointIntervalParams,
    CheckpointIntervalState,
    mtbf_s,
    overhead,
    step_checkpoint_interval,
    young_daly_s,
)
from detectors.advisors.checkpoint_io import IoEvent
from detectors.phase import PhaseName

H = 3600.0
M_SOURCE = 56.2 * H  # the source's MTBF: 1,294 h over 23 abnormal ends
PARAMS = CheckpointIntervalParams()


def save(interval_s: float | None, delta_s: float, ts: int = 0) -> IoEvent:
    return IoEvent("save", ts, 1, 30.0, delta_s, 1.27e12, 42e9, 42e9 / 250e9, interval_s)


def test_young_daly_at_the_source_figures() -> None:
    # sqrt(2 x 30 s x 202,320 s) = sqrt(12,139,200) = 3,484.1 s = 58.07 min
    assert young_daly_s(30.0, M_SOURCE) == pytest.approx(3484.14, abs=0.01)
    # the 4 K phase: delta 18 s -> 2,698.8 s = 0.75 h; its 2.23 h is ~3x that
    assert 2.23 * H / young_daly_s(18.0, M_SOURCE) == pytest.approx(2.975, abs=0.001)


def test_overhead_reproduces_the_source_182_vs_172_percent() -> None:
    # 81.5 min at delta 30 s, M 56.2 h: 30/4890 + 4890/404640 = 0.61 % + 1.21 % = 1.82 %
    assert overhead(81.5 * 60, 30.0, M_SOURCE) == pytest.approx(0.018220, abs=1e-6)
    # at T_opt the two halves are equal: sqrt(2 x 30 / 202,320) = 1.72 %
    t_opt = young_daly_s(30.0, M_SOURCE)
    assert overhead(t_opt, 30.0, M_SOURCE) == pytest.approx(0.017221, abs=1e-6)
    assert overhead(t_opt, 30.0, M_SOURCE) == pytest.approx(math.sqrt(60.0 / M_SOURCE))
    # and 81.5 min is 1.4x the optimum, as the source says
    assert 81.5 * 60 / t_opt == pytest.approx(1.40, abs=0.01)


def test_mtbf_with_its_prior() -> None:
    # (1,294 h + 1 x 56.2 h) / (23 + 1) = 56.26 h
    assert mtbf_s(1294 * H, 23, M_SOURCE, 1.0) == pytest.approx(56.2583 * H, rel=1e-5)
    # no failure yet: the prior plus the time survived
    assert mtbf_s(10 * H, 0, M_SOURCE, 1.0) == pytest.approx(66.2 * H)
    # a prior worth 4 failures of 100 h, 2 failures in 50 h: (50 + 400) / 6 = 75 h
    assert mtbf_s(50 * H, 2, 100 * H, 4.0) == pytest.approx(75 * H)


def run(
    phases: list[PhaseName], fail_stop_at: tuple[int, ...] = (), params=PARAMS
) -> CheckpointIntervalState:
    state = CheckpointIntervalState()
    for i, phase in enumerate(phases):
        state = step_checkpoint_interval(
            state,
            params,
            group="g",
            bucket_ts=i * 30_000,
            bucket_s=30.0,
            phase=phase,
            fail_stop=i in fail_stop_at,
        ).state
    return state


def test_a_death_and_its_restart_are_one_failure() -> None:
    # training, death (idle 20 buckets), restart load 50 buckets, training again
    phases: list[PhaseName] = ["training"] * 10 + ["idle"] * 20 + ["load"] * 50 + ["training"] * 5
    state = run(phases)
    assert state.failures == 1
    assert state.up_s == (10 + 50 + 5) * 30.0  # idle is not exposure


def test_an_xid_then_the_death_it_causes_is_one_failure() -> None:
    phases: list[PhaseName] = ["training"] * 10 + ["idle"] * 5 + ["training"] * 3
    assert run(phases, fail_stop_at=(9,)).failures == 1


def test_two_deaths_an_hour_apart_are_two() -> None:
    phases: list[PhaseName] = (["training"] * 120 + ["idle"] * 2) * 2
    assert run(phases).failures == 2


@pytest.mark.parametrize(
    ("phases", "failures"),
    [
        (["training", "load", "training"], 1),  # restarted within a bucket
        (["load", "idle"], 1),  # died while loading
        (["save", "idle"], 1),  # died while saving
        (["idle", "load", "training"], 0),  # a start is no failure
        (["training", "save", "training"], 0),
    ],
)
def test_what_counts_as_a_stop(phases: list[PhaseName], failures: int) -> None:
    assert run(phases).failures == failures


def test_an_xid_fail_stop_alone_counts() -> None:
    assert run(["training"] * 5, fail_stop_at=(2,)).failures == 1


def step_save(state, interval_s, delta_s, ts=0, params=PARAMS):
    return step_checkpoint_interval(
        state,
        params,
        group="job-7",
        bucket_ts=ts,
        bucket_s=30.0,
        phase="training",
        save=save(interval_s, delta_s, ts),
    )


def test_saving_at_3x_the_optimum_is_advised_shorter() -> None:
    # the source's 4 K phase: 2.23 h (8,028 s) between saves costing 18 s, M = 56.26 h
    state = CheckpointIntervalState(
        up_s=1294 * H - 30.0, failures=23, intervals=(8028.0,) * 3, deltas=(18.0,) * 3
    )
    out = step_save(state, 8028.0, 18.0)
    f = out.figures
    assert f is not None
    assert f.mtbf_s == pytest.approx(202_530.0)
    assert f.optimal_s == pytest.approx(2700.2, abs=0.1)  # sqrt(2 x 18 x 202,530)
    assert f.ratio == pytest.approx(2.973, abs=0.001)
    assert f.actual_overhead == pytest.approx(0.022061, abs=1e-6)  # 18/8028 + 8028/405060
    assert f.optimal_overhead == pytest.approx(0.013332, abs=1e-6)  # sqrt(36 / 202,530)
    (advice,) = out.advice
    assert advice.advisor == "checkpoint_interval"
    assert advice.kind == "shorten_interval"
    assert advice.action == "set_checkpoint_interval"
    assert dict(advice.figures)["optimal_s"] == pytest.approx(2700.2, abs=0.1)
    assert "3.0x the Young/Daly optimum 45.0 min" in advice.summary
    assert (
        "for saves costing 18.0 s and an MTBF of 56.3 h (23 failures in 1294.0 h" in advice.summary
    )
    assert "expected overhead 2.21% against 1.33%." in advice.summary


def test_near_the_optimum_is_no_advice() -> None:
    # the source's 100 K phase: 81.5 min at delta 30 s, 1.4x the optimum
    state = CheckpointIntervalState(
        up_s=1294 * H - 30.0, failures=23, intervals=(4890.0,) * 3, deltas=(30.0,) * 3
    )
    out = step_save(state, 4890.0, 30.0)
    assert out.figures is not None and out.figures.ratio == pytest.approx(1.40, abs=0.01)
    assert out.advice == ()


def test_saving_far_too_often_is_advised_longer() -> None:
    state = CheckpointIntervalState(up_s=100 * H, intervals=(600.0,) * 3, deltas=(30.0,) * 3)
    (advice,) = step_save(state, 600.0, 30.0).advice
    assert advice.kind == "lengthen_interval"


def test_no_advice_before_min_intervals() -> None:
    state = CheckpointIntervalState(up_s=1294 * H, failures=23, intervals=(8028.0,), deltas=(18.0,))
    out = step_save(state, 8028.0, 18.0)
    assert out.figures is not None and out.figures.ratio > 2
    assert out.advice == ()


def test_advice_is_said_once_then_again_after_repeat_s_then_ok_once() -> None:
    state = CheckpointIntervalState(
        up_s=1000 * H, failures=17, intervals=(8028.0,) * 3, deltas=(18.0,) * 3
    )  # M = 1,056.2 h / 18 = 58.7 h, T_opt = 46 min
    first = step_save(state, 8028.0, 18.0, ts=0)
    assert [a.kind for a in first.advice] == ["shorten_interval"]
    again = step_save(first.state, 8028.0, 18.0, ts=8028_000)
    assert again.advice == ()
    later = step_save(again.state, 8028.0, 18.0, ts=int(PARAMS.repeat_s * 1000))
    assert [a.kind for a in later.advice] == ["shorten_interval"]
    fixed, said = later.state, []
    for k in range(16):  # the operator took the advice: saves every 45 min
        out = step_save(fixed, 2700.0, 18.0, ts=int(PARAMS.repeat_s * 1000) + (k + 1) * 2700_000)
        fixed = out.state
        said += [a.kind for a in out.advice]
    assert said == ["interval_ok"]
    assert fixed.verdict == "ok"


def test_once_advised_the_interval_must_come_well_inside_to_be_ok() -> None:
    # M = 56.26 h, delta 18 s: T_opt = 2,700 s; advised, then 1.8x (inside 2x, outside 2/1.25)
    state = CheckpointIntervalState(
        up_s=1294 * H - 60.0, failures=23, intervals=(4860.0,) * 3, deltas=(18.0,) * 3
    )
    assert step_save(state, 4860.0, 18.0).advice == ()  # never advised: 1.8x is fine
    advised = replace(state, verdict="shorten_interval", said_ts=0)
    held = step_save(advised, 4860.0, 18.0, ts=3600_000)
    assert held.advice == () and held.state.verdict == "shorten_interval"
    inside = replace(advised, intervals=(4050.0,) * 3)  # 1.5x: inside 2 / 1.25 = 1.6x
    (ok,) = step_save(inside, 4050.0, 18.0, ts=3600_000).advice
    assert ok.kind == "interval_ok" and ok.action is None


def test_state_round_trips_through_json() -> None:
    state = run(["training"] * 10 + ["idle"] * 3 + ["load"] * 2, fail_stop_at=(9,))
    state = step_save(state, 8028.0, 18.0).state
    back = CheckpointIntervalState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back == state


def test_restore_refuses_a_negative_exposure() -> None:
    with pytest.raises(ValueError, match="up_s"):
        CheckpointIntervalState.from_dict({"up_s": -1.0})


@pytest.mark.parametrize(
    "bad",
    [
        {"prior_mtbf_s": 0.0},
        {"prior_failures": -1.0},
        {"off_factor": 1.0},
        {"hysteresis": 0.9},
        {"hysteresis": 2.0},
        {"min_intervals": 0},
        {"recent": True},
        {"same_failure_s": math.nan},
    ],
)
def test_bad_params_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        CheckpointIntervalParams(**bad)  # type: ignore[arg-type]
