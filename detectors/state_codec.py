"""Detector state <-> JSON-safe data, by one mechanism driven by the dataclasses' type hints.

``to_data(state)`` gives plain dicts/lists/str/int/float/None (a dataclass becomes
a dict keyed by its field names; tuples become lists); ``from_data(cls, data)``
rebuilds ``cls`` from that, converting each field by its annotation and raising
``RulesError`` (a ``ValueError``) naming the class and field on anything malformed. A field absent
from ``data`` takes its default (states saved before the field existed restore).

A field whose compact form differs (numpy arrays as base64, NaN as null) says so with
``field(metadata=hook(encode, decode))``; one persisted under another name with
``key(name)``, one left out while it holds nothing with ``omit(when)``. A field's rule is
the one :mod:`detectors.checks` declares with it (``real(0.0, at_least=0)``,
``field(metadata=rule(each(real_rule())))``): run on the decoded value, naming the class
and field (metadata combine with ``|``); the dataclass's own ``__post_init__`` still runs.
A state class gets ``to_dict``/``from_dict`` by inheriting :class:`JsonState` (an
output record only ``to_dict``, by :class:`JsonRecord`),
whose class variables say what a format older than the dataclass needs: a version
key written first (``VERSION``), the keys' order if it is not the fields'
(``KEY_ORDER``, which also leaves out fields not named and may name a property),
and hooks to read older shapes (``upgrade``, or ``filled`` for an unversioned
class) and tidy a restored state (``restored``). Sets and frozensets are written
as sorted lists. A state written every bucket from values its owner holds anyway is
encoded from those, without building the dataclass: ``row_encoder(cls)(values)``, and a
field of such rows declares ``field(metadata=rows(cls))``.

Each class's encoder is compiled once from its fields into one function (a dict display,
as :mod:`dataclasses` compiles ``__init__``), scalars by their hints written as they are:
a snapshot of every node's GPU state encodes the same few classes ~10^5 times a bucket.

Hand-rolled rather than pydantic's ``TypeAdapter``: the persisted format must
stay byte-for-byte what the hand-written ``to_dict``s wrote (pydantic would emit
its own shapes for tuples-of-tuples, numpy fields need arbitrary-type config,
and its lax coercions differ from the old ``from_dict``s'), and ``detectors/``
stays free of a validation framework; this is ~600 lines with its docstrings and no
dependency.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Self, TypeVar, Union

import numpy as np

from detectors.checks import is_finite, rule_of
from detectors.errors import RulesError

T = TypeVar("T")

_HOOK = "state_codec"
_TRANSIENT = "state_codec_transient"
_KEY = "state_codec_key"
_OMIT = "state_codec_omit"

TRANSIENT = {_TRANSIENT: True}
"""``field(metadata=TRANSIENT)``: not persisted (rebuilt after a restore); takes its default."""


@dataclasses.dataclass(frozen=True)
class Hook:
    """Per-field encoding: ``encode(value) -> data``, ``decode(data, where) -> value``
    (``decode`` None: by the field's annotation, e.g. when only the order is special)."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any, str], Any] | None
    shape_of: Callable[[Mapping[str, Any], str], tuple[int, ...]] | None = None
    """For an array: its shape from the whole persisted object (``decode`` gets it third)."""


def hook(
    encode: Callable[[Any], Any], decode: Callable[[Any, str], Any] | None = None
) -> dict[str, Any]:
    """``field(metadata=hook(...))``: this field is encoded/decoded by the given pair."""
    return {_HOOK: Hook(encode, decode)}


def ndarray(
    dtype: str, shape_of: Callable[[Mapping[str, Any], str], tuple[int, ...]]
) -> dict[str, Any]:
    """``field(metadata=ndarray("<f8", shape_of))``: a numpy array as base64 of its bytes in
    ``dtype`` (no pickle), read back in native order with the shape ``shape_of(data, where)``
    gives from the persisted object (e.g. its name lists' lengths)."""

    def encode(a: Any) -> str:
        return encode_array(a, dtype)

    def decode(text: Any, where: str, shape: tuple[int, ...]) -> Any:
        return decode_array(text, dtype, shape, where)

    return {_HOOK: Hook(encode, decode, shape_of)}  # type: ignore[arg-type]


def encode_array(a: Any, dtype: str) -> str:
    """Base64 of ``a``'s bytes as ``dtype`` (e.g. ``"<f8"``: little-endian whatever the host)."""
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode("ascii")


def decode_array(text: Any, dtype: str, shape: tuple[int, ...], where: str) -> Any:
    """:func:`encode_array`'s output back as a ``shape`` array; ``ValueError`` if malformed."""
    wire = np.dtype(dtype)
    if not isinstance(text, str):
        raise RulesError(f"{where} must be a base64 string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise RulesError(f"{where} is not valid base64") from None
    expected = math.prod(shape) * wire.itemsize
    if len(raw) != expected:
        raise RulesError(f"{where} has {len(raw)} bytes, expected {expected}")
    # A private, writable, native-order copy (frombuffer alone would alias read-only bytes).
    return np.frombuffer(raw, dtype=wire).reshape(shape).astype(wire.newbyteorder("="))


def key(name: str) -> dict[str, Any]:
    """``field(metadata=key("last"))``: persisted as ``name``, not the field's own name
    (a format older than the field's name)."""
    return {_KEY: name}


def omit(when: Callable[[Any], bool]) -> dict[str, Any]:
    """``field(metadata=omit(f))``: not written while ``f(value)`` holds (read back absent:
    the field's default), so a record without the optional part keeps its older shape."""
    return {_OMIT: when}


def _is_none(value: Any) -> bool:
    return value is None


OPTIONAL = omit(_is_none)
"""A key left out while its field is None (an optional part of a record)."""


def _sorted_mapping(value: Mapping[Any, Any]) -> dict[Any, Any]:
    return {k: to_data(v) for k, v in sorted(value.items())}


SORTED_KEYS = hook(_sorted_mapping)
"""A mapping field written in key order (read back by its annotation)."""


def pairs(key: type, value: type) -> dict[str, Any]:
    """``field(metadata=pairs(int, int))``: a ``dict[key, value]`` written as its sorted
    ``[key, value]`` pairs (a JSON object's keys could only be strings)."""

    def encode(mapping: Mapping[Any, Any]) -> list[list[Any]]:
        return sorted([to_data(k), to_data(v)] for k, v in mapping.items())

    def decode_pairs(data: Any, where: str) -> dict[Any, Any]:
        return dict(decode(tuple[tuple[key, value], ...], data, where))  # type: ignore[valid-type]

    return hook(encode, decode_pairs)


def _nan_as_null(x: float) -> float | None:
    return float(x) if is_finite(x) else None


def _null_as_nan(data: Any, where: str) -> float:
    return math.nan if data is None else _float(data, where)


NAN_AS_NULL = hook(_nan_as_null, _null_as_nan)
"""A float written as null when not finite (strict JSON has no NaN, inf), read null as NaN."""


def _nans_as_nulls(values: tuple[float, ...]) -> list[float | None]:
    return [_nan_as_null(x) for x in values]


def _nulls_as_nans(data: Any, where: str) -> tuple[float, ...]:
    if not isinstance(data, list):
        raise RulesError(f"{where} must be a list, got {type(data).__name__}")
    return tuple(_null_as_nan(x, f"{where}[{i}]") for i, x in enumerate(data))


NANS_AS_NULLS = hook(_nans_as_nulls, _nulls_as_nans)
"""A tuple of floats, each written as :data:`NAN_AS_NULL` writes one."""


def is_nan(x: float) -> bool:
    """For ``omit``: a float that is not finite (what :data:`NAN_AS_NULL` writes as null)."""
    return not is_finite(x)


def as_object(value: Any, encode_value: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """``field(metadata=as_object(str))``: ``(name, value)`` pairs written as a JSON object in
    their own order (``encode_value`` of each value, default :func:`to_data`), read back as
    the pairs sorted by name, each value by the hint ``value``."""
    put = encode_value or to_data

    def encode(items: Any) -> dict[str, Any]:
        return {k: put(v) for k, v in items}

    def decode_object(data: Any, where: str) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted(decode(dict[str, value], data, where).items()))  # type: ignore[valid-type]

    return hook(encode, decode_object)


class JsonRecord:
    """Mixin for an output record (a report row, a payload): ``to_dict`` by the codec, and no
    codec reader (the record leaves out what its dataclass needs to be rebuilt, or its reader
    is a parser of outside input with its own checks)."""

    KEY_ORDER: ClassVar[tuple[str, ...]] = ()
    """The keys written, in order, when not all the fields' in theirs (a format older than
    the class, fields left out, a property's value written)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (for a :class:`JsonState`, :meth:`~JsonState.from_dict` reads it)."""
        data: dict[str, Any] = to_data(self)
        return data


class JsonState(JsonRecord):
    """Mixin for a state dataclass: ``to_dict``/``from_dict`` by the codec."""

    VERSION: ClassVar[tuple[str, int] | None] = None
    """``(key, n)``: ``key: n`` is written first and required on restore."""
    LEGACY_VERSIONS: ClassVar[tuple[int, ...]] = ()
    """Older versions :meth:`upgrade` turns into the current shape."""
    LABEL: ClassVar[str] = ""
    """The state's name in the unsupported-version error (default: the class name)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict`'s output; ``ValueError`` naming the field if malformed."""
        return from_data(cls, data)

    @classmethod
    def upgrade(cls, data: Mapping[str, Any], version: int) -> Mapping[str, Any]:
        """``data`` of a ``LEGACY_VERSIONS`` version in the current shape."""
        return data

    @classmethod
    def filled(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """Without a ``VERSION`` (no key tells an older shape apart): ``data`` with what an
        older shape lacks filled in, e.g. a key whose default comes from another."""
        return data

    def restored(self) -> Self:
        """This state as just restored, tidied (e.g. entries a step would never keep dropped)."""
        return self


def _versioned(cls: type[JsonState], data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` of the current version (older ones upgraded); ``ValueError`` if unknown."""
    assert cls.VERSION is not None
    key, current = cls.VERSION
    version = data.get(key)
    if version != current and (isinstance(version, bool) or version not in cls.LEGACY_VERSIONS):
        label = cls.LABEL or cls.__name__
        raise RulesError(f"unsupported {label} {key} {version!r} (expected {current})")
    return data if version == current else cls.upgrade(data, version)


def to_data(value: Any) -> Any:
    """``value`` as JSON-safe data (dataclasses by field, tuples as lists)."""
    cls = value.__class__
    if cls in _PLAIN:
        return value
    encode = _ENCODERS.get(cls) or _encoder(cls)
    return encode(value)


_PLAIN = frozenset({str, int, float, bool, type(None)})

# One encoder per type, chosen once: a snapshot encodes the same few classes thousands of
# times, so what the type alone decides (which fields, keys, hooks, order) is not redone per
# value. A pure cache: the same function whenever it is computed.
_ENCODERS: dict[type, Callable[[Any], Any]] = {}


def _encoder(cls: type) -> Callable[[Any], Any]:
    encode: Callable[[Any], Any]
    record = issubclass(cls, JsonRecord) or not hasattr(cls, "to_dict")
    if dataclasses.is_dataclass(cls) and record:
        encode = _record_encoder(cls)
    elif issubclass(cls, (tuple, list)):
        encode = _items
    elif issubclass(cls, (set, frozenset)):
        encode = _sorted_items
    elif issubclass(cls, Mapping):
        encode = _mapping
    elif dataclasses.is_dataclass(cls) and not issubclass(cls, type):
        encode = _own_format  # a type with its own hand-written format
    else:
        encode = _same
    _ENCODERS[cls] = encode
    return encode


def _items(value: Any) -> list[Any]:
    return [v if v.__class__ in _PLAIN else to_data(v) for v in value]


def _sorted_items(value: Any) -> list[Any]:
    return sorted(to_data(v) for v in value)


def _mapping(value: Any) -> dict[Any, Any]:
    return {k: v if v.__class__ in _PLAIN else to_data(v) for k, v in value.items()}


def _own_format(value: Any) -> Any:
    return value.to_dict()


def _same(value: Any) -> Any:
    return value


def _record_encoder(cls: type, by_position: bool = False) -> Callable[[Any], dict[str, Any]]:
    """``cls``'s encoder, compiled from its fields (as :mod:`dataclasses` compiles ``__init__``):
    one dict display of its keys, each value read by attribute (``by_position``: from a
    tuple of the fields' values, in their order) and written by its hook, or as is when its
    hint is a scalar's (a tuple of scalars as a list), else by :func:`to_data` unless the
    value is plain; a key ``omit`` may leave out is set by a statement of its own. The
    order is the fields' (the version key first), or ``KEY_ORDER``'s, which leaves out
    fields it does not name and may name a property (not ``by_position``)."""
    env: dict[str, Any] = {"_PLAIN": _PLAIN, "to_data": to_data}
    hints = _encoding_hints(cls)
    # key -> (read, written inline, written from the local v it was read into, omit)
    writers: dict[str, tuple[str, str, str, str | None]] = {}
    version = getattr(cls, "VERSION", None)
    if version is not None:
        writers[version[0]] = ("", repr(version[1]), "", None)
    for i, f in enumerate(_fields(cls)):
        h, when = f.metadata.get(_HOOK), f.metadata.get(_OMIT)
        if h is not None:
            env[f"encode_{i}"] = h.encode
        if when is not None:
            env[f"omit_{i}"] = when
        read = f"value[{i}]" if by_position else f"value.{f.name}"
        writers[f.metadata.get(_KEY, f.name)] = (
            read,
            *_writer(read, None if h is None else f"encode_{i}", hints.get(f.name)),
            None if when is None else f"omit_{i}",
        )
    shown: list[str] = []  # the dict display's items, up to the first key that may be left out
    later: list[str] = []  # the statements after it
    for k in getattr(cls, "KEY_ORDER", ()) or tuple(writers):
        if k not in writers and by_position:
            raise TypeError(f"{cls.__name__}.{k} is no field: it cannot be read from a row")
        read, inline, of_v, when = writers.get(k) or ("", *_writer(f"value.{k}", None, None), None)
        if when is None and not later:
            shown.append(f"{k!r}: {inline}")
        elif when is None:
            later.append(f"    out[{k!r}] = {inline}")
        else:
            later += [f"    v = {read}", f"    if not {when}(v):", f"        out[{k!r}] = {of_v}"]
    source = "\n".join(
        ["def encode(value):", f"    out = {{{', '.join(shown)}}}", *later, "    return out"]
    )
    what = "row encoder" if by_position else "encoder"
    exec(compile(source, f"<state_codec {what} of {cls.__qualname__}>", "exec"), env)
    encoder: Callable[[Any], dict[str, Any]] = env["encode"]
    return encoder


def _writer(read: str, encode: str | None, hint: Any) -> tuple[str, str]:
    """How one value is written: the expression reading it from ``value`` by ``read``, and
    the one writing the local ``v`` it was read into."""
    if encode is not None:
        return f"{encode}({read})", f"{encode}(v)"
    if _is_scalar(hint):
        return read, "v"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    optional = origin in (Union, types.UnionType) and len(args) == 2 and type(None) in args
    items = next(a for a in args if a is not type(None)) if optional else hint
    if typing.get_origin(items) in (tuple, list) and all(
        _is_scalar(a) for a in typing.get_args(items) if a is not Ellipsis
    ):
        if optional:
            return f"None if (v := {read}) is None else [*v]", "None if v is None else [*v]"
        return f"[*{read}]", "[*v]"
    return (
        f"v if (v := {read}).__class__ in _PLAIN else to_data(v)",
        "v if v.__class__ in _PLAIN else to_data(v)",
    )


def _is_scalar(hint: Any) -> bool:
    """A hint whose values :func:`to_data` writes as they are (a str, a number, a literal)."""
    if hint in _PLAIN:
        return True
    origin = typing.get_origin(hint)
    if origin is Literal:
        return all(type(a) in _PLAIN for a in typing.get_args(hint))
    return origin in (Union, types.UnionType) and all(map(_is_scalar, typing.get_args(hint)))


def _encoding_hints(cls: type) -> dict[str, Any]:
    """``cls``'s field hints, or none (no fast paths) for an output record whose hints do not
    resolve at run time (names imported only for the type checker)."""
    try:
        return _hints(cls)
    except NameError:
        return {}


_ROW_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}


def row_encoder(cls: type) -> Callable[[tuple[Any, ...]], dict[str, Any]]:
    """The function writing a row, the values of ``cls``'s persisted fields in order, as
    ``to_data(cls(*row))`` would, without building the ``cls`` (a state written every bucket
    from the values its owner holds)."""
    encode = _ROW_ENCODERS.get(cls)
    if encode is None:  # a pure cache, as _ENCODERS
        encode = _ROW_ENCODERS[cls] = _record_encoder(cls, by_position=True)
    return encode


def rows(cls: type) -> dict[str, Any]:
    """``field(metadata=rows(Sample))``: a tuple of rows, each the values of ``cls``'s
    persisted fields in order, written as the ``cls`` records they stand for (by its
    :func:`row_encoder`) and read back as those records (their checks run), then as rows."""
    names = [f.name for f in _fields(cls)]

    def encode(values: Any) -> list[dict[str, Any]]:
        put = row_encoder(cls)
        return [put(row) for row in values]

    def decode_rows(data: Any, where: str) -> tuple[tuple[Any, ...], ...]:
        records = decode(tuple[cls, ...], data, where)  # type: ignore[valid-type]
        return tuple(tuple(getattr(r, n) for n in names) for r in records)

    return hook(encode, decode_rows)


def from_data(cls: type[T], data: Any, where: str | None = None) -> T:
    """Rebuild dataclass ``cls`` from :func:`to_data`'s output; ``ValueError`` if malformed."""
    where = where or cls.__name__
    if not isinstance(data, Mapping):
        raise RulesError(f"{where} must be a JSON object, got {type(data).__name__}")
    if issubclass(cls, JsonState):
        data = _versioned(cls, data) if cls.VERSION is not None else cls.filled(data)
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in _fields(cls):
        name = f.metadata.get(_KEY, f.name)
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RulesError(f"{where} is missing {name!r}")
            continue
        h = f.metadata.get(_HOOK)
        at = f"{where}.{name}"
        raw = data[name]
        if h is not None and h.shape_of is not None:
            value = h.decode(raw, at, h.shape_of(data, where))  # type: ignore[call-arg, misc]
        elif h is not None and h.decode is not None:
            value = h.decode(raw, at)
        else:
            value = decode(hints[f.name], raw, at)
        declared = rule_of(f)
        if declared is not None:
            declared(at, value)
        kwargs[f.name] = value
    try:
        state = cls(**kwargs)
    except TypeError as exc:
        raise RulesError(f"malformed {where}: {exc}") from None
    return state.restored() if isinstance(state, JsonState) else state


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
        if type(data) in arms and type(data) in _SCALARS:
            return data  # an int stays an int in ``float | int``, whichever arm comes first
        for arm in arms:
            try:
                return decode(arm, data, where)
            except ValueError:
                continue
        raise RulesError(f"{where}: {data!r} matches none of {hint}")
    if data is None and hint is not type(None):
        raise RulesError(f"{where} must not be null")
    if origin is Literal:
        if data not in args:
            raise RulesError(f"{where} must be one of {list(args)}, got {data!r}")
        return data
    if origin in (frozenset, set):
        if not isinstance(data, (list, tuple)):
            raise RulesError(f"{where} must be a list, got {type(data).__name__}")
        item = args[0] if args else Any
        members = {decode(item, d, f"{where}[{i}]") for i, d in enumerate(data)}
        return frozenset(members) if origin is frozenset else members
    if origin is tuple or origin is list:
        if not isinstance(data, (list, tuple)):
            raise RulesError(f"{where} must be a list, got {type(data).__name__}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(data) != len(args):
                raise RulesError(f"{where} must have {len(args)} items, got {len(data)}")
            return tuple(
                decode(a, d, f"{where}[{i}]")
                for i, (a, d) in enumerate(zip(args, data, strict=True))
            )
        item = args[0] if args else Any
        items = [decode(item, d, f"{where}[{i}]") for i, d in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(data, Mapping):
            raise RulesError(f"{where} must be an object, got {type(data).__name__}")
        key, val = args if args else (Any, Any)
        return {
            decode(key, k, f"{where} key"): decode(val, v, f"{where}[{k!r}]")
            for k, v in data.items()
        }
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not issubclass(hint, JsonState) and hasattr(hint, "from_dict"):
            if not isinstance(data, Mapping):
                raise RulesError(f"{where} must be a JSON object, got {type(data).__name__}")
            return hint.from_dict(data)
        return from_data(hint, data, where)
    if hint is bool:
        if not isinstance(data, bool):
            raise RulesError(f"{where} must be a bool, got {data!r}")
        return data
    if hint is int:
        if isinstance(data, bool) or not isinstance(data, int):
            if isinstance(data, float) and data.is_integer():
                return int(data)
            if isinstance(data, str) and key_is_int(data):
                return int(data)
            raise RulesError(f"{where} must be an int, got {data!r}")
        return data
    if hint is float:
        return _float(data, where)
    if hint is str:
        if not isinstance(data, str):
            raise RulesError(f"{where} must be a string, got {data!r}")
        return data
    raise TypeError(f"state_codec cannot decode {hint!r} at {where}")  # a programming error


_SCALARS = (bool, int, float, str)


def key_is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _float(data: Any, where: str) -> float:
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise RulesError(f"{where} must be a number, got {data!r}")
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
