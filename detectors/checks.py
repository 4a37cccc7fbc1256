"""One rule system for parameters and decoded state: each field's rule, declared with it.

A field's rule is declared with the field: ``hazard_buckets: float = real(240.0, above=1)``,
``top_k: int = integer(3)``, ``learned: bool = flag(True)``, ``phase: PhaseParams =
part(PhaseParams)``, ``feature: str = text("gpu_util")``, any rule with its default:
``app_xids: tuple[int, ...] = checked((13, 31), each(int_rule()))``, or without one (or beside
the state codec's own metadata): ``reference: float = field(metadata=rule(real_rule()))``.
A rule is ``rule(name, value)``, raising :class:`RulesError` with one wording everywhere ("a
must be an int >= 1, got 0", "x must be finite and > 0, got nan", "y must be in (0, 1], got
2", "z[3] must be finite and >= 0, got -1.0"); the rule makers (``int_rule``, ``real_rule``,
``text_rule``, ``one_of``, ``each``, ``maybe``) build them.

Who runs a field's rule:

- a :class:`Checked` class (the parameters, every field with a default), at every
  construction: its ``__post_init__`` runs them all, in declaration order; a class adds a
  ``__post_init__`` (calling ``super()``'s first) only for rules across fields
  (``check_at_least(self, "b", "a")``: "b (3) must be >= a (5)"); a record whose fields are
  required (an XID event, a stage's cost) calls ``check_fields(self)`` from its own;
- the state codec (:mod:`detectors.state_codec`), after decoding each field of any class it
  restores, naming the class and the field ("SloState.judged_s must be ..."): state is built
  every bucket by step functions that keep it true, so it is checked once, on restore. A state
  class whose construction takes parameters (a sketch's accuracy) runs those fields' declared
  rules itself: ``check_fields(self, "q")``.

:func:`is_finite` is the one finiteness test (numbers, numpy's too, and arrays); rules, the
codec and the detectors' input checks use it. ``check_name`` is the one check of a name read
off the wire (job events, membership), raising the reader's own error type.

The service's own settings (ports, limits, timeouts: ``streams.settings``) are validated by
pydantic (``Field(ge=1)``); a detector section of the settings is one of these classes, whose
rules pydantic runs by constructing it, so a bad value reads the same in both.
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
    "Rule",
    "check_at_least",
    "check_fields",
    "check_name",
    "checked",
    "each",
    "flag",
    "int_rule",
    "integer",
    "is_finite",
    "is_int",
    "maybe",
    "maybe_real",
    "one_of",
    "part",
    "real",
    "real_rule",
    "rule",
    "rule_of",
    "text",
    "text_rule",
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


def is_finite(x: object) -> bool:
    """A finite number: an int or float (numpy's too), not a bool; an array: every entry finite.

    The one finiteness test: the rules, the state codec and the detectors' input checks."""
    if isinstance(x, float | np.floating):
        return math.isfinite(x)
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "iuf" and bool(np.isfinite(x).all())
    return is_int(x)  # an int is finite, however large (math.isfinite would overflow)


def check_name(value: object, what: str, error: type[Exception]) -> str:
    """``value`` if it is a non-empty string of at most ``MAX_NAME`` characters, else ``error``."""
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, got {value!r:.80}")
    if len(value) > MAX_NAME:
        raise error(f"{what} is longer than {MAX_NAME} characters")
    return value


class Checked:
    """Base of the parameter dataclasses: every construction runs each field's declared rule."""

    def __post_init__(self) -> None:
        for name, r in _rules(type(self)):
            r(name, getattr(self, name))


def check_fields(owner: object, *names: str) -> None:
    """Run the declared rules of ``owner``'s fields ``names`` (a state class's construction
    parameters; the codec runs every field's rule on restore), or of every field that has
    one (a record with fields required, which is no :class:`Checked` parameter class)."""
    if not names:
        for name, r in _rules(type(owner)):
            r(name, getattr(owner, name))
        return
    rules = _rule_map(type(owner))
    for name in names:
        rules[name](name, getattr(owner, name))


_RULES: dict[type, tuple[tuple[str, Rule], ...]] = {}
_RULE_MAPS: dict[type, dict[str, Rule]] = {}


def _rules(cls: type) -> tuple[tuple[str, Rule], ...]:
    """The fields of ``cls`` that carry a rule, in declaration order (found once per class)."""
    found = _RULES.get(cls)
    if found is None:
        fields = dataclasses.fields(cls)
        found = _RULES[cls] = tuple(
            (f.name, f.metadata[_RULE]) for f in fields if _RULE in f.metadata
        )
    return found


def _rule_map(cls: type) -> dict[str, Rule]:
    found = _RULE_MAPS.get(cls)
    if found is None:  # a pure cache, as _RULES
        found = _RULE_MAPS[cls] = dict(_rules(cls))
    return found


def rule_of(f: dataclasses.Field[Any]) -> Rule | None:
    """The rule declared with dataclass field ``f``, if any (what the state codec runs)."""
    found: Rule | None = f.metadata.get(_RULE)
    return found


# ---------------------------------------------------------------- declarations


def rule(r: Rule) -> dict[str, Any]:
    """``field(metadata=rule(r))``: the field's rule, for a field without a default or with
    the state codec's own metadata beside it (``rule(r) | ndarray(...)``)."""
    return {_RULE: r}


def checked(default: T, r: Rule) -> T:
    """A field with this default and the rule ``r``."""
    return dataclasses.field(default=default, metadata={_RULE: r})


def integer(default: int, *, minimum: int = 1, maximum: int | None = None, why: str = "") -> int:
    """An int field (not a bool) in [minimum, maximum]; ``why``: the bound's reason, said
    in the error."""
    return checked(default, int_rule(minimum, maximum, why))


def real(default: float, why: str = "", **bounds: Unpack[Bounds]) -> float:
    """A finite number field (not a bool) within the given bounds (``why``: their reason)."""
    return checked(default, real_rule(**bounds, why=why))


def maybe_real(default: float | None = None, **bounds: Unpack[Bounds]) -> float | None:
    """Like :func:`real`, or None (not set)."""
    return checked(default, maybe(real_rule(**bounds)))


def flag(default: bool) -> bool:
    """A bool field (not 0 or 1)."""
    return checked(default, _flag_rule)


def text(default: str, why: str = "") -> str:
    """A non-empty string field (a feature's name)."""
    return checked(default, text_rule(why))


def part(kind: type[T], factory: Callable[[], T] | None = None) -> T:
    """A nested parameter field of type ``kind``, built by ``factory`` (default: ``kind()``)."""

    def part_rule(name: str, value: Any) -> None:
        if not isinstance(value, kind):
            raise RulesError(f"{name} must be a {kind.__name__}, got {value!r}")

    return dataclasses.field(default_factory=factory or kind, metadata={_RULE: part_rule})


def check_at_least(owner: object, name: str, floor: str, why: str = "") -> None:
    """A rule across two fields: ``owner.name >= owner.floor`` (``why``: what breaks if not)."""
    value, low = getattr(owner, name), getattr(owner, floor)
    if value < low:
        reason = f": {why}" if why else ""
        raise RulesError(f"{name} ({value}) must be >= {floor} ({low}){reason}")


# ---------------------------------------------------------------- rule makers


def int_rule(
    minimum: int = 1, maximum: int | None = None, why: str = "", *, numpy: bool = True
) -> Rule:
    """An int (not a bool) in [minimum, maximum]; ``numpy``: numpy's ints too (False for a
    record's field, written as JSON as it is)."""
    bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    reason = f" ({why})" if why else ""
    kind = is_int if numpy else _is_python_int

    def int_in_bounds(name: str, value: Any) -> None:
        if not kind(value) or value < minimum or (maximum is not None and value > maximum):
            raise RulesError(f"{name} must be an int {bounds}{reason}, got {value!r}")

    return int_in_bounds


def _is_python_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def real_rule(
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
    nan: bool = False,
    inf: bool = False,
    why: str = "",
) -> Rule:
    """A finite number (not a bool) within the bounds; ``nan``: NaN allowed too (a missing
    value), ``inf``: infinities within the bounds too. A numpy array: each of its entries."""
    said = _said(above, at_least, below, at_most, nan=nan, inf=inf)
    reason = f" ({why})" if why else ""

    def within(x: Any) -> Any:  # a number, or an array entry by entry
        ok: Any = True
        if above is not None:
            ok = ok & (x > above)
        if at_least is not None:
            ok = ok & (x >= at_least)
        if below is not None:
            ok = ok & (x < below)
        if at_most is not None:
            ok = ok & (x <= at_most)
        return ok

    def number_in_bounds(name: str, value: Any) -> None:
        if isinstance(value, np.ndarray):
            bad = _bad_entry(value, within, nan=nan, inf=inf)
            if bad is not None:
                raise RulesError(f"{name} must be {said} in every entry{reason}, got {bad!r}")
            return
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            ok = False
        elif value != value:  # NaN
            ok = nan
        else:
            ok = (inf or is_finite(value)) and within(value)
        if not ok:
            raise RulesError(f"{name} must be {said}{reason}, got {value!r}")

    return number_in_bounds


def _bad_entry(
    a: np.ndarray[Any, Any], within: Callable[[Any], Any], *, nan: bool, inf: bool
) -> float | None:
    """The first entry of ``a`` a number rule refuses, or None."""
    if a.dtype.kind not in "iuf":
        return math.nan
    flat = a.ravel()
    missing = np.isnan(flat)
    ok = (missing if nan else np.zeros(flat.shape, bool)) | (
        ~missing & (np.ones(flat.shape, bool) if inf else np.isfinite(flat)) & within(flat)
    )
    if ok.all():
        return None
    return float(flat[int(np.argmin(ok))])


def _said(
    above: float | None,
    at_least: float | None,
    below: float | None,
    at_most: float | None,
    *,
    nan: bool,
    inf: bool,
) -> str:
    low = above if above is not None else at_least
    high = below if below is not None else at_most
    if low is not None and high is not None:
        opening = "(" if above is not None else "["
        closing = ")" if below is not None else "]"
        said = f"in {opening}{low:g}, {high:g}{closing}"
    else:
        said = "" if inf else "finite"
        if low is not None:
            said += f"{' and ' if said else ''}{'>' if above is not None else '>='} {low:g}"
        if high is not None:
            said += f"{' and ' if said else ''}{'<' if below is not None else '<='} {high:g}"
    return f"{said} or NaN" if nan else said


def _flag_rule(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise RulesError(f"{name} must be a bool, got {value!r}")


def text_rule(why: str = "") -> Rule:
    """A non-empty string."""
    reason = f" ({why})" if why else ""

    def non_empty(name: str, value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise RulesError(f"{name} must be a non-empty string{reason}, got {value!r}")

    return non_empty


def one_of(*choices: object) -> Rule:
    """One of ``choices``."""
    said = ", ".join(map(repr, choices))

    def among(name: str, value: Any) -> None:
        if value not in choices:
            raise RulesError(f"{name} must be one of {said}, got {value!r}")

    return among


def each(r: Rule, *, non_empty: bool = False) -> Rule:
    """A tuple whose every item passes ``r`` (named ``name[i]``); ``non_empty``: one at least."""
    said = "a non-empty tuple" if non_empty else "a tuple"

    def every(name: str, value: Any) -> None:
        if not isinstance(value, tuple) or (non_empty and not value):
            raise RulesError(f"{name} must be {said}, got {value!r}")
        for i, item in enumerate(value):
            r(f"{name}[{i}]", item)

    return every


def maybe(r: Rule) -> Rule:
    """None (not set), or a value passing ``r``."""

    def none_or(name: str, value: Any) -> None:
        if value is not None:
            r(name, value)

    return none_or
