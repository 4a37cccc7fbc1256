"""streams.sinks.credentials: a sink URL's userinfo becomes Basic auth, the URL loses it."""

from __future__ import annotations

import base64

import httpx
import pytest

from streams.sinks.credentials import without_userinfo


@pytest.mark.parametrize(
    ("url", "stripped", "user", "password"),
    [
        ("http://am:s3cr%40t@127.0.0.1:9093/am/", "http://127.0.0.1:9093/am/", "am", "s3cr@t"),
        ("https://grafana:tok@grafana.example", "https://grafana.example", "grafana", "tok"),
        ("https://user@grafana.example/", "https://grafana.example/", "user", ""),
    ],
)
def test_userinfo_moves_into_basic_auth(url: str, stripped: str, user: str, password: str) -> None:
    base, auth = without_userinfo(url)
    assert base == stripped and "@" not in base
    assert auth is not None
    request = next(auth.auth_flow(httpx.Request("GET", base)))
    expected = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert request.headers["Authorization"] == f"Basic {expected}"


def test_a_url_without_userinfo_is_kept_as_it_is() -> None:
    assert without_userinfo("http://127.0.0.1:9093") == ("http://127.0.0.1:9093", None)
