"""The group-shift guard: the whole group moving is a group event, never a node's.

Peer z cannot see the whole group move: when a job dies
every node idles together and the median moves with them, so a node that
collapsed a bucket earlier looks like its peers again and its alert would
resolve while it is still broken. The group's own recent history can see it.
Per scored feature, :class:`GroupLevels` keeps the *usual level* of the group
median: an EWMA (weight ``shift_alpha``) folded in only in *calm* buckets, those
in which no feature is shifted. A feature is *shifted* when its median departs
from the usual level by more than ``max(shift_threshold · |level|, abs_floor)``,
either way; once shifted it stays so until it is back within
``shift_release`` (hysteresis: a median hovering at the threshold, such as
``procs_running`` during a restart load, is one shift, not a flicker). While a
feature is shifted:

* its node evidence is *held*: it gives no node evidence, and an open alert
  that rests on it (one of its signals is that feature) gets ``unknown`` — it
  neither advances nor counts toward resolution, so the culprit's Collapse
  stays firing through the job's death and nobody is paged for it;
* the group gets a ``PeerwatchGroupDegraded`` observation naming the shifted
  features ("intr_rate median 50.1 K vs usual 301 K (-83 %)"): soft evidence,
  so a one- or two-bucket checkpoint dip never fires it and a job death does.

Until a feature has folded ``shift_warmup`` consistent buckets into its level
it is never shifted (a median that jumps during warm-up restarts it). A shift
that lasts ``shift_adopt_after`` buckets is the new normal: the level adopts
an EWMA of the shifted medians. The level it left is kept as *home* (through
later adoptions too, until the median comes back to it), and a median back
within the threshold of home ends any shift at once. That is what keeps a
restart quiet: the job dies (idle), ~10 min later it loads its checkpoint for
25-33 min (GPU util < 50 % on every node), then trains again at the old
level. The idle and load buckets are one shift (one group alert), adopted
after ``shift_adopt_after`` buckets; training returns home with no second
alert. A job restarted at a different level is adopted and is normal from
then on. An open alert whose evidence was seen against a peer median that is
not the usual level any more (the culprit's Collapse, seen at 300 K/s, after
a long job death made 50 K/s usual) stays unknown until the group comes back
to that level or the node leaves: a job that stays dead for hours (manual
recovery: median 3.3 h) does not resolve its culprit. Limit: a group whose
history begins during a restart load learns the load level and raises one
group alert when training starts.

Why an EWMA gated on the whole bucket rather than a ring of recent medians:
it is one float per feature (plus two counters, and two floats only during or
after a shift), and gating on "no feature shifted" keeps a dip from leaking
into any level — the features that stay within the threshold during a
checkpoint or a restart load (temperature cooling, a slower procs count) would
otherwise drift toward the abnormal value and flag the return to normal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from detectors.arrays import BoolArray, FloatArray, IntArray
from detectors.checks import Checked, checked, each, int_rule, integer, maybe, real, real_rule
from detectors.errors import RulesError
from detectors.fusion import Signal
from detectors.state_codec import JsonState

__all__ = ["GroupLevels", "GroupShift", "ShiftParams", "regime_check", "track_levels"]

# A median beyond this is no usable level (arithmetic on it could overflow to inf).
_MAX_LEVEL = 1e300

ShiftDirection = Literal["up", "down"]


@dataclass(frozen=True)
class ShiftParams(Checked):
    """The guard's knobs (see :class:`detectors.group.ScoringParams`, which builds them)."""

    shift_threshold: float = real(0.35, above=0)
    shift_release: float = real(0.25, above=0)
    shift_alpha: float = real(0.1, above=0, at_most=1)
    shift_warmup: int = integer(5)
    shift_adopt_after: int = integer(40)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shift_release > self.shift_threshold:
            raise RulesError(
                f"shift_release must be <= shift_threshold ({self.shift_threshold}), "
                f"got {self.shift_release!r}"
            )


