"""Sinks reach servers that ask for credentials over HTTPS, with their own secret settings.

The real Alertmanager serves TLS and basic auth from its ``--web.config.file``
(bcrypt-hashed user, a CA made in the test); the Grafana API is the in-process
``FakeGrafana`` behind TLS. A wrong password is a 401 the sink logs and drops,
an untrusted certificate an outage it retries; neither puts the secret in a log.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from aiohttp import web

from streams.lab.launchers import free_port
from streams.settings import Settings
from streams.sinks.alertmanager import AlertmanagerSink
from streams.sinks.credentials import access_for
from streams.sinks.grafana import GrafanaSink
from tests.integration.conftest import SecuredAlertmanager
from tests.integration.harness import TlsFiles, basic_header, client_context
from tests.integration.test_alertmanager_sink import active_alerts, alert, unique_alertname
from tests.integration.test_grafana_sink import T0, FakeGrafana, _change

TOKEN = "glsa_grafana-token-51c2"
PASSWORD = "grafana-password-0b7d"


@pytest.fixture
def tls(secured_alertmanager: SecuredAlertmanager) -> TlsFiles:
    return secured_alertmanager.tls


def am_settings(am: SecuredAlertmanager, password: str | None = None, **more: object) -> Settings:
    values: dict[str, object] = {
        "alertmanager_url": am.url,
        "alertmanager_username": am.user,
        "alertmanager_password": password or am.password,
        "alertmanager_ca_file": am.tls.ca,
        **more,
    }
    return Settings(**values)  # type: ignore[arg-type]


async def deliver_once(settings: Settings, payload: dict) -> tuple[bool, list[str]]:
    """(the outbox emptied, the outcomes reported) after one flush built as the worker does."""
    outcomes: list[str] = []
    access = access_for(settings, "alertmanager")
    async with access.client() as client:
        sink = AlertmanagerSink(
            access.url, client, auth=access.auth, on_result=lambda o, n: outcomes.append(o)
        )
        sink.submit([payload])
        return await sink.flush(), outcomes


async def test_basic_auth_settings_and_a_ca_file_deliver_to_a_secured_alertmanager(
    secured_alertmanager: SecuredAlertmanager,
) -> None:
    am = secured_alertmanager
    name = unique_alertname()
    assert await deliver_once(am_settings(am), alert(name)) == (True, ["sent"])
    auth = httpx.BasicAuth(am.user, am.password)
    async with httpx.AsyncClient(verify=client_context(am.tls.ca), auth=auth) as client:
        (held,) = await active_alerts(client, am.url, name)
    assert held["labels"]["alertname"] == name


async def test_credentials_in_the_url_still_reach_a_secured_alertmanager(
    secured_alertmanager: SecuredAlertmanager,
) -> None:
    am = secured_alertmanager
    url = am.url.replace("https://", f"https://{am.user}:{am.password}@")
    settings = Settings(alertmanager_url=url, alertmanager_ca_file=am.tls.ca)
    assert await deliver_once(settings, alert(unique_alertname())) == (True, ["sent"])


async def test_a_wrong_password_is_rejected_and_logged_without_it(
    secured_alertmanager: SecuredAlertmanager, caplog: pytest.LogCaptureFixture
) -> None:
    am = secured_alertmanager
    wrong = am.password + "-not"
    with caplog.at_level(logging.DEBUG):
        done = await deliver_once(am_settings(am, wrong), alert("X"))
    assert done == (True, ["rejected"])  # a 4xx is dropped: the same request cannot succeed
    assert "alertmanager_rejected status=401" in caplog.text
    assert am.password not in caplog.text


async def test_without_the_ca_the_certificate_is_refused_and_retried(
    secured_alertmanager: SecuredAlertmanager, caplog: pytest.LogCaptureFixture
) -> None:
    am = secured_alertmanager
    with caplog.at_level(logging.DEBUG):
        done = await deliver_once(am_settings(am, alertmanager_ca_file=None), alert("Y"))
    assert done == (False, ["unavailable"])
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text and am.password not in caplog.text


@pytest_asyncio.fixture
async def secured_grafana(tls: TlsFiles) -> AsyncIterator[tuple[FakeGrafana, str]]:
    """``FakeGrafana`` over HTTPS with the test CA's certificate."""
    grafana = FakeGrafana()
    runner = web.AppRunner(grafana.app())
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    try:
        yield grafana, f"https://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("secret", "header"),
    [
        ({"grafana_token": TOKEN}, f"Bearer {TOKEN}"),
        (
            {"grafana_username": "admin", "grafana_password": PASSWORD},
            basic_header("admin", PASSWORD),
        ),
    ],
)
async def test_grafana_sink_sends_its_secret_settings_over_https(
    secured_grafana: tuple[FakeGrafana, str], tls: TlsFiles, secret: dict, header: str
) -> None:
    grafana, url = secured_grafana
    access = access_for(Settings(grafana_url=url, grafana_ca_file=tls.ca, **secret), "grafana")
    async with access.client() as client:
        sink = GrafanaSink(access.url, client, auth=access.auth)
        sink.submit([_change("firing", T0)])
        assert await sink.flush()
    ((method, path, _, sent),) = grafana.requests
    assert (method, path, sent) == ("POST", "/api/annotations", header)


def test_no_secret_in_the_access_repr() -> None:
    access = access_for(Settings(grafana_url="https://g", grafana_token=TOKEN), "grafana")
    assert TOKEN not in repr(access) and TOKEN not in repr(access.auth)
