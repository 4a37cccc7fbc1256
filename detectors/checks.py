"""The type checks parameter dataclasses' ``__post_init__``s share (bools are not numbers)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["is_int", "is_real"]


def is_int(x: object) -> bool:
    """An int (numpy's too), not a bool."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def is_real(x: object) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
