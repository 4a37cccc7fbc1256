"""Catalogs shipped as package data, read here and handed to the pure detectors.

``xid.toml`` (XID → severity and recovery action, with the "nvidia" and
"report" profiles) and ``features.toml`` (which Prometheus series become which
node feature) travel inside the package (pyproject ``package-data``), so they
are read with :mod:`importlib.resources`, not from a path. Operator files (an
XID override, extra features) go through the same reader: one TOML loader, and
the detectors validate what it read.
"""

from __future__ import annotations

import copy
import functools
import os
import tomllib
from collections.abc import Callable, Iterable
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from detectors.errors import CatalogError
from detectors.features import FeatureSpec, features_from_data, merge_features, select_features
from detectors.xid.catalog import XidCatalog

if TYPE_CHECKING:
    from streams.settings import Settings

__all__ = [
    "DEFAULT_FEATURES",
    "FEATURE_CATALOG_RESOURCE",
    "XID_CATALOG_RESOURCE",
    "features_for",
    "load_feature_catalog",
    "load_xid_catalog",
    "xid_catalog_data",
]

XID_CATALOG_RESOURCE = "xid.toml"
FEATURE_CATALOG_RESOURCE = "features.toml"

FilePath = str | os.PathLike[str]
T = TypeVar("T")


def read_catalog_file(path: FilePath, what: str) -> dict[str, Any]:
    """An operator's catalog file, parsed; ``ValueError`` naming the file when it is not
    TOML (``what`` says which catalog), ``FileNotFoundError`` when it is missing."""
    name = os.fspath(path)
    with open(name, "rb") as fh:
        try:
            return tomllib.load(fh)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise CatalogError(f"{name}: not valid TOML: {exc}") from None
        except RecursionError:
            raise CatalogError(f"{name}: nested too deeply to be {what}") from None


@functools.cache
def _shipped(resource: str) -> dict[str, Any]:
    # parsed once: tomllib takes ~10 ms for xid.toml, and the fuzzer loads catalogs 100,000 times
    return tomllib.loads(resources.files(__package__).joinpath(resource).read_text("utf-8"))


def _validated(build: Callable[[], T], path: FilePath | None) -> T:
    """``build()``, its ``ValueError`` prefixed with the operator file it came from."""
    try:
        return build()
    except ValueError as exc:
        if path is None:
            raise
        raise CatalogError(f"{os.fspath(path)}: {exc}") from None


def xid_catalog_data() -> dict[str, Any]:
    """The shipped ``xid.toml``, parsed (all profiles); a fresh copy the caller may change."""
    return copy.deepcopy(_shipped(XID_CATALOG_RESOURCE))


def load_xid_catalog(profile: str = "nvidia", overrides: FilePath | None = None) -> XidCatalog:
    """The XID catalog for ``profile``, with an operator override file merged over it.

    The override file has the shape of one profile body (``[unknown]``,
    ``[xid.<code>]``, ``[xid.<code>.substatus."<key>"]``). A file that is not
    valid TOML, or whose entries do not validate, raises ``ValueError`` naming
    the file; a missing file raises ``FileNotFoundError``.
    """
    body = None if overrides is None else read_catalog_file(overrides, "an XID override")
    return _validated(
        lambda: XidCatalog.from_data(xid_catalog_data(), profile=profile, overrides=body),
        overrides,
    )


def load_feature_catalog(files: Iterable[FilePath] = ()) -> tuple[FeatureSpec, ...]:
    """The shipped features with each operator file's merged in, in order.

    A file has the shape of ``features.toml`` (``[[feature]]`` tables): a feature
    whose name is already in the catalog replaces it in place, a new one is
    appended. Errors name the file, as for :func:`load_xid_catalog`.
    """
    catalog = DEFAULT_FEATURES
    for path in files:
        data = read_catalog_file(path, "a feature catalog")
        catalog = merge_features(
            catalog, _validated(functools.partial(features_from_data, data), path)
        )
    return catalog


def features_for(settings: Settings) -> tuple[FeatureSpec, ...]:
    """The features a process runs with: the catalog plus ``feature_files``, restricted to
    ``features`` (all when unset)."""
    return select_features(load_feature_catalog(settings.feature_files), settings.features)


DEFAULT_FEATURES: tuple[FeatureSpec, ...] = features_from_data(_shipped(FEATURE_CATALOG_RESOURCE))
"""The shipped feature catalog (``features.toml``)."""
