"""Detector state <-> JSON-safe data, by one mechanism driven by the dataclasses' type hints.

``to_data(state)`` gives plain dicts/lists/str/int/float/None (a dataclass becomes
a dict keyed by its field names; tuples become lists); ``from_data(cls, data)``
rebuilds ``cls`` from that, converting each field by its annotation and raising
``ValueError`` naming the class and field on anything malformed. A field absent
from ``data`` takes its default (states saved before the field existed restore).

A field whose compact form differs (numpy arrays as base64, a value only
finite) says so with ``field(metadata=hook(encode, decode))`` or
``field(metadata=check(validate))``; the dataclass's own ``__post_init__`` still
runs. A state class gets ``to_dict``/``from_dict`` by inheriting :class:`JsonState`.

Hand-rolled rather than pydantic's ``TypeAdapter``: the persisted format must
stay byte-for-byte what the hand-written ``to_dict``s wrote (pydantic would emit
its own shapes for tuples-of-tuples, numpy fields need arbitrary-type config,
and its lax coercions differ from the old ``from_dict``s'), and ``detectors/``
stays free of a validation framework; this is ~150 lines with no dependency.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Self, TypeVar, Union

T = TypeVar("T")

_HOOK = "state_codec"
_CHECK = "state_codec_check"
_TRANSIENT = "state_codec_transient"

TRANSIENT = {_TRANSIENT: True}
"""``field(metadata=TRANSIENT)``: not persisted (rebuilt after a restore); takes its default."""


@dataclasses.dataclass(frozen=True)
class Hook:
    """Per-field encoding: ``encode(value) -> data``, ``decode(data, where) -> value``."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any, str], Any]


def hook(encode: Callable[[Any], Any], decode: Callable[[Any, str], Any]) -> dict[str, Any]:
    """``field(metadata=hook(...))``: this field is encoded/decoded by the given pair."""
    return {_HOOK: Hook(encode, decode)}


def check(validate: Callable[[Any, str], None]) -> dict[str, Any]:
    """``field(metadata=check(f))``: after decoding, ``f(value, where)`` may raise ValueError.

    For what only restored data can get wrong (the step functions keep it true), so
    it is checked once on restore, not on every construction in ``__post_init__``.
    """
    return {_CHECK: validate}


def _all_finite(value: Any, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be finite, got {value!r}")
    if isinstance(value, (tuple, list)):
        for item in value:
            _all_finite(item, where)


def _all_finite_non_negative(value: Any, where: str) -> None:
    _all_finite(value, where)
    values = value if isinstance(value, (tuple, list)) else (value,)
    if any(isinstance(v, (int, float)) and v < 0 for v in values):
        raise ValueError(f"{where} must be >= 0, got {value!r}")


FINITE = check(_all_finite)
"""Every float in the field (also inside tuples) is finite."""
FINITE_NON_NEGATIVE = check(_all_finite_non_negative)
"""Every float in the field is finite and >= 0."""


class JsonState:
    """Mixin for a state dataclass: ``to_dict``/``from_dict`` by the codec."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; :meth:`from_dict` rebuilds an equal state."""
        data: dict[str, Any] = to_data(self)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict`'s output; ``ValueError`` naming the field if malformed."""
        return from_data(cls, data)


def to_data(value: Any) -> Any:
    """``value`` as JSON-safe data (dataclasses by field, tuples as lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not isinstance(value, JsonState) and hasattr(value, "to_dict"):
            return value.to_dict()  # a type with its own hand-written format
        out: dict[str, Any] = {}
        for f in _fields(type(value)):
            v = getattr(value, f.name)
            h = f.metadata.get(_HOOK)
            out[f.name] = h.encode(v) if h is not None else to_data(v)
        return out
    if isinstance(value, (tuple, list)):
        return [to_data(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_data(v) for k, v in value.items()}
    return value


def from_data(cls: type[T], data: Any, where: str | None = None) -> T:
    """Rebuild dataclass ``cls`` from :func:`to_data`'s output; ``ValueError`` if malformed."""
    where = where or cls.__name__
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a JSON object, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in _fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where} is missing {f.name!r}")
            continue
        h = f.metadata.get(_HOOK)
        at = f"{where}.{f.name}"
        raw = data[f.name]
        value = h.decode(raw, at) if h is not None else decode(hints[f.name], raw, at)
        validate = f.metadata.get(_CHECK)
        if validate is not None:
            validate(value, at)
        kwargs[f.name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"malformed {where}: {exc}") from None


def decode(hint: Any, data: Any, where: str) -> Any:
    """``data`` converted to the type ``hint`` (the building block of :func:`from_data`)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return data
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 1:
            return decode(arms[0], data, where)
        for arm in arms:
            try:
                return decode(arm, data, where)
            except ValueError:
                continue
        raise ValueError(f"{where}: {data!r} matches none of {hint}")
    if data is None and hint is not type(None):
        raise ValueError(f"{where} must not be null")
    if origin is Literal:
        if data not in args:
            raise ValueError(f"{where} must be one of {list(args)}, got {data!r}")
        return data
    if origin is tuple or origin is list:
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"{where} must be a list, got {type(data).__name__}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(data) != len(args):
                raise ValueError(f"{where} must have {len(args)} items, got {len(data)}")
            return tuple(
                decode(a, d, f"{where}[{i}]")
                for i, (a, d) in enumerate(zip(args, data, strict=True))
            )
        item = args[0] if args else Any
        items = [decode(item, d, f"{where}[{i}]") for i, d in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(data, Mapping):
            raise ValueError(f"{where} must be an object, got {type(data).__name__}")
        key, val = args if args else (Any, Any)
        return {
            decode(key, k, f"{where} key"): decode(val, v, f"{where}[{k!r}]")
            for k, v in data.items()
        }
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not issubclass(hint, JsonState) and hasattr(hint, "from_dict"):
            if not isinstance(data, Mapping):
                raise ValueError(f"{where} must be a JSON object, got {type(data).__name__}")
            return hint.from_dict(data)
        return from_data(hint, data, where)
    if hint is bool:
        if not isinstance(data, bool):
            raise ValueError(f"{where} must be a bool, got {data!r}")
        return data
    if hint is int:
        if isinstance(data, bool) or not isinstance(data, int):
            if isinstance(data, float) and data.is_integer():
                return int(data)
            if isinstance(data, str) and key_is_int(data):
                return int(data)
            raise ValueError(f"{where} must be an int, got {data!r}")
        return data
    if hint is float:
        return _float(data, where)
    if hint is str:
        if not isinstance(data, str):
            raise ValueError(f"{where} must be a string, got {data!r}")
        return data
    raise TypeError(f"state_codec cannot decode {hint!r} at {where}")  # a programming error


def key_is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _float(data: Any, where: str) -> float:
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise ValueError(f"{where} must be a number, got {data!r}")
    return float(data)


_FIELDS: dict[type, tuple[dataclasses.Field[Any], ...]] = {}
_HINTS: dict[type, dict[str, Any]] = {}


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    if cls not in _FIELDS:  # a pure cache: the same value whenever it is computed
        _FIELDS[cls] = tuple(
            f for f in dataclasses.fields(cls) if f.init and not f.metadata.get(_TRANSIENT)
        )
    return _FIELDS[cls]


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]
