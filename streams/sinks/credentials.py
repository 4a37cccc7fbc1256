"""Credentials in a sink URL (``http://user:pass@host``) moved into an Authorization header.

httpx logs every request's URL at INFO (``HTTP Request: POST http://...``), and
exceptions and reprs carry it too: a URL with no userinfo cannot leak the password.
The header is what httpx would have built from the userinfo (Basic auth).
"""

from __future__ import annotations

import httpx


def without_userinfo(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """(``url`` with its userinfo removed, Basic auth from it or None)."""
    parsed = httpx.URL(url)
    if not parsed.userinfo:
        return url, None
    auth = httpx.BasicAuth(parsed.username, parsed.password)
    return str(parsed.copy_with(username=None, password=None)), auth
