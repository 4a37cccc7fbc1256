"""Who may write to the ingest, and over what: TLS, a bearer token, a basic-auth pair.

A forged ``DCGM_FI_DEV_XID_ERRORS`` sample pages on-call, so writes can be
restricted to holders of one shared credential (what Prometheus' remote_write
``authorization`` / ``basic_auth`` send). Presented credentials are compared
in constant time (``hmac.compare_digest``) and never logged: a failure is
logged by its reason only (``missing``, ``scheme``, ``malformed``, ``wrong``),
at most once per reason per ``LOG_EVERY_S``, and counted in
``peerwatch_ingest_auth_failures_total{reason}``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ssl
from dataclasses import dataclass, field

from streams.settings import Settings
from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.ingest")

LOG_EVERY_S = 60.0
REALM = 'realm="peerwatch"'


@dataclass
class WriteAuth:
    """The accepted credentials: a bearer token, a basic ``user:password``, or both."""

    token: bytes | None = field(default=None, repr=False)
    basic: bytes | None = field(default=None, repr=False)  # b"user:password"
    # reason -> (time of its last log line, failures since)
    _logged: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.token is None and self.basic is None:
            raise ValueError("WriteAuth needs a token or a basic-auth pair")

    @classmethod
    def from_settings(cls, settings: Settings) -> WriteAuth | None:
        """None when the settings ask for no auth (anyone may write)."""
        token = settings.ingest_bearer_token
        password = settings.ingest_basic_auth_password
        if token is None and password is None:
            return None
        basic = None
        if password is not None:
            basic = f"{settings.ingest_basic_auth_username}:{password.get_secret_value()}"
        return cls(
            token=token.get_secret_value().encode() if token is not None else None,
            basic=basic.encode() if basic is not None else None,
        )

    @property
    def schemes(self) -> list[str]:
        return (["Bearer"] if self.token else []) + (["Basic"] if self.basic else [])

    @property
    def challenges(self) -> list[str]:
        """``WWW-Authenticate`` values for a 401, one per accepted scheme."""
        return [f"{scheme} {REALM}" for scheme in self.schemes]

    def failure(self, header: str | None) -> str | None:
        """Why ``header`` (the request's Authorization) is refused, or None if accepted."""
        if not header:
            return "missing"
        scheme, _, value = header.strip().partition(" ")
        scheme = scheme.lower()
        value = value.strip()
        if scheme == "bearer" and self.token is not None:
            return None if hmac.compare_digest(value.encode(), self.token) else "wrong"
        if scheme == "basic" and self.basic is not None:
            try:
                presented = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                return "malformed"
            return None if hmac.compare_digest(presented, self.basic) else "wrong"
        return "scheme"

    def log_failure(self, reason: str, peer: str | None, now_s: float) -> None:
        """Log a refused write by its reason only, at most once per reason per minute."""
        last_s, pending = self._logged.get(reason, (None, 0))
        pending += 1
        if last_s is not None and now_s - last_s < LOG_EVERY_S:
            self._logged[reason] = (last_s, pending)
            return
        log.warning("ingest_auth_failed", reason=reason, peer=peer, failures=pending)
        self._logged[reason] = (now_s, 0)


def server_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The HTTPS context from the cert/key files (requiring client certificates signed by
    ``ingest_tls_client_ca_file`` when set), or None for plain HTTP."""
    if settings.ingest_tls_cert_file is None or settings.ingest_tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.ingest_tls_cert_file, settings.ingest_tls_key_file)
    if settings.ingest_tls_client_ca_file is not None:  # mutual TLS: no cert, no handshake
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=settings.ingest_tls_client_ca_file)
    return context
