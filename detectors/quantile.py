"""Streaming quantiles as plain JSON state (frozen :class:`JsonState` dataclasses, no pickle).

Two estimators, each where the other is the wrong tool:

* :class:`P2Quantile` — one fixed quantile far in a tail, over an unbounded
  signed stream, in constant space (five markers: the P² estimator, Jain &
  Chlamtac 1985). The multivariate model's 99.9th-percentile calibration.
  The arithmetic is river's ``stats.Quantile`` (its Rust core,
  ``rust_src/quantile.rs``) step for step, in the same order, so the
  estimates are the same floats (the tests feed both and compare bit for
  bit); a legacy pickle of river's sketch is read once by
  :func:`from_river_state`.
* :class:`QuantileSketch` — any quantile of a positive series, exact in rank
  and within relative error α in value (the DDSketch idea; bins grow with
  the series' log range). The fail-slow SLO's P50 / P5 and learned baseline.

Why not one: P² is a heuristic on small samples (on the SLO tests' hand-computed
job it gives 89.2 as the P50 of 11 values whose median is 95, and 100 as the
median of 100, 104, 98, 80 where the rank rule says 98), and the log-binned
sketch on the calibration's stream (half of 20,000 t(8) values positive) holds
651 bins, 7.2 KB of JSON against P²'s 282 bytes, at ~500 µs per value added.

>>> s = P2Quantile(0.5)
>>> for x in (9.0, 7.0, 3.0, 2.0, 6.0, 1.0, 8.0, 5.0, 4.0):
...     s = s.add(x)
>>> s.get(), s.count
(5.0, 9)
>>> t = QuantileSketch()
>>> for x in (100.0, 101.0, 99.0, 50.0, 100.5):
...     t = t.add(x)
>>> round(t.quantile(0.5), 1), round(t.quantile(0.0), 1), t.count
(100.0, 50.0, 5)
"""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from detectors.checks import check_fields, integer, is_finite, real, rule
from detectors.errors import RulesError
from detectors.state_codec import NANS_AS_NULLS, JsonState

__all__ = ["P2Quantile", "QuantileSketch", "from_river_state"]

# River's sorting network for the first five values (the order matters for -0.0 vs 0.0).
_NETWORK = ((0, 1), (3, 4), (0, 2), (1, 2), (0, 3), (2, 3), (1, 4), (1, 2), (3, 4))
# River's serialised core: q, four runs of five f64 (increments, desired positions,
# positions, heights), the number of heights (u8) and whether they are sorted (bool).
_RIVER_LAYOUT = struct.Struct("<21dB?")


def _five(name: str, value: tuple[float, ...]) -> None:
    if len(value) != 5 or not all(map(is_finite, value)):
        raise RulesError(f"{name} must hold five finite numbers, got {value!r}")


def _heights(name: str, value: tuple[float, ...]) -> None:
    if len(value) > 5:
        raise RulesError(f"{name} must hold at most five values, got {len(value)}")


def _increments(q: float) -> tuple[float, ...]:
    """How far each marker's desired position moves per value."""
    return (0.0, q / 2.0, q, (1.0 + q) / 2.0, 1.0)


def _start(q: float) -> tuple[float, ...]:
    return (1.0, 1.0 + 2.0 * q, 1.0 + 4.0 * q, 3.0 + 2.0 * q, 5.0)


