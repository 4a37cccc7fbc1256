"""How a sink reaches its server: the URL without credentials, the auth, the CA to trust.

httpx logs every request's URL at INFO (``HTTP Request: POST http://...``), and
exceptions and reprs carry it too: credentials never stay in the URL. They come
from the sink's own secret settings (``alertmanager_password``,
``grafana_token``, ...) or, for compatibility, from the URL's userinfo, which is
moved into Basic auth; the settings win when both are given. ``<sink>_ca_file``
is the CA bundle that verifies the server's HTTPS certificate (default: the
system's).
"""

from __future__ import annotations

import ssl
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import SecretStr

from streams.settings import Settings


class BearerAuth(httpx.Auth):
    """``Authorization: Bearer <token>``, added per request (never a default header that a
    client's repr or a redirect to another host could carry)."""

    def __init__(self, token: str) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request

    def __repr__(self) -> str:
        return "BearerAuth(***)"


def without_userinfo(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """(``url`` with its userinfo removed, Basic auth from it or None)."""
    parsed = httpx.URL(url)
    if not parsed.userinfo:
        return url, None
    auth = httpx.BasicAuth(parsed.username, parsed.password)
    return str(parsed.copy_with(username=None, password=None)), auth


@dataclass(frozen=True)
class SinkAccess:
    url: str  # without userinfo
    auth: httpx.Auth | None
    ca_file: Path | None = None

    def client(self, **options: Any) -> httpx.AsyncClient:
        """An HTTP client that trusts ``ca_file`` (else the system's CAs)."""
        verify: ssl.SSLContext | bool = True
        if self.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(self.ca_file))
        return httpx.AsyncClient(verify=verify, **options)


def sink_access(
    url: str,
    *,
    username: str | None = None,
    password: SecretStr | None = None,
    token: SecretStr | None = None,
    ca_file: Path | None = None,
) -> SinkAccess:
    base, auth = without_userinfo(url)
    chosen: httpx.Auth | None = auth
    if token is not None:
        chosen = BearerAuth(token.get_secret_value())
    elif username is not None and password is not None:
        chosen = httpx.BasicAuth(username, password.get_secret_value())
    return SinkAccess(base, chosen, ca_file)


def access_for(settings: Settings, sink: Literal["alertmanager", "grafana"]) -> SinkAccess:
    """The sink's access from its ``<sink>_url``, ``_username``, ``_password``, ``_token``
    and ``_ca_file`` settings."""
    url = getattr(settings, f"{sink}_url")
    if not url:
        raise ValueError(f"{sink}_url is not set")
    return sink_access(
        url,
        username=getattr(settings, f"{sink}_username"),
        password=getattr(settings, f"{sink}_password"),
        token=getattr(settings, f"{sink}_token"),
        ca_file=getattr(settings, f"{sink}_ca_file"),
    )
