"""Streaming quantiles of a positive series with bounded relative error, as JSON-safe state.

Used for a job's throughput P50 / P5 and its learned baseline. River's
``stats.Quantile`` would do the streaming, but its state is a compiled object,
not the plain JSON a Faust table keeps; this sketch is a sorted run of
logarithmic bins instead (the DDSketch idea): a value x > 0 goes to bin
``ceil(log_γ x)`` with γ = (1 + α) / (1 − α), and every value in a bin is
within relative error α of the bin's representative ``2 γ^i / (γ + 1)``. So a
quantile is exact in rank and within α (default 0.5 %) in value, whatever the
stream's length, and a job's whole life fits in a few hundred bins. When
``max_bins`` is exceeded the lowest bins merge (only the far low tail, where a
P5 never reaches in practice, loses accuracy).

>>> s = QuantileSketch()
>>> for x in (100.0, 101.0, 99.0, 50.0, 100.5):
...     s = s.add(x)
>>> round(s.quantile(0.5), 1), round(s.quantile(0.0), 1), s.count
(100.0, 50.0, 5)
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from detectors.checks import check_ints, check_reals
from detectors.state_codec import JsonState, check

__all__ = ["QuantileSketch"]


def _increasing_bins(bins: tuple[tuple[int, int], ...], where: str) -> None:
    if any(c < 1 for _, c in bins) or [k for k, _ in bins] != sorted({k for k, _ in bins}):
        raise ValueError("QuantileSketch: bins must be strictly increasing with counts >= 1")


@dataclass(frozen=True)
class QuantileSketch(JsonState):
    """Frozen sketch: ``add`` returns a new one. ``bins``: sorted (index, count) pairs."""

    relative_accuracy: float = 0.005
    max_bins: int = 2048
    bins: tuple[tuple[int, int], ...] = field(default=(), metadata=check(_increasing_bins))
    count: int = 0
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        check_reals(self, "relative_accuracy", above=0, below=0.5)
        check_ints(self, "max_bins", minimum=2)
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
