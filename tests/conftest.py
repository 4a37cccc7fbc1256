"""Run order for the whole suite: the tests marked ``long`` (tens of seconds each, most of
them waiting on real processes) first, so that under xdist (``-n``, ``--dist loadgroup``:
one test at a time to whichever worker is free) they overlap each other and the short
tests fill the gaps, instead of one of them starting last and running alone."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable
