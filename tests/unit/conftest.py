"""Fixtures several unit-test modules share."""

from __future__ import annotations

import pytest

from detectors.xid.catalog import XidCatalog
from streams.catalog import load_xid_catalog


@pytest.fixture(scope="module")
def nvidia() -> XidCatalog:
    """The shipped XID catalog of NVIDIA's resolution buckets."""
    return load_xid_catalog("nvidia")


@pytest.fixture(scope="module")
def report() -> XidCatalog:
    """The shipped XID catalog of the source report's simpler mapping."""
    return load_xid_catalog("report")
