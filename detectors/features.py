"""Feature definitions: which Prometheus series become which node feature.

A *feature* is one number per node per 30-s bucket. It is built from one or
more source series (a metric name plus label matchers); counters become
per-second rates, per-GPU (or per-mount) series are reduced to the node's worst
one, and a ``per`` denominator turns totals into "seconds per request".

The catalog is data, not code branches: ``streams/catalog/features.toml``,
parsed here (:func:`features_from_data`) and read by the ingest's frame builder
and the detectors; operators add features from files and select a subset in
settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, get_args

from detectors.checks import (
    check_fields,
    each,
    is_finite,
    maybe_real,
    one_of,
    real,
    rule,
    text_rule,
)
from detectors.errors import RulesError

DEFAULT_BUCKET_MS = 30_000
"""A feature is one number per node per bucket of this length (``bucket_s`` sets it)."""

Kind = Literal["counter", "gauge"]
Reduce = Literal["max", "min", "sum"]
Direction = Literal["up", "down", "both"]


@dataclass(frozen=True)
class FeatureSpec:
    """How one node feature is derived from Prometheus series and how it is judged.

    ``metrics`` lists the source metric name first and aliases after it (e.g.
    all-smi names beside dcgm-exporter names). ``match`` holds extra label
    equalities a series must carry. ``per`` names a second counter with the same
    other labels; the feature is then rate(metric) / rate(per), e.g. NFS response
    seconds per request. ``reduce`` combines several series of one node (GPUs,
    mounts); for max/min the winning series' ``gpu`` label is remembered so the
    alert can name the GPU. ``direction`` says which deviation is bad.
    ``abs_floor`` and ``rel_floor`` bound the peer spread from below so z stays
    finite when peers are identical. ``collapse_ratio``: a value below this
    fraction of the peer median is a *hard* signature (fires at once), provided
    the median is at least ``collapse_min_median``. ``scored`` is False for
    features that are carried in frames but judged elsewhere (XID, row remaps).
    ``per_gpu`` keeps every GPU's value (frame key ``name@gpu``) instead of
    reducing them: per-GPU trackers (last XID, remapped rows) need each one.
    ``klass`` is the part of the machine a deviation points at (compute,
    network, memory, interconnect, host, cpu): a deviation alert led by this
    feature carries it. ``corroborating`` features (temperatures) only count
    when another feature of the node deviates too: heat alone convicts nothing.
    """

    name: str = field(metadata=rule(text_rule()))
    metrics: tuple[str, ...] = field(metadata=rule(each(text_rule(), non_empty=True)))
    kind: Kind = field(metadata=rule(one_of(*get_args(Kind))))
    reduce: Reduce = field(default="max", metadata=rule(one_of(*get_args(Reduce))))
    direction: Direction = field(default="both", metadata=rule(one_of(*get_args(Direction))))
    abs_floor: float = real(1e-6, above=0, why="keeps z finite")
    rel_floor: float = real(0.01, at_least=0)
    match: Mapping[str, str] = field(default_factory=dict)
    per: str | None = None
    collapse_ratio: float | None = maybe_real(None, above=0, below=1)
    collapse_min_median: float = real(0.0)
    scored: bool = True
    per_gpu: bool = False
    klass: str | None = None
    corroborating: bool = False

    def __post_init__(self) -> None:
        check_fields(self)  # a record with fields required: no Checked parameter class
        if self.per is not None and self.kind != "counter":
            raise ValueError(f"{self.name}: a per-request ratio needs counters")
        if self.per_gpu and self.scored:
            raise ValueError(f"{self.name}: per-GPU features are not peer-scored (scored=False)")


_KINDS: tuple[str, ...] = get_args(Kind)
_REDUCES: tuple[str, ...] = get_args(Reduce)
_DIRECTIONS: tuple[str, ...] = get_args(Direction)


def features_from_data(data: object) -> tuple[FeatureSpec, ...]:
    """The features of a parsed catalog (the shape of ``streams/catalog/features.toml``).

    Every ``[[feature]]`` table becomes a :class:`FeatureSpec`; a field left out
    takes its default. Unknown keys, wrong types and repeated names raise
    ``ValueError`` naming the feature.
    """
    if not isinstance(data, Mapping):
        raise ValueError("a feature catalog must be a table")
    extra = sorted(set(data) - {"feature"})
    if extra:
        raise ValueError(f"feature catalog: unknown top-level key(s) {extra}; expected [[feature]]")
    tables = data.get("feature", [])
    if not isinstance(tables, list):
        raise ValueError("feature catalog: 'feature' must be an array of tables ([[feature]])")
    specs = tuple(_spec(table, i) for i, table in enumerate(tables))
    names = [s.name for s in specs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"feature catalog: feature(s) {', '.join(repeated)} given twice")
    return specs


def merge_features(
    base: Iterable[FeatureSpec], extra: Iterable[FeatureSpec]
) -> tuple[FeatureSpec, ...]:
    """``base`` with ``extra`` merged in: a feature of the same name replaces the base one in
    its place (an operator's alias or floor), a new one is appended."""
    merged = {f.name: f for f in base}
    merged.update((f.name, f) for f in extra)
    return tuple(merged.values())


def _spec(table: object, index: int) -> FeatureSpec:
    if not isinstance(table, Mapping):
        raise ValueError(f"feature #{index + 1}: must be a table")
    name = table.get("name")
    where = f"feature {name}" if isinstance(name, str) and name else f"feature #{index + 1}"
    unknown = sorted(set(table) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(_FIELDS)}")
    missing = [k for k in ("name", "metrics", "kind") if k not in table]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    kwargs = {key: _FIELDS[key](value, f"{where}: {key}") for key, value in table.items()}
    try:
        return FeatureSpec(**kwargs)
    except RulesError as exc:  # a field's declared rule: name the feature, as above
        raise RulesError(f"{where}: {exc}") from None


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _texts(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{where} must be a non-empty list of strings, got {value!r}")
    return tuple(_text(v, where) for v in value)


def _number(value: object, where: str) -> float:
    if not isinstance(value, int | float) or not is_finite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where} must be true or false, got {value!r}")
    return value


def _labels(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a table of label = value, got {value!r}")
    return {_text(k, where): _text(v, where) for k, v in value.items()}


def _one_of(choices: tuple[str, ...]) -> Callable[[object, str], str]:
    def check(value: object, where: str) -> str:
        if value not in choices:
            raise ValueError(f"{where} must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    return check


_FIELDS: dict[str, Callable[[object, str], Any]] = {
    "name": _text,
    "metrics": _texts,
    "kind": _one_of(_KINDS),
    "reduce": _one_of(_REDUCES),
    "direction": _one_of(_DIRECTIONS),
    "abs_floor": _number,
    "rel_floor": _number,
    "match": _labels,
    "per": _text,
    "collapse_ratio": _number,
    "collapse_min_median": _number,
    "scored": _flag,
    "per_gpu": _flag,
    "klass": _text,
    "corroborating": _flag,
}


def per_gpu_key(feature: str, gpu: str) -> str:
    """The frame key of one GPU's value of a per-GPU feature."""
    return f"{feature}@{gpu}"


@lru_cache(maxsize=1 << 14)
def split_per_gpu_key(key: str) -> tuple[str, str] | None:
    """``(feature, gpu)`` for a per-GPU frame key, None for a node feature.

    Cached: every frame repeats the same ~100 keys, and the per-GPU health path
    splits each of them per node and bucket."""
    feature, sep, gpu = key.partition("@")
    return (feature, gpu) if sep else None


def select_features(
    catalog: Iterable[FeatureSpec], names: Iterable[str] | None
) -> tuple[FeatureSpec, ...]:
    """The catalog restricted to ``names`` (all of it when ``names`` is None)."""
    catalog = tuple(catalog)
    if names is None:
        return catalog
    wanted = list(names)
    known = {f.name for f in catalog}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(
            f"unknown feature(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return tuple(f for f in catalog if f.name in set(wanted))


def class_of(signals: Iterable[object], features: Iterable[FeatureSpec]) -> str | None:
    """The class of the strongest signal whose feature has one (signals come strongest first)."""
    klass = {f.name: f.klass for f in features}
    for signal in signals:
        found = klass.get(getattr(signal, "feature", ""))
        if found:
            return found
    return None
