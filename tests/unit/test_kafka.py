"""streams.kafka.options and the kafka_* settings: one translation of the security settings for
aiokafka and Faust; half-configured security is refused; the password is never shown."""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

import pytest
from faust.auth import SASLCredentials, SSLCredentials
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import ValidationError

from streams.kafka.options import KafkaLoginError, client_options, describe, faust_credentials
from streams.settings import Settings
from tests.integration.harness import make_tls_files

SECRET = "pw-MARKER-91c4"


def sasl(protocol: str = "SASL_PLAINTEXT", **more: Any) -> Settings:
    fields = {
        "kafka": "kafka://b1:9093;kafka://b2:9093",
        "kafka_security_protocol": protocol,
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_username": "peerwatch",
        "kafka_password": SECRET,
    }
    return Settings(**(fields | more))


def test_plaintext_needs_no_login_and_no_tls() -> None:
    options = client_options(Settings(kafka="kafka://b1:9092"))
    assert options == {
        "bootstrap_servers": "b1:9092",
        "security_protocol": "PLAINTEXT",
        "ssl_context": None,
    }
    assert faust_credentials(Settings()) is None


def test_sasl_settings_become_aiokafka_options() -> None:
    options = client_options(sasl())
    assert options["bootstrap_servers"] == "b1:9093,b2:9093"
    assert options["security_protocol"] == "SASL_PLAINTEXT"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "peerwatch"
    assert options["sasl_plain_password"] == SECRET
    assert options["ssl_context"] is None


def test_tls_verifies_the_broker_against_the_given_ca(tmp_path: Path) -> None:
    pki = make_tls_files(tmp_path, client="peerwatch")
    context = client_options(sasl("SASL_SSL", kafka_ca_file=pki.ca))["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "peerwatch test CA"),),)
    ]


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [("SASL_PLAINTEXT", SASLCredentials), ("SASL_SSL", SASLCredentials), ("SSL", SSLCredentials)],
)
def test_faust_gets_the_same_options_as_aiokafka(
    tmp_path: Path, protocol: str, expected: type
) -> None:
    """Faust turns its credentials into aiokafka options itself: they must match ours."""
    pki = make_tls_files(tmp_path, client="peerwatch")
    tls = {"kafka_ca_file": pki.ca} if protocol.endswith("SSL") else {}
    if protocol == "SSL":
        settings = Settings(
            kafka_security_protocol="SSL",
            kafka_cert_file=pki.client_cert,
            kafka_key_file=pki.client_key,
            **tls,
        )
    else:
        settings = sasl(protocol, **tls)
    credentials = faust_credentials(settings)
    assert isinstance(credentials, expected)
    faust_options = credentials_to_aiokafka_auth(credentials)
    ours = client_options(settings)
    del ours["bootstrap_servers"]
    assert faust_options.keys() == ours.keys()
    assert {k: v for k, v in faust_options.items() if k != "ssl_context"} == {
        k: v for k, v in ours.items() if k != "ssl_context"
    }
    assert (faust_options["ssl_context"] is None) == (ours["ssl_context"] is None)


def test_the_password_can_come_from_a_file(tmp_path: Path) -> None:
    """A mounted Secret; the file's trailing newline is not part of the password."""
    secret = tmp_path / "password"
    secret.write_text(SECRET + "\n")
    settings = sasl(kafka_password=None, kafka_password_file=secret)
    assert client_options(settings)["sasl_plain_password"] == SECRET


@pytest.mark.parametrize("field", ["kafka_ca_file", "kafka_cert_file"])
def test_an_unreadable_tls_file_is_a_login_error_naming_it(tmp_path: Path, field: str) -> None:
    pki = make_tls_files(tmp_path, client="peerwatch")
    settings = Settings(
        kafka_security_protocol="SSL",
        kafka_ca_file=pki.ca,
        kafka_cert_file=pki.client_cert,
        kafka_key_file=pki.client_key,
    )
    settings = settings.model_copy(update={field: tmp_path / "missing.pem"})
    with pytest.raises(KafkaLoginError, match=re.escape("missing.pem")):
        client_options(settings)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"kafka_security_protocol": "SASL_SSL"}, "set kafka_username and kafka_password"),
        (
            {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_username": "u"},
            "set kafka_username and kafka_password",
        ),
        ({"kafka_password": SECRET}, "are set but kafka_security_protocol is PLAINTEXT"),
        (
            {"kafka_security_protocol": "PLAINTEXT", "kafka_ca_file": "ca.pem"},
            "kafka_ca_file/cert_file/key_file are set but",
        ),
        (
            {"kafka_security_protocol": "SSL", "kafka_cert_file": "client.pem"},
            "kafka_cert_file and kafka_key_file go together",
        ),
    ],
)
def test_half_configured_security_is_refused_without_showing_the_password(
    fields: dict[str, Any], problem: str
) -> None:
    """Each would connect with less security than meant; pydantic's message of a model-level
    error printed every input, the password too, until inputs were hidden."""
    with pytest.raises(ValidationError, match=re.escape(problem)) as caught:
        Settings(**fields)
    assert SECRET not in str(caught.value)


def test_the_password_is_not_in_repr_dump_or_description() -> None:
    settings = sasl()
    assert SECRET not in repr(settings)
    assert SECRET not in settings.model_dump_json()
    assert (
        describe(settings) == "b1:9093,b2:9093 over SASL_PLAINTEXT (SCRAM-SHA-512 as 'peerwatch')"
    )
    assert SECRET not in repr(faust_credentials(settings))
