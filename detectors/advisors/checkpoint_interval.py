"""Checkpoint interval advice, per group: the interval the job keeps vs Young/Daly's optimum.

A checkpoint costs δ (its save's lost compute, :mod:`detectors.advisors.checkpoint_io`); a
failure loses on average half an interval T of work. Expected overhead per unit of time:
δ/T + T/(2M), with M the mean time between failures; it is least at T_opt = √(2 δ M), where
it is √(2δ/M) (Young 1974, Daly 2006, first order). Source: at δ ≈ 30 s and M = 56.2 h its
100 K phase saved every 81.5 min, 1.4x T_opt: 1.82 % against the 1.72 % minimum; its 4 K and
32 K phases ran at ~3x.

M is estimated online: the time the job ran (training, saving or loading) over the failures
seen, with a prior worth ``prior_failures`` failures of ``prior_mtbf_s`` each:
M = (up + k M0) / (n + k); so one early failure does not swing it, and a job that never fails
drifts up from the prior. A failure is the job stopping (training or saving, then idle or a
restart load; a load, then idle) or an XID fail-stop; signals within ``same_failure_s`` of a
counted one are the same failure (the XID, then the death it causes). A planned stop counts
too: nothing here tells it from a crash.

δ and T are medians over the last ``recent`` saves and intervals. Advice, once at least
``min_intervals`` intervals are known, when T is more than ``off_factor`` away from T_opt
(either way); ``interval_ok`` once when it comes back (within ``off_factor / hysteresis``,
so a median near the bound does not flap); the same advice again after ``repeat_s``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Literal

from detectors.advisors.checkpoint_io import IoEvent
from detectors.checks import Checked, checked, each, integer, real, real_rule
from detectors.errors import RulesError
from detectors.phase import PhaseName
from detectors.state_codec import JsonState
from detectors.vocabulary import Advice, Figure

__all__ = [
    "ADVISOR",
    "CheckpointIntervalParams",
    "CheckpointIntervalState",
    "IntervalFigures",
    "IntervalStep",
    "mtbf_s",
    "overhead",
    "step_checkpoint_interval",
    "young_daly_s",
]

ADVISOR = "checkpoint_interval"
Verdict = Literal["ok", "shorten_interval", "lengthen_interval"]
_RUNNING: frozenset[PhaseName] = frozenset({"training", "save", "load"})


def young_daly_s(delta_s: float, mtbf: float) -> float:
    """T_opt = √(2 δ M)."""
    return math.sqrt(2.0 * delta_s * mtbf)


def overhead(interval_s: float, delta_s: float, mtbf: float) -> float:
    """Expected share of time lost to saves and to rework after failures: δ/T + T/(2M)."""
    return delta_s / interval_s + interval_s / (2.0 * mtbf)


def mtbf_s(up_s: float, failures: int, prior_mtbf_s: float, prior_failures: float) -> float:
    """(up + k M0) / (n + k): the failures seen, pulled toward the prior by ``k`` failures."""
    return (up_s + prior_failures * prior_mtbf_s) / (failures + prior_failures)


@dataclass(frozen=True)
class CheckpointIntervalParams(Checked):
    """``prior_mtbf_s`` (source: 56.2 h) worth ``prior_failures`` failures; ``off_factor``: how
    far from T_opt (either way) is worth advice; once advised, ok again only within
    ``off_factor / hysteresis``; see the module docstring for the rest."""

    prior_mtbf_s: float = real(56.2 * 3600.0, above=0)
    prior_failures: float = real(1.0, above=0)
    off_factor: float = real(2.0, above=1)
    hysteresis: float = real(1.25, at_least=1)
    min_intervals: int = integer(3)
    recent: int = integer(16)
    same_failure_s: float = real(900.0, at_least=0)
    repeat_s: float = real(86_400.0, above=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hysteresis >= self.off_factor:
            raise RulesError(
                f"hysteresis must be < off_factor ({self.off_factor}), got {self.hysteresis!r}"
            )


_DURATIONS = each(real_rule(at_least=0))


@dataclass(frozen=True)
class CheckpointIntervalState(JsonState):
    """``up_s``: time the job ran; ``running``: the previous bucket's phase, as a failure
    would end it (None before the first); ``verdict`` / ``said_ts``: the last advice."""

    up_s: float = real(0.0, at_least=0)
    failures: int = 0
    last_failure_ts: int | None = None
    previous: PhaseName | None = None
    intervals: tuple[float, ...] = checked((), _DURATIONS)
    deltas: tuple[float, ...] = checked((), _DURATIONS)
    verdict: Verdict = "ok"
    said_ts: int | None = None


@dataclass(frozen=True)
class IntervalFigures:
    """What the advice rests on; overheads are shares of time (0.0182 = 1.82 %)."""

    up_s: float
    failures: int
    mtbf_s: float
    delta_s: float
    actual_s: float
    optimal_s: float
    actual_overhead: float
    optimal_overhead: float

    @property
    def ratio(self) -> float:
        return self.actual_s / self.optimal_s

    def items(self) -> tuple[tuple[str, Figure], ...]:
        return (
            ("actual_overhead", self.actual_overhead),
            ("actual_s", self.actual_s),
            ("delta_s", self.delta_s),
            ("failures", self.failures),
            ("mtbf_s", self.mtbf_s),
            ("optimal_overhead", self.optimal_overhead),
            ("optimal_s", self.optimal_s),
            ("ratio", self.ratio),
            ("up_s", self.up_s),
        )


@dataclass(frozen=True)
class IntervalStep:
    state: CheckpointIntervalState
    figures: IntervalFigures | None = None  # after a save, once δ and T are known
    advice: tuple[Advice, ...] = ()


def step_checkpoint_interval(
    state: CheckpointIntervalState,
    params: CheckpointIntervalParams,
    *,
    group: str,
    bucket_ts: int,
    bucket_s: float,
    phase: PhaseName,
    save: IoEvent | None = None,
    fail_stop: bool = False,
) -> IntervalStep:
    """One closed bucket: its phase, the save that ended with it, an XID fail-stop in it."""
    state = _count_failure(state, params, bucket_ts, phase, fail_stop)
    if phase in _RUNNING:
        state = replace(state, up_s=state.up_s + bucket_s)
    if save is None or save.kind != "save":
        return IntervalStep(state)
    keep = params.recent
    state = replace(state, deltas=(*state.deltas, save.lost_s)[-keep:])
    if save.interval_s is not None:
        state = replace(state, intervals=(*state.intervals, save.interval_s)[-keep:])
    figures = figures_of(state, params)
    if figures is None:
        return IntervalStep(state)
    state, advice = _advise(state, params, figures, group, bucket_ts)
    return IntervalStep(state, figures, advice)


def figures_of(
    state: CheckpointIntervalState, params: CheckpointIntervalParams
) -> IntervalFigures | None:
    """The figures for the state's δ, T and M (None until a save's δ and an interval)."""
    if not state.intervals or not state.deltas:
        return None
    delta = statistics.median(state.deltas)
    actual = statistics.median(state.intervals)
    m = mtbf_s(state.up_s, state.failures, params.prior_mtbf_s, params.prior_failures)
    if not (delta > 0 and actual > 0):
        return None
    optimal = young_daly_s(delta, m)
    return IntervalFigures(
        up_s=state.up_s,
        failures=state.failures,
        mtbf_s=m,
        delta_s=delta,
        actual_s=actual,
        optimal_s=optimal,
        actual_overhead=overhead(actual, delta, m),
        optimal_overhead=overhead(optimal, delta, m),
    )


def _count_failure(
    state: CheckpointIntervalState,
    params: CheckpointIntervalParams,
    bucket_ts: int,
    phase: PhaseName,
    fail_stop: bool,
) -> CheckpointIntervalState:
    before = state.previous
    stopped = before in _RUNNING and (
        phase == "idle" or (phase == "load" and before in ("training", "save"))
    )
    state = replace(state, previous=phase)
    if not (stopped or fail_stop):
        return state
    last = state.last_failure_ts
    if last is not None and bucket_ts - last <= params.same_failure_s * 1000:
        return state  # the same failure, seen again
    return replace(state, failures=state.failures + 1, last_failure_ts=bucket_ts)


def _advise(
    state: CheckpointIntervalState,
    params: CheckpointIntervalParams,
    f: IntervalFigures,
    group: str,
    bucket_ts: int,
) -> tuple[CheckpointIntervalState, tuple[Advice, ...]]:
    if len(state.intervals) < params.min_intervals:
        return state, ()
    verdict: Verdict = "ok"
    # once advised, the interval must come well inside off_factor to be ok again (no flapping)
    off = params.off_factor / (params.hysteresis if state.verdict != "ok" else 1.0)
    if f.ratio > off:
        verdict = "shorten_interval"
    elif f.ratio < 1.0 / off:
        verdict = "lengthen_interval"
    repeat = state.said_ts is not None and bucket_ts - state.said_ts >= params.repeat_s * 1000
    if verdict == state.verdict and not (verdict != "ok" and repeat):
        return state, ()
    basis = (
        f"for saves costing {f.delta_s:.1f} s and an MTBF of {f.mtbf_s / 3600:.1f} h "
        f"({f.failures} failures in {f.up_s / 3600:.1f} h, prior "
        f"{params.prior_mtbf_s / 3600:.1f} h)"
    )
    costs = f"expected overhead {f.actual_overhead:.2%} against {f.optimal_overhead:.2%}"
    if verdict == "ok":
        summary = (
            f"Checkpoints every {_hours(f.actual_s)} are within {params.off_factor:g}x of the "
            f"Young/Daly optimum {_hours(f.optimal_s)} {basis}: {costs}."
        )
    else:
        more = "more" if verdict == "shorten_interval" else "less"
        summary = (
            f"Save {more} often: checkpoints every {_hours(f.actual_s)} are {f.ratio:.1f}x the "
            f"Young/Daly optimum {_hours(f.optimal_s)} {basis}: {costs}."
        )
    advice = Advice(
        advisor=ADVISOR,
        kind="interval_ok" if verdict == "ok" else verdict,
        group=group,
        bucket_ts=bucket_ts,
        summary=summary,
        figures=f.items(),
        action=None if verdict == "ok" else "set_checkpoint_interval",
    )
    return replace(state, verdict=verdict, said_ts=bucket_ts), (advice,)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"
