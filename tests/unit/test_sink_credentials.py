"""streams.sinks.credentials: a sink's URL loses its userinfo; auth from it or from the sink's
secret settings (which win)."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from streams.settings import Settings
from streams.sinks.credentials import access_for, without_userinfo


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


def _authorization(auth: httpx.Auth | None) -> str | None:
    if auth is None:
        return None
    return next(auth.auth_flow(httpx.Request("GET", "http://x"))).headers.get("Authorization")


@pytest.mark.parametrize(
    ("settings", "header"),
    [
        ({"alertmanager_url": "http://am:9093"}, None),
        ({"alertmanager_url": "http://u:p@am:9093"}, "Basic dTpw"),
        (
            {"alertmanager_url": "http://u:p@am:9093", "alertmanager_token": "t"},
            "Bearer t",
        ),
        (
            {
                "alertmanager_url": "http://u:p@am:9093",
                "alertmanager_username": "v",
                "alertmanager_password": "q",
            },
            "Basic djpx",
        ),
    ],
)
def test_a_sinks_secret_settings_win_over_the_urls_userinfo(
    settings: dict[str, str], header: str | None
) -> None:
    access = access_for(Settings(**settings), "alertmanager")  # type: ignore[arg-type]
    assert access.url == "http://am:9093"
    assert _authorization(access.auth) == header


def test_grafana_token_becomes_a_bearer_header_and_its_ca_file_is_kept(tmp_path: Path) -> None:
    access = access_for(
        Settings(grafana_url="https://g", grafana_token="tok", grafana_ca_file=tmp_path / "ca"),
        "grafana",
    )
    assert _authorization(access.auth) == "Bearer tok"
    assert access.ca_file == tmp_path / "ca"
