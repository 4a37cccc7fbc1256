"""The checks parameter dataclasses share (bools are not numbers), declared next to each field.

A parameter dataclass derives from :class:`Checked` and declares each field's bounds
with its default: ``hazard_buckets: float = real(240.0, above=1)``, ``top_k: int =
integer(3)``, ``learned: bool = flag(True)``, ``phase: PhaseParams = part(PhaseParams)``.
``Checked.__post_init__`` validates them all, in declaration order, with one wording
everywhere ("a must be an int >= 1, got 0", "x must be finite and > 0, got nan",
"y must be in (0, 1], got 2"), which the settings errors show the operator; a class
adds a ``__post_init__`` (calling ``super()``'s first) only for rules across fields.
``check_at_least(self, "b", "a")`` is the common rule across two fields ("b (3) must be
>= a (5)"); ``check_ints`` / ``check_reals`` are the field checks for classes that are
no parameters.
``check_name`` is the one check of a name read off the wire (job events, membership),
raising the reader's own error type.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import numpy as np

from detectors.errors import RulesError

if TYPE_CHECKING:
    from typing import Unpack

__all__ = [
    "MAX_NAME",
    "Bounds",
    "Checked",
    "check_at_least",
    "check_ints",
    "check_name",
    "check_reals",
    "checked",
    "flag",
    "integer",
    "is_int",
    "is_real",
    "maybe_real",
    "part",
    "real",
]

MAX_NAME = 1024  # characters in a job, node or group name read off the wire

T = TypeVar("T")
Rule = Callable[[str, Any], None]
"""``rule(name, value)`` raises RulesError (a ValueError) naming a field not allowed."""

_RULE = "detectors.checks.rule"  # the dataclass field metadata key of a field's rule


class Bounds(TypedDict, total=False):
    """A number's bounds: ``above`` / ``at_least`` below it, ``below`` / ``at_most`` above."""

    above: float
    at_least: float
    below: float
    at_most: float


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


class Checked:
    """Base of the parameter dataclasses: validates every field declared with a rule."""

    def __post_init__(self) -> None:
        for name, rule in _rules(type(self)):
            rule(name, getattr(self, name))


_RULES: dict[type, tuple[tuple[str, Rule], ...]] = {}


def _rules(cls: type) -> tuple[tuple[str, Rule], ...]:
    """The fields of ``cls`` that carry a rule, in declaration order (found once per class)."""
    found = _RULES.get(cls)
    if found is None:
        fields = dataclasses.fields(cls)
        found = _RULES[cls] = tuple(
            (f.name, f.metadata[_RULE]) for f in fields if _RULE in f.metadata
        )
    return found


def checked(default: T, rule: Rule) -> T:
    """A field with this default that :class:`Checked` validates with ``rule``."""
    return dataclasses.field(default=default, metadata={_RULE: rule})


def integer(default: int, *, minimum: int = 1, maximum: int | None = None, why: str = "") -> int:
    """An int field (not a bool) in [minimum, maximum]; ``why``: the bound's reason, said
    in the error."""
    return checked(default, _int_rule(minimum, maximum, why))


def real(default: float, **bounds: Unpack[Bounds]) -> float:
    """A finite number field (not a bool) within the given bounds."""
    return checked(default, _real_rule(**bounds))


def maybe_real(default: float | None = None, **bounds: Unpack[Bounds]) -> float | None:
    """Like :func:`real`, or None (not set)."""
    within = _real_rule(**bounds)

    def rule(name: str, value: Any) -> None:
        if value is not None:
            within(name, value)

    return checked(default, rule)


def flag(default: bool) -> bool:
    """A bool field (not 0 or 1)."""

    def rule(name: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise RulesError(f"{name} must be a bool, got {value!r}")

    return checked(default, rule)


def part(kind: type[T], factory: Callable[[], T] | None = None) -> T:
    """A nested parameter field of type ``kind``, built by ``factory`` (default: ``kind()``)."""

    def rule(name: str, value: Any) -> None:
        if not isinstance(value, kind):
            raise RulesError(f"{name} must be a {kind.__name__}, got {value!r}")

    return dataclasses.field(default_factory=factory or kind, metadata={_RULE: rule})


def check_at_least(owner: object, name: str, floor: str, why: str = "") -> None:
    """A rule across two fields: ``owner.name >= owner.floor`` (``why``: what breaks if not)."""
    value, low = getattr(owner, name), getattr(owner, floor)
    if value < low:
        reason = f": {why}" if why else ""
        raise RulesError(f"{name} ({value}) must be >= {floor} ({low}){reason}")


def check_ints(owner: object, *names: str, minimum: int = 1, maximum: int | None = None) -> None:
    """Each named field of ``owner`` is an int (not a bool) in [minimum, maximum]."""
    rule = _int_rule(minimum, maximum)
    for name in names:
        rule(name, getattr(owner, name))


def check_reals(owner: object, *names: str, **bounds: Unpack[Bounds]) -> None:
    """Each named field of ``owner`` is a finite number (not a bool) within the given bounds."""
    rule = _real_rule(**bounds)
    for name in names:
        rule(name, getattr(owner, name))


def _int_rule(minimum: int, maximum: int | None, why: str = "") -> Rule:
    def rule(name: str, value: Any) -> None:
        if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            reason = f" ({why})" if why else ""
            raise RulesError(f"{name} must be an int {bounds}{reason}, got {value!r}")

    return rule


def _real_rule(
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
) -> Rule:
    def rule(name: str, value: Any) -> None:
        ok = is_real(value) and not (
            (above is not None and value <= above)
            or (at_least is not None and value < at_least)
            or (below is not None and value >= below)
            or (at_most is not None and value > at_most)
        )
        if not ok:
            raise RulesError(
                f"{name} must be {_bounds(above, at_least, below, at_most)}, got {value!r}"
            )

    return rule


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