def _unique(name: str, names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise RulesError(f"{name} must name each feature once, got {', '.join(twice)} twice")


_LEVELS = each(maybe(real_rule(at_least=-_MAX_LEVEL, at_most=_MAX_LEVEL)))  # usable levels
_COUNTS = each(int_rule(minimum=0))


@dataclass(frozen=True)
class GroupLevels(JsonState):
    """The group's own recent history: per scored feature, the usual level of its median.

    Columnar (one entry per feature that has had a median; the tuples are
    aligned with ``features``) so the state stays small and fast to rebuild.
    ``level``: the usual level. ``seen``: consistent calm buckets folded into
    it, capped at ``shift_warmup`` (below that the feature is warming up and
    never shifted). ``run``: consecutive buckets the feature has been shifted
    (0: not shifted). ``candidate``: EWMA of the medians during the current
    shift, adopted as the level after ``shift_adopt_after`` buckets (None when
    not shifted). ``home``: the level before the first adoption (None unless a
    shift was adopted); a median back near it ends a shift at once.
    """

    features: tuple[str, ...] = checked((), _unique)
    level: tuple[float, ...] = checked((), _LEVELS)
    seen: tuple[int, ...] = checked((), _COUNTS)
    run: tuple[int, ...] = checked((), _COUNTS)
    candidate: tuple[float | None, ...] = checked((), _LEVELS)
    home: tuple[float | None, ...] = checked((), _LEVELS)

    def __post_init__(self) -> None:
        n = len(self.features)
        columns = (self.level, self.seen, self.run, self.candidate, self.home)
        if any(len(c) != n for c in columns):
            raise ValueError("GroupLevels columns must all have one entry per feature")


@dataclass(frozen=True)
class GroupShift:
    """A scored feature whose group median left its usual level this bucket (blames no node).

    ``median``: the group median this bucket; ``level``: its usual level
    before this bucket; ``buckets``: consecutive buckets the feature has been
    shifted, this one included.
    """

    feature: str
    direction: ShiftDirection
    median: float
    level: float
    buckets: int

    @property
    def change(self) -> float:
        """Relative change from the usual level (-0.84: 84 % below); ±inf from a level of 0."""
        if self.level == 0:
            return math.copysign(math.inf, self.median)
        return (self.median - self.level) / abs(self.level)

    def describe(self) -> str:
        text = f"{self.feature} median {_compact(self.median)} vs usual {_compact(self.level)}"
        if self.level == 0:
            return f"{text} ({self.direction})"
        return f"{text} ({self.change * 100:+.0f} %)"

    def as_signal(self) -> Signal:
        """The shift as an alert signal: value = group median, median = usual level, no z."""
        return Signal(self.feature, math.nan, self.median, self.level)

    def to_dict(self) -> dict[str, Any]:
        change = self.change
        return {
            "feature": self.feature,
            "direction": self.direction,
            "median": self.median,
            "level": self.level,
            "change": change if math.isfinite(change) else None,
            "buckets": self.buckets,
        }


def _compact(x: float) -> str:
    """3 significant digits with a K/M/G suffix: 301 K, 50.1 K, 7.5, 0.0119."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {suffix}"
    return f"{x:.3g}"


def track_levels(
    prev: GroupLevels,
    names: Sequence[str],
    abs_floor: FloatArray,
    median: FloatArray,
    params: ShiftParams,
) -> tuple[GroupLevels, tuple[GroupShift, ...], BoolArray]:
    """One bucket of the group-shift guard: (new levels, the shifts, held flag per feature).

    Vectorised over features; a feature without a usable median this bucket
    (too few peers) is left exactly as it was.
    """
    level, seen, run, candidate, home = _level_columns(prev, names)
    thr, alpha = params.shift_threshold, params.shift_alpha
    m = np.asarray(median, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(m) & (np.abs(m) <= _MAX_LEVEL)
    m = np.where(ok, m, 0.0)
    dist = np.abs(m - level)
    enter = np.maximum(thr * np.abs(level), abs_floor)
    stay = np.maximum(params.shift_release * np.abs(level), abs_floor)
    has_home = np.isfinite(home)
    home_v = np.where(has_home, home, 0.0)

    warm = seen >= params.shift_warmup
    fresh = ok & (seen == 0)
    restart = ok & ~warm & ~fresh & (dist > enter)  # warm-up on an inconsistent level
    away = ok & warm & (dist > np.where(run > 0, stay, enter))
    back_home = (
        away & has_home & (np.abs(m - home_v) <= np.maximum(thr * np.abs(home_v), abs_floor))
    )
    shifted = away & ~back_home
    before = level  # what the shifts are reported against

    reset = fresh | restart
    level = np.where(reset, m, np.where(back_home, home_v, level))
    seen = np.where(reset, 1, seen)
    home = np.where(reset | back_home, np.nan, home)
    run = np.where(shifted, run + 1, np.where(ok, 0, run))
    with np.errstate(invalid="ignore"):
        candidate = np.where(
            shifted,
            np.where(run == 1, m, candidate + alpha * (m - candidate)),
            np.where(ok, np.nan, candidate),
        )
    shifts = tuple(
        GroupShift(
            feature=names[j],
            direction="up" if m[j] > before[j] else "down",
            median=float(m[j]),
            level=float(before[j]),
            buckets=int(run[j]),
        )
        for j in np.flatnonzero(shifted).tolist()
    )

    adopt = shifted & (run >= params.shift_adopt_after)
    if adopt.any():
        home = np.where(adopt & ~np.isfinite(home), level, home)  # keep the first home
        level = np.where(adopt, candidate, level)
        run = np.where(adopt, 0, run)
        candidate = np.where(adopt, np.nan, candidate)
    if not shifted.any():  # a calm bucket: fold it into the levels
        fold = ok & ~reset
        level = np.where(fold, level + alpha * (m - level), level)
        seen = np.where(fold, np.minimum(seen + 1, params.shift_warmup), seen)

    kept = np.flatnonzero(seen > 0).tolist()
    new = GroupLevels(
        features=tuple(names[j] for j in kept),
        level=tuple(level[kept].tolist()),
        seen=tuple(seen[kept].tolist()),
        run=tuple(run[kept].tolist()),
        candidate=_optional(candidate[kept]),
        home=_optional(home[kept]),
    )
    return new, shifts, shifted


def _level_columns(
    prev: GroupLevels, names: Sequence[str]
) -> tuple[FloatArray, IntArray, IntArray, FloatArray, FloatArray]:
    """The stored columns aligned with ``names``: (level, seen, run, candidate, home).

    A feature not stored yet has seen = 0; a None candidate or home becomes NaN.
    """
    level = np.array(prev.level, dtype=np.float64)
    seen = np.array(prev.seen, dtype=np.int64)
    run = np.array(prev.run, dtype=np.int64)
    candidate = np.array(prev.candidate, dtype=np.float64)  # None → NaN
    home = np.array(prev.home, dtype=np.float64)
    if prev.features == tuple(names):  # the usual case: the catalog of the last bucket
        return level, seen, run, candidate, home
    index = {f: i for i, f in enumerate(prev.features)}
    rows = np.array([index.get(name, -1) for name in names], dtype=np.int64)
    have = rows >= 0
    picked = rows[have]
    n = len(names)
    new_level, new_seen, new_run = np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64)
    new_candidate, new_home = np.full(n, np.nan), np.full(n, np.nan)
    new_level[have], new_seen[have], new_run[have] = level[picked], seen[picked], run[picked]
    new_candidate[have], new_home[have] = candidate[picked], home[picked]
    return new_level, new_seen, new_run, new_candidate, new_home


def _optional(values: FloatArray) -> tuple[float | None, ...]:
    return tuple(None if math.isnan(v) else v for v in values.tolist())


def regime_check(
    held: Collection[str],
    current: FloatArray,
    names: Sequence[str],
    abs_floor: FloatArray,
    params: ShiftParams,
) -> Callable[[Signal], bool]:
    """Whether a signal of an open alert can no longer be judged against the peers.

    True when its feature is held this bucket (shifted, or moved by a phase), or
    when the peers have moved from the median the alert saw toward the node's own
    value (more than the shift threshold): the culprit's Collapse seen at 300 K
    interrupts/s says nothing once the job died and its peers sit at 50 K/s with
    it. A group that moved the other way (an alert fired in a transition, at a
    median below the job's usual level, and the job then ran at its usual level)
    judges the node as it is now; comparing with the group's *usual* level instead
    held such an alert open for ever.
    """
    thr = params.shift_threshold
    now = dict(zip(names, current.tolist(), strict=True))
    floors = dict(zip(names, abs_floor.tolist(), strict=True))

    def unjudgeable(signal: Signal) -> bool:
        if signal.feature in held:
            return True
        median, level = signal.median, now.get(signal.feature, math.nan)
        if not (math.isfinite(median) and math.isfinite(level) and math.isfinite(signal.value)):
            return False
        tolerance = max(thr * abs(median), floors.get(signal.feature, 0.0))
        toward_node = (median - level) * math.copysign(1.0, median - signal.value)
        return toward_node > tolerance

    return unjudgeable
