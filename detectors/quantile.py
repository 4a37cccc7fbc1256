"""A streaming quantile (the P² estimator) as plain JSON state.

Five markers (min, q/2, q, (1+q)/2, max) track one quantile of an unbounded
stream in constant space (Jain & Chlamtac 1985). The arithmetic is river's
``stats.Quantile`` (its Rust core, ``rust_src/quantile.rs``) step for step, in
the same order, so the estimates are the same floats (the tests feed both and
compare bit for bit): a model calibrated by river before gives the same scores
after. River's object only persists as a pickle of compiled state; this one is
a frozen dataclass the state codec writes as numbers, and a legacy pickle of
river's sketch is read once by :func:`from_river_state`.

>>> s = P2Quantile(0.5)
>>> for x in (9.0, 7.0, 3.0, 2.0, 6.0, 1.0, 8.0, 5.0, 4.0):
...     s = s.add(x)
>>> s.get(), s.count
(5.0, 9)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from detectors.checks import check_reals
from detectors.state_codec import JsonState, check

__all__ = ["P2Quantile", "from_river_state"]

# River's sorting network for the first five values (the order matters for -0.0 vs 0.0).
_NETWORK = ((0, 1), (3, 4), (0, 2), (1, 2), (0, 3), (2, 3), (1, 4), (1, 2), (3, 4))
# River's serialised core: q, four runs of five f64 (increments, desired positions,
# positions, heights), the number of heights (u8) and whether they are sorted (bool).
_RIVER_LAYOUT = struct.Struct("<21dB?")


def _five(value: tuple[float, ...], where: str) -> None:
    if len(value) != 5 or not all(math.isfinite(v) for v in value):
        raise ValueError(f"{where} must hold five finite numbers")


def _heights(value: tuple[float, ...], where: str) -> None:
    if len(value) > 5:
        raise ValueError(f"{where} holds at most five values")


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

    q: float = 0.5
    desired: tuple[float, ...] = field(default=(), metadata=check(_five))
    positions: tuple[float, ...] = field(default=(1.0, 2.0, 3.0, 4.0, 5.0), metadata=check(_five))
    heights: tuple[float, ...] = field(default=(), metadata=check(_heights))
    ordered: bool = False

    def __post_init__(self) -> None:
        check_reals(self, "q", above=0, below=1)
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
