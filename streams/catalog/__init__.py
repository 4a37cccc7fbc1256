"""Catalogs shipped as package data, read here and handed to the pure detectors.

``xid.toml`` (XID → severity and recovery action, with the "nvidia" and
"report" profiles) travels inside the package (pyproject ``package-data``), so
it is read with :mod:`importlib.resources`, not from a path.
"""

from __future__ import annotations

import copy
import functools
import os
import tomllib
from importlib import resources
from typing import Any

from detectors.xid.catalog import XidCatalog

__all__ = ["XID_CATALOG_RESOURCE", "load_xid_catalog", "xid_catalog_data"]

XID_CATALOG_RESOURCE = "xid.toml"


def xid_catalog_data() -> dict[str, Any]:
    """The shipped ``xid.toml``, parsed (all profiles); a fresh copy the caller may change."""
    return copy.deepcopy(_shipped_catalog())


@functools.cache
def _shipped_catalog() -> dict[str, Any]:
    # parsed once: tomllib takes ~10 ms for it, and the fuzzer loads catalogs 100,000 times
    text = resources.files(__package__).joinpath(XID_CATALOG_RESOURCE).read_text("utf-8")
    return tomllib.loads(text)


def load_xid_catalog(
    profile: str = "nvidia", overrides: str | os.PathLike[str] | None = None
) -> XidCatalog:
    """The XID catalog for ``profile``, with an operator override file merged over it.

    The override file has the shape of one profile body (``[unknown]``,
    ``[xid.<code>]``, ``[xid.<code>.substatus."<key>"]``). A file that is not
    valid TOML, or whose entries do not validate, raises ``ValueError`` naming
    the file; a missing file raises ``FileNotFoundError``.
    """
    override_data: dict[str, Any] | None = None
    if overrides is not None:
        path = os.fspath(overrides)
        with open(path, "rb") as fh:
            try:
                override_data = tomllib.load(fh)
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"{path}: not valid TOML: {exc}") from None
            except RecursionError:
                raise ValueError(f"{path}: nested too deeply to be an XID override") from None
    try:
        return XidCatalog.from_data(xid_catalog_data(), profile=profile, overrides=override_data)
    except ValueError as exc:
        if overrides is None:
            raise
        raise ValueError(f"{os.fspath(overrides)}: {exc}") from None
