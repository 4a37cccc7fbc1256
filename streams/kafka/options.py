"""How every peerwatch process logs in to Kafka: the ``kafka_*`` settings as client options.

``client_options`` feeds aiokafka (ingest producer, membership follower, topic admin,
xid-log, demo), ``faust_credentials`` feeds the worker's Faust app: one translation, so
all of them speak the same security protocol, mechanism and certificates.

aiokafka reports a refused password and a broker that is not there alike ("Unable to
bootstrap"); ``raise_if_login_refused`` asks a broker once more and turns a refusal into
``KafkaLoginError``, which callers do not retry. Its message names the broker, protocol,
mechanism and user, never the password.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.conn import collect_hosts, create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from detectors.errors import PeerwatchError
from streams.settings import Settings

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT

_REFUSED = (
    SaslAuthenticationFailed,
    AuthenticationFailedError,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
    ssl.SSLCertVerificationError,
)


class KafkaLoginError(PeerwatchError, ConnectionError):
    """A broker refused peerwatch's credentials or certificate, or the TLS files are unusable."""


def _password(settings: Settings) -> str | None:
    secret = settings.kafka_password  # kafka_password_file was read into it (streams.settings)
    return None if secret is None else secret.get_secret_value()


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context for SSL / SASL_SSL (hostname checked), None for plaintext protocols."""
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    cafile, certfile = settings.kafka_ca_file, settings.kafka_cert_file
    try:
        context = ssl.create_default_context(cafile=cafile)
        if certfile is not None:
            context.load_cert_chain(certfile, settings.kafka_key_file)
    except OSError as exc:  # missing file, or not PEM (ssl.SSLError is an OSError)
        raise KafkaLoginError(f"Kafka TLS files ({cafile}, {certfile}): {exc}") from None
    return context


def client_options(settings: Settings) -> dict[str, Any]:
    """``bootstrap_servers`` and the security keywords for an aiokafka client."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.broker_host_port,
        "security_protocol": settings.kafka_security_protocol,
        "ssl_context": ssl_context(settings),
    }
    if settings.kafka_security_protocol.startswith("SASL_"):
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_username
        options["sasl_plain_password"] = _password(settings)
    return options


def faust_credentials(settings: Settings) -> CredentialsT | None:
    """Faust's ``broker_credentials`` for the same settings (None: plaintext, no login)."""
    # imported here: the ingest uses this module too, and runs without Faust
    from faust.auth import SASLCredentials, SSLCredentials

    context = ssl_context(settings)
    if settings.kafka_security_protocol.startswith("SASL_"):
        # Faust picks SASL_SSL when given a context, SASL_PLAINTEXT otherwise
        return SASLCredentials(
            username=settings.kafka_username,
            password=_password(settings),
            ssl_context=context,
            mechanism=settings.kafka_sasl_mechanism,
        )
    if context is not None:
        return SSLCredentials(context)
    return None


def describe(settings: Settings) -> str:
    """Who logs in where, for messages: broker, protocol, mechanism and user (no secret)."""
    who = f"{settings.broker_host_port} over {settings.kafka_security_protocol}"
    if settings.kafka_security_protocol.startswith("SASL_"):
        who += f" ({settings.kafka_sasl_mechanism} as {settings.kafka_username!r})"
    return who


async def raise_if_login_refused(settings: Settings, timeout_s: float = 10.0) -> None:
    """``KafkaLoginError`` if a bootstrap broker refuses the login or its certificate fails
    verification; returns if one accepts it or none answers (an outage: callers retry)."""
    options = client_options(settings)
    servers = options.pop("bootstrap_servers")
    for host, port, _ in collect_hosts(servers):
        try:
            conn = await asyncio.wait_for(
                create_conn(host, port, request_timeout_ms=int(timeout_s * 1000), **options),
                timeout_s,
            )
        except _REFUSED as exc:
            refused = f"Kafka at {describe(settings)} refused the login: {exc}"
            raise KafkaLoginError(refused) from None
        except (OSError, KafkaError, TimeoutError):
            continue
        conn.close()
        return


async def start_client(client: AIOKafkaProducer | AIOKafkaConsumer, settings: Settings) -> None:
    """Start an aiokafka client built from ``client_options``; if it fails, it is stopped
    and a refused login raises ``KafkaLoginError`` rather than aiokafka's KafkaError."""
    try:
        await client.start()
    except KafkaError:
        await client.stop()
        await raise_if_login_refused(settings)
        raise