@dataclass(frozen=True)
class P2Quantile(JsonState):
    """The ``q`` quantile of the values added so far; frozen (``add`` returns a new one).

    ``desired``: the markers' desired positions; ``positions``: their actual
    ones (1-based ranks); ``heights``: their values (the first five values
    as they came until a sixth arrives, then sorted: ``ordered``).
    """

    q: float = real(0.5, above=0, below=1)
    desired: tuple[float, ...] = field(default=(), metadata=rule(_five))
    positions: tuple[float, ...] = field(default=(1.0, 2.0, 3.0, 4.0, 5.0), metadata=rule(_five))
    # A NaN fed in (the model's score of a degenerate bucket) stays a NaN marker, as in
    # river's estimator; strict JSON writes it as null.
    heights: tuple[float, ...] = field(default=(), metadata=rule(_heights) | NANS_AS_NULLS)
    ordered: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "q")
        if not self.desired:
            object.__setattr__(self, "desired", _start(self.q))
        if self.ordered and len(self.heights) != 5:
            raise ValueError("P2Quantile: ordered heights must be five")

    @property
    def count(self) -> int:
        """Values added (the last marker's position once five have come)."""
        return int(self.positions[4]) if len(self.heights) == 5 else len(self.heights)

    def add(self, value: float) -> P2Quantile:
        """The estimator with ``value`` added."""
        return self.add_all((value,))

    def add_all(self, values: Iterable[float]) -> P2Quantile:
        """The estimator with ``values`` added in order (one new object for the batch)."""
        h = list(self.heights)
        desired = list(self.desired)
        pos = list(self.positions)
        inc = _increments(self.q)
        done = self.ordered
        inc1, inc2, inc3 = inc[1], inc[2], inc[3]
        for value in values:
            x = float(value)
            if len(h) < 5:
                h.append(x)
                continue
            if not done:
                for a, b in _NETWORK:
                    if h[b] < h[a]:
                        h[a], h[b] = h[b], h[a]
                done = True
            # the cell x falls in (1-4), the extremes stretched to it; positions from it on +1
            if x < h[0]:
                h[0] = x
                k = 1
            elif h[0] <= x < h[1]:
                k = 1
            elif h[1] <= x < h[2]:
                k = 2
            elif h[2] <= x < h[3]:
                k = 3
            elif h[3] <= x < h[4]:
                k = 4
            else:
                k = 4
                if h[4] < x:
                    h[4] = x
            for i in range(k, 5):
                pos[i] += 1.0
            desired[1] += inc1
            desired[2] += inc2
            desired[3] += inc3
            desired[4] += 1.0
            _adjust(h, pos, desired)
        return P2Quantile(self.q, tuple(desired), tuple(pos), tuple(h), done)

    def get(self) -> float | None:
        """The estimate (None before any value); below five values, an order statistic."""
        h = self.heights
        if self.ordered:
            return h[2]
        if not h:
            return None
        n = float(len(h))
        return sorted(h)[int(min(max(n - 1.0, 0.0), n * self.q))]


def _adjust(h: list[float], pos: list[float], desired: list[float]) -> None:
    """Move the three middle markers one step towards their desired positions."""
    for i in (1, 2, 3):
        n = pos[i]
        q = h[i]
        d = desired[i] - n
        if (d >= 1.0 and pos[i + 1] - n > 1.0) or (d <= -1.0 and pos[i - 1] - n < -1.0):
            d = math.copysign(1.0, d)
            qp1, qm1 = h[i + 1], h[i - 1]
            np1, nm1 = pos[i + 1], pos[i - 1]
            outer = d / (np1 - nm1)
            left = (n - nm1 + d) * (qp1 - q) / (np1 - n)
            right = (np1 - n - d) * (q - qm1) / (n - nm1)
            qn = q + outer * (left + right)  # parabolic
            if qm1 < qn < qp1:
                h[i] = qn
            else:  # linear, towards the neighbour on d's side
                j = i + int(d)
                h[i] = q + d * (h[j] - q) / (pos[j] - n)
            pos[i] = n + d


