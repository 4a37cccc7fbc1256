"""The ingest's per-request access log is off unless asked for (a fleet writes thousands of
requests a second; refusals and errors have lines of their own either way)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from streams.ingest import server
from streams.settings import Settings


@pytest.mark.parametrize(("setting", "logger"), [(False, None), (True, web.access_logger)])
def test_the_access_log_follows_its_setting(
    monkeypatch: pytest.MonkeyPatch, setting: bool, logger: Any
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(server.web, "run_app", lambda app, **options: seen.update(options))
    server.run_ingest(Settings(ingest_access_log=setting))
    assert seen["access_log"] is logger
