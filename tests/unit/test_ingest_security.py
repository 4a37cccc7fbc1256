"""streams.ingest.security: which Authorization headers a write may carry, and why not."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from streams.ingest.security import WriteAuth
from streams.settings import Settings


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


BOTH = WriteAuth(token=b"t0ken", basic=b"prom:pa:ss")


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("Bearer t0ken", None),
        ("bearer   t0ken ", None),  # scheme names are case-insensitive (RFC 9110)
        (basic("prom", "pa:ss"), None),  # the password may hold a colon
        (None, "missing"),
        ("", "missing"),
        ("Bearer t0ke", "wrong"),
        ("Bearer t0kenX", "wrong"),
        ("Bearer ", "wrong"),
        (basic("prom", "pa:sS"), "wrong"),
        (basic("prom2", "pa:ss"), "wrong"),
        ("Basic not*base64", "malformed"),
        ("Digest username=prom", "scheme"),
        ("t0ken", "scheme"),
    ],
)
def test_failure_reason_of_an_authorization_header(header: str | None, reason: str | None) -> None:
    assert BOTH.failure(header) == reason


def test_a_scheme_not_configured_is_refused_even_with_the_other_schemes_secret() -> None:
    only_token = WriteAuth(token=b"t0ken")
    assert only_token.failure(basic("x", "t0ken")) == "scheme"
    assert only_token.challenges == ['Bearer realm="peerwatch"']


def test_no_credentials_configured_means_no_auth() -> None:
    assert WriteAuth.from_settings(Settings()) is None
    with pytest.raises(ValueError, match="token or a basic-auth pair"):
        WriteAuth()


def test_from_settings_takes_the_secrets_from_their_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-a-file\n")  # `echo > file` leaves a newline
    (tmp_path / "password").write_text("pw")
    auth = WriteAuth.from_settings(
        Settings(
            ingest_bearer_token_file=tmp_path / "token",
            ingest_basic_auth_username="prom",
            ingest_basic_auth_password_file=tmp_path / "password",
        )
    )
    assert auth is not None
    assert auth.failure("Bearer from-a-file") is None
    assert auth.failure(basic("prom", "pw")) is None
    assert auth.challenges == ['Bearer realm="peerwatch"', 'Basic realm="peerwatch"']


def test_repr_shows_no_secret() -> None:
    assert "t0ken" not in repr(BOTH) and "pa:ss" not in repr(BOTH)


def test_failures_are_logged_once_a_minute_per_reason_without_the_credential(
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = WriteAuth(token=b"t0ken")
    with caplog.at_level(logging.WARNING, logger="peerwatch.ingest"):
        for second in range(0, 90, 10):  # 9 failures over 90 s
            auth.log_failure("wrong", "10.0.0.7", float(second))
        auth.log_failure("missing", "10.0.0.7", 5.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "ingest_auth_failed reason=wrong peer=10.0.0.7 failures=1",
        "ingest_auth_failed reason=wrong peer=10.0.0.7 failures=6",  # at 60 s: 10..60
        "ingest_auth_failed reason=missing peer=10.0.0.7 failures=1",
    ]