def from_river_state(raw: bytes) -> P2Quantile:
    """River's serialised ``RsQuantile`` core as a :class:`P2Quantile` (``ValueError``: not one)."""
    if len(raw) != _RIVER_LAYOUT.size:
        raise ValueError(f"a river quantile state has {_RIVER_LAYOUT.size} bytes, got {len(raw)}")
    *numbers, n_heights, is_sorted = _RIVER_LAYOUT.unpack(raw)
    q = numbers[0]
    if not 0 < q < 1 or n_heights > 5 or tuple(numbers[1:6]) != _increments(q):
        raise ValueError("not a river quantile state")
    heights = tuple(numbers[16 : 16 + n_heights])
    return P2Quantile(q, tuple(numbers[6:11]), tuple(numbers[11:16]), heights, is_sorted)


# ---------------------------------------------------------------- log-binned sketch
# A value x > 0 goes to bin ceil(log_γ x) with γ = (1 + α) / (1 − α); every value in a bin
# is within relative error α of the bin's representative 2 γ^i / (γ + 1). So a quantile is
# exact in rank and within α (default 0.5 %) in value, whatever the stream's length, and a
# job's whole life fits in a few hundred bins. Beyond ``max_bins`` the lowest bins merge
# (only the far low tail, where a P5 never reaches in practice, loses accuracy).


def _increasing_bins(name: str, bins: tuple[tuple[int, int], ...]) -> None:
    if any(c < 1 for _, c in bins) or [k for k, _ in bins] != sorted({k for k, _ in bins}):
        raise RulesError(f"{name} must be strictly increasing with counts >= 1")


@dataclass(frozen=True)
class QuantileSketch(JsonState):
    """Frozen sketch: ``add`` returns a new one. ``bins``: sorted (index, count) pairs."""

    relative_accuracy: float = real(0.005, above=0, below=0.5)
    max_bins: int = integer(2048, minimum=2)
    bins: tuple[tuple[int, int], ...] = field(default=(), metadata=rule(_increasing_bins))
    count: int = 0
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        check_fields(self, "relative_accuracy", "max_bins")
        if sum(c for _, c in self.bins) != self.count:
            raise ValueError("bin counts do not add up to count")

    @property
    def gamma(self) -> float:
        return (1.0 + self.relative_accuracy) / (1.0 - self.relative_accuracy)

    def add(self, value: float) -> QuantileSketch:
        """The sketch with ``value`` added; a non-finite or non-positive value is ignored."""
        x = float(value)
        if not (math.isfinite(x) and x > 0):
            return self
        index = math.ceil(math.log(x) / math.log(self.gamma))
        keys = [k for k, _ in self.bins]
        pos = bisect.bisect_left(keys, index)
        bins = list(self.bins)
        if pos < len(bins) and bins[pos][0] == index:
            bins[pos] = (index, bins[pos][1] + 1)
        else:
            bins.insert(pos, (index, 1))
        if len(bins) > self.max_bins:  # merge the lowest bins into the first kept one
            extra = len(bins) - self.max_bins + 1
            merged = sum(c for _, c in bins[:extra])
            bins = [(bins[extra - 1][0], merged), *bins[extra:]]
        return QuantileSketch(
            relative_accuracy=self.relative_accuracy,
            max_bins=self.max_bins,
            bins=tuple(bins),
            count=self.count + 1,
            low=x if self.low is None else min(self.low, x),
            high=x if self.high is None else max(self.high, x),
        )

    def quantile(self, q: float) -> float:
        """The value at rank ⌊q·(count − 1)⌋ of the sorted stream, within relative error α.

        NaN when empty. q = 0 and q = 1 give the exact minimum and maximum.
        """
        if not 0 <= q <= 1:
            raise ValueError(f"q must be in [0, 1], got {q}")
        if self.count == 0 or self.low is None or self.high is None:
            return math.nan
        rank = math.floor(q * (self.count - 1))
        if rank == 0:
            return self.low
        if rank == self.count - 1:
            return self.high
        seen = 0
        gamma = self.gamma
        for index, c in self.bins:
            seen += c
            if seen > rank:
                value = 2.0 * gamma**index / (gamma + 1.0)
                return min(max(value, self.low), self.high)
        return self.high
