"""The checks parameter dataclasses' ``__post_init__``s share (bools are not numbers).

``check_ints(self, "a", "b", minimum=1)`` and ``check_reals(self, "x", above=0)``
validate named fields with one wording everywhere ("a must be an int >= 1, got 0",
"x must be finite and > 0, got nan", "y must be in (0, 1], got 2"), which the
settings errors show the operator. ``check_name`` is the one check of a name read off
the wire (job events, membership), raising the reader's own error type.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_NAME", "check_ints", "check_name", "check_reals", "is_int", "is_real"]

MAX_NAME = 1024  # characters in a job, node or group name read off the wire


def is_int(x: object) -> bool:
    """An int (numpy's too), not a bool."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def is_real(x: object) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_name(value: object, what: str, error: type[Exception]) -> str:
    """``value`` if it is a non-empty string of at most ``MAX_NAME`` characters, else ``error``."""
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, got {value!r:.80}")
    if len(value) > MAX_NAME:
        raise error(f"{what} is longer than {MAX_NAME} characters")
    return value


def check_ints(owner: object, *names: str, minimum: int = 1, maximum: int | None = None) -> None:
    """Each named field of ``owner`` is an int (not a bool) in [minimum, maximum]."""
    for name in names:
        value = getattr(owner, name)
        if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise ValueError(f"{name} must be an int {bounds}, got {value!r}")


def check_reals(
    owner: object,
    *names: str,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
) -> None:
    """Each named field of ``owner`` is a finite number (not a bool) within the given bounds."""
    for name in names:
        value = getattr(owner, name)
        ok = is_real(value) and not (
            (above is not None and value <= above)
            or (at_least is not None and value < at_least)
            or (below is not None and value >= below)
            or (at_most is not None and value > at_most)
        )
        if not ok:
            raise ValueError(
                f"{name} must be {_bounds(above, at_least, below, at_most)}, got {value!r}"
            )


def _bounds(
    above: float | None, at_least: float | None, below: float | None, at_most: float | None
) -> str:
    low = above if above is not None else at_least
    high = below if below is not None else at_most
    if low is not None and high is not None:
        opening = "(" if above is not None else "["
        closing = ")" if below is not None else "]"
        return f"in {opening}{low:g}, {high:g}{closing}"
    if low is not None:
        return f"finite and {'>' if above is not None else '>='} {low:g}"
    if high is not None:
        return f"finite and {'<' if below is not None else '<='} {high:g}"
    return "finite"
